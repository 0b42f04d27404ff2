"""PSI id alignment over gRPC with mutual TLS: time and bytes for N × N ids.

The coordinator (the label party's organisation, PSI client) holds N ids; one party — a separate
``dpadmm party serve --protocol psi-align`` process on 127.0.0.1 with mutual TLS — holds N ids,
half of them in common. Timed: the whole alignment (:func:`dpadmm.data.psi.align_parties`: Setup,
the party's setup message, the query and its response, the intersection, ``align``), and the
bytes that crossed the wire. Party start-up is not timed.

Usage: ``python benchmarks/bench_psi.py [--n 100000] [--repeats 1] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from dpadmm.backends import grpc_codec as codec
    from dpadmm.backends.grpc_backend import GrpcBackend
    from dpadmm.backends.grpc_tls import TLSFiles, provision
    from dpadmm.fit.psi import align_parties

    n = int(args.n)
    tmp = Path(tempfile.mkdtemp(prefix="dpadmm-bench-psi-"))
    provision(["coordinator", "party2"], tmp / "pki")
    rng = np.random.default_rng(0)
    mine = np.array([f"cust-{i:09d}" for i in rng.permutation(n)])
    theirs = np.array([f"cust-{i:09d}" for i in rng.permutation(np.arange(n // 2, n + n // 2))])
    pd.DataFrame({"id": theirs, "x": np.zeros(n)}).to_csv(tmp / "party2.csv", index=False)
    log = tmp / "party2.log"
    proc = subprocess.Popen([sys.executable, "-m", "dpadmm", "party", "serve", "--name", "party2", "--protocol",
                             "psi-align", "--listen", "127.0.0.1:0", "--tls", str(tmp / "pki" / "party2"),
                             "--data", f"train={tmp / 'party2.csv'}", "--out", str(tmp / "out"),
                             "--max-epsilon", "1", "--delta", "1e-5"],  # a budgeted party: PSI prices nothing
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        while " serving " not in log.read_text():
            if proc.poll() is not None:
                raise RuntimeError(log.read_text())
            time.sleep(0.2)
        port = log.read_text().split("127.0.0.1:")[1].split()[0]
        sizes = []
        enc, dec = codec.encode, codec.decode
        codec.encode = lambda *a, **k: sizes.append(len(b := enc(*a, **k))) or b
        codec.decode = lambda data, *a, **k: sizes.append(len(data)) or dec(data, *a, **k)
        times = []
        for _ in range(args.repeats):
            sizes.clear()
            be = GrpcBackend({"party2": f"127.0.0.1:{port}"}, tls=TLSFiles.load(tls_dir=tmp / "pki" / "coordinator"),
                             timeout=3600)
            t0 = time.perf_counter()
            al = align_parties(be, ["party2"], "train", mine)
            times.append(time.perf_counter() - t0)
            be.close()
        assert len(al.ids) == n // 2
        out = {"n": n, "intersection": int(len(al.ids)), "seconds": times, "median_seconds": float(np.median(times)),
               "wire_megabytes": sum(sizes) / 1e6,
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"PSI {n:,} x {n:,} ids over gRPC + mutual TLS: intersection {out['intersection']:,}; "
          f"{out['median_seconds']:.1f} s (median of {args.repeats}); {out['wire_megabytes']:.1f} MB on the wire")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
