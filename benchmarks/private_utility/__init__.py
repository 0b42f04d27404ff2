"""Private-utility benchmark modules (issue 18), run by ``benchmarks/bench_private_utility.py`` or standalone."""

from __future__ import annotations

import numpy as np


def progress_line(name: str, eps: float, rows: list[dict], seeds: int, trivial: float, non_private: float) -> str:
    """One progress line after the ``seeds`` rows of a (dataset, ε) cell."""
    return (f"{name} eps={eps:g}: private {np.mean([r['private'] for r in rows[-seeds:]]):.4g} "
            f"(trivial {trivial:.4g}, non-private {non_private:.4g})")


def standalone(run, columns: list[tuple[str, str, str]]) -> None:
    """``python benchmarks/private_utility/<module>.py [--quick] [--seeds S]``: ``run`` at ε ∈ {0.5, 1, 2, 5}, then
    a table of its private rows, one column per ``(header, row key, format spec)`` (spec: alignment and width
    first, e.g. ``">10.4f"``)."""
    import argparse
    import re

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    out = run(quick=a.quick, seeds=a.seeds, epsilons=[0.5, 1.0, 2.0, 5.0])
    print("".join(format(h, re.match(r"[<>]\d+", f).group(0)) for h, _, f in columns))
    for r in out:
        if r["side"] != "non-private":
            print("".join(format(r[k] if r[k] is not None else "", f if r[k] is not None else re.match(r"[<>]\d+", f).group(0))
                          for _, k, f in columns))
