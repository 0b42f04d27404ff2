"""PSI id alignment: dpadmm's alignment against openmined-psi alone, N × N ids, in one run.

The library alone (``--backend`` any): the same ids through the library's own calls — the server's
setup message, the client's request, the server's response, the client's intersection, each message
serialised and parsed once (what any transport needs) — no dpadmm. Then dpadmm's
:func:`dpadmm.fit.psi.align_parties` on the in-process backend (``inprocess``) and/or over gRPC with
mutual TLS (``grpc``); the printed ratio is dpadmm ÷ library.

The coordinator (the label party's organisation, PSI client) holds N ids; one party — a separate
``dpadmm party serve --protocol psi-align`` process on 127.0.0.1 with mutual TLS — holds N ids,
half of them in common. Timed: the whole alignment (:func:`dpadmm.fit.psi.align_parties`: Setup,
the party's setup message, the query and its response, the intersection, ``align``), and the
bytes that crossed the wire. Party start-up is not timed.

Usage: ``python benchmarks/bench_psi.py [--n 100000] [--repeats 1] [--backend inprocess|grpc|both] [--json FILE]``
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
    ap.add_argument("--backend", choices=("inprocess", "grpc", "both"), default="both")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    n = int(args.n)
    rng = np.random.default_rng(0)
    mine = np.array([f"cust-{i:09d}" for i in rng.permutation(n)])
    theirs = np.array([f"cust-{i:09d}" for i in rng.permutation(np.arange(n // 2, n + n // 2))])
    out = {"n": n, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out["library_seconds"] = [_library_alone(mine, theirs) for _ in range(args.repeats)]
    lib = float(np.median(out["library_seconds"]))
    print(f"PSI {n:,} x {n:,} ids, openmined-psi alone: {lib:.1f} s (median of {args.repeats})", flush=True)
    if args.backend in ("inprocess", "both"):
        out["inprocess_seconds"] = [_inprocess(mine, theirs, n) for _ in range(args.repeats)]
        t = float(np.median(out["inprocess_seconds"]))
        print(f"PSI {n:,} x {n:,} ids, dpadmm in-process: {t:.1f} s; dpadmm / library = {t / lib:.2f}", flush=True)
    if args.backend in ("grpc", "both"):
        out.update(_grpc(mine, theirs, n, args.repeats))
        t = out["median_seconds"]
        print(f"PSI {n:,} x {n:,} ids over gRPC + mutual TLS: intersection {out['intersection']:,}; "
              f"{t:.1f} s (median of {args.repeats}); {out['wire_megabytes']:.1f} MB on the wire; "
              f"dpadmm / library = {t / lib:.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


def _library_alone(mine, theirs) -> float:
    """The library's own calls for the same ids (no dpadmm), each message serialised and parsed once."""
    import private_set_intersection.python as psi

    t0 = time.perf_counter()
    server = psi.server.CreateWithNewKey(True)
    client = psi.client.CreateWithNewKey(True)
    setup = psi.ServerSetup()
    setup.ParseFromString(server.CreateSetupMessage(1e-9, len(mine), theirs.tolist(),
                                                    psi.DataStructure.RAW).SerializeToString())
    req = psi.Request()
    req.ParseFromString(client.CreateRequest(mine.tolist()).SerializeToString())
    resp = psi.Response()
    resp.ParseFromString(server.ProcessRequest(req).SerializeToString())
    hits = client.GetIntersection(setup, resp)
    seconds = time.perf_counter() - t0
    assert len(hits) == len(mine) // 2
    return seconds


def _inprocess(mine, theirs, n) -> float:
    from dpadmm.backends.inprocess import InProcessBackend
    from dpadmm.fit.psi import align_parties
    from dpadmm.privacy.policy import PartyPolicy
    from dpadmm.runtime.local import PartyOperator

    tmp = Path(tempfile.mkdtemp(prefix="dpadmm-bench-psi-"))
    pd.DataFrame({"id": theirs, "x": np.zeros(n)}).to_csv(tmp / "party2.csv", index=False)
    op = PartyOperator(policy=PartyPolicy(no_budget=True), out=str(tmp / "out"), data={"train": str(tmp / "party2.csv")})
    be = InProcessBackend(policies={"party2": op})
    t0 = time.perf_counter()
    al = align_parties(be, ["party2"], "train", mine)
    seconds = time.perf_counter() - t0
    be.close()
    assert len(al.ids) == n // 2
    return seconds


def _grpc(mine, theirs, n, repeats) -> dict:
    from dpadmm.backends import grpc_codec as codec
    from dpadmm.backends.grpc_backend import GrpcBackend
    from dpadmm.backends.grpc_tls import TLSFiles, provision
    from dpadmm.fit.psi import align_parties

    tmp = Path(tempfile.mkdtemp(prefix="dpadmm-bench-psi-"))
    provision(["coordinator", "party2"], tmp / "pki")
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
        for _ in range(repeats):
            sizes.clear()
            be = GrpcBackend({"party2": f"127.0.0.1:{port}"}, tls=TLSFiles.load(tls_dir=tmp / "pki" / "coordinator"),
                             timeout=3600)
            t0 = time.perf_counter()
            al = align_parties(be, ["party2"], "train", mine)
            times.append(time.perf_counter() - t0)
            be.close()
        assert len(al.ids) == n // 2
        codec.encode, codec.decode = enc, dec
        return {"intersection": int(len(al.ids)), "seconds": times, "median_seconds": float(np.median(times)),
                "wire_megabytes": sum(sizes) / 1e6}
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
