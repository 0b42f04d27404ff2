"""Start-up time of the CLI: ``dpadmm --help`` and an argument error vs ``python -c "import numpy"``.

Goal (issue 13): ``dpadmm --help`` ≤ 5 × ``import numpy``, medians of 5 runs measured in the same
run, interleaved so that machine load affects both alike. Also lists the heavy modules that
``import dpadmm`` and ``import dpadmm.cli`` load (there should be none).

    python benchmarks/bench_cli_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
HEAVY = ["sklearn", "pandas", "networkx", "matplotlib", "dp_accounting", "scipy.signal", "statsmodels", "scipy.sparse"]


def _time(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    py = sys.executable
    cmds = {
        "python -c 'import numpy'": [py, "-c", "import numpy"],
        "dpadmm --help": [py, "-m", "dpadmm", "--help"],
        "dpadmm vertical admm --epsilon abc": [py, "-m", "dpadmm", "vertical", "admm", "--epsilon", "abc"],
        "python -c 'import dpadmm'": [py, "-c", "import dpadmm"],
    }
    times = {k: [] for k in cmds}
    for _ in range(args.runs):  # interleaved
        for k, c in cmds.items():
            times[k].append(_time(c, env))
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["python -c 'import numpy'"]
    print(f"medians of {args.runs} runs (interleaved), this machine, now:")
    for k, v in med.items():
        print(f"  {k:<32} {v:6.3f} s   {v / base:5.2f} x import numpy")
    code = ("import sys, dpadmm, dpadmm.cli; print(','.join(m for m in %r if m in sys.modules))" % HEAVY)
    loaded = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True).stdout.strip()
    print(f"heavy modules loaded by `import dpadmm, dpadmm.cli`: {loaded or 'none'}")
    ratio = med["dpadmm --help"] / base
    print(f"dpadmm --help / import numpy = {ratio:.2f} (goal <= 5): {'met' if ratio <= 5 else 'NOT met'}")


if __name__ == "__main__":
    main()
