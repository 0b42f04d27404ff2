"""Per-round overhead of each backend (in-process, process, Ray, gRPC with mutual TLS).

Workloads (same step functions on every backend; only steps are timed, via ``history_["seconds"]``):

1. ``vertical-a9a``: a9a (32,561 × 123), 2 parties (66 / 57 columns), DP ADMM sharing (σ given);
   every round moves three N-vectors per party (260 kB each).
2. ``graph-20``: 20-node ring, consensus M-ADMM [Zhang] with one party per node (``batch=False``),
   a9a rows split evenly; every round moves one d-vector per node. The in-process batched fast path
   (``batch=True``, all nodes as one stacked block) is reported alongside.
3. ``noop-20`` / ``noop-2x32561``: the self-test protocol (:mod:`dpadmm.backends.selftest`) with no
   work — pure backend overhead for 20 parties × 10 floats and 2 parties × 32,561 floats.

Per-round time = median over rounds (after the first, which includes warm-up) and repeats; the
overhead is that minus the in-process median in the same process. Ray must run in a loopback-only
network namespace on machines without a public route (Ray probes an external address otherwise):

    unshare -n -p -f --mount-proc sh -c 'ip link set lo up; python benchmarks/bench_backends.py'

gRPC: every party is a separate ``dpadmm party serve`` process on 127.0.0.1 with mutual TLS
(certificates from ``dpadmm provision`` in a temporary directory), one BLAS thread each, as the
process backend's workers; the vertical parties read their own CSV files, the graph nodes accept
their data from the coordinator (``--accept-coordinator-data``); party start-up and setup are not
timed (only steps are, as for every backend).

``grpc`` sends the rounds on one persistent bidirectional stream per party (the default of the
backend); ``grpc-unary`` on one unary call per round (the earlier transport), for comparison.

Usage: ``python benchmarks/bench_backends.py [--backends inprocess,process,ray,grpc,grpc-unary] [--rounds 20]
[--repeats 3] [--workloads vertical,graph,noop-20,noop-2] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def per_round(history_seconds) -> np.ndarray:
    s = np.diff(np.concatenate([[0.0], np.asarray(history_seconds, dtype=float)]))
    return s[1:]  # drop round 1 (warm-up)


class GrpcParties:
    """``dpadmm party serve`` processes (mutual TLS, 127.0.0.1) for one workload; a context manager."""

    def __init__(self, names, protocol, data=None, accept=False):
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        from dpadmm.backends.grpc_tls import provision

        self.dir = Path(tempfile.mkdtemp(prefix="dpadmm-bench-grpc-"))
        provision(["coordinator", *names], self.dir / "pki")
        self.procs, self.peers = [], {}
        logs = {}
        for name in names:
            args = [sys.executable, "-m", "dpadmm", "party", "serve", "--protocol", protocol, "--name", name,
                    "--listen", "127.0.0.1:0", "--tls", str(self.dir / "pki" / name), "--out", str(self.dir / name)]
            for key, path in (data or {}).get(name, {}).items():
                args += ["--data", f"{key}={path}"]
            if accept:
                args.append("--accept-coordinator-data")
            args.append("--allow-seeded-noise")  # a benchmark: the workloads are seeded simulations
            logs[name] = self.dir / f"{name}.log"
            self.procs.append(subprocess.Popen(args, stdout=open(logs[name], "w"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 300
        for name in names:
            while "serving" not in logs[name].read_text():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"party {name} did not start: {logs[name].read_text()}")
                time.sleep(0.1)
            self.peers[name] = logs[name].read_text().split(" on ")[1].split()[0]

    def backend(self, stream: bool = True):
        from dpadmm.backends.grpc_backend import GrpcBackend
        from dpadmm.backends.grpc_tls import TLSFiles

        return GrpcBackend(self.peers, tls=TLSFiles.load(tls_dir=self.dir / "pki" / "coordinator"), timeout=600,
                           stream=stream)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        import shutil

        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


def make_backend(name: str):
    from dpadmm.backends import get_backend

    if name == "inprocess":
        return get_backend("inprocess")
    if name == "ray":
        return get_backend("ray", timeout=600)
    return get_backend(name, timeout=600)


def bench_vertical(name, blocks, y, rounds):
    from dpadmm.estimators import VerticalLogisticRegression

    if name.startswith("grpc"):  # the parties read their own files (unnormalised CSV, normalised at the party)
        import tempfile
        from pathlib import Path

        from dpadmm.cli.party import vertical_remote_data
        from dpadmm.data.parties import write_party_files

        tmp = Path(tempfile.mkdtemp(prefix="dpadmm-bench-a9a-"))
        paths = write_party_files(blocks, y, tmp)
        with GrpcParties(["party1", "party2"], "vertical-sharing",
                         data={f"party{m}": {"train": p} for m, p in enumerate(paths, start=1)}) as parties:
            be = parties.backend(stream=name == "grpc")
            data = vertical_remote_data(be, [paths[0]], [], normalize=True)
            m = VerticalLogisticRegression(max_iter=rounds, rho=0.3, noise_scale=0.5, random_state=0, monitor=False,
                                           backend=be)
            m.fit(data.train, data.y)
        return per_round(m.history_["seconds"])
    m = VerticalLogisticRegression(max_iter=rounds, rho=0.3, noise_scale=0.5, random_state=0, monitor=False,
                                   backend=make_backend(name))
    m.fit(blocks, y)
    return per_round(m.history_["seconds"])


def bench_graph(name, X, y, rounds, batch=False):
    from dpadmm.estimators.consensus import ConsensusLogisticRegression

    if name.startswith("grpc"):
        with GrpcParties([f"node{i}" for i in range(20)], "graph-consensus", accept=True) as parties:
            m = ConsensusLogisticRegression(n_nodes=20, topology="ring", max_iter=rounds, batch=False, monitor=False,
                                            random_state=0, backend=parties.backend(stream=name == "grpc"))
            m.fit(X, y)
        return per_round(m.history_["seconds"])
    m = ConsensusLogisticRegression(n_nodes=20, topology="ring", max_iter=rounds, batch=batch, monitor=False,
                                    random_state=0, backend=make_backend(name))
    m.fit(X, y)
    return per_round(m.history_["seconds"])


def bench_noop(name, n_parties, size, rounds):
    from dpadmm import engine
    from dpadmm.backends.selftest import toy_specs

    hub, specs = toy_specs(n_parties, size)
    grpc = name.startswith("grpc")  # grpc: rounds on persistent streams; grpc-unary: one unary call per round
    parties = GrpcParties([s.name for s in specs], "selftest") if grpc else None
    be = parties.backend(stream=name == "grpc") if parties is not None else make_backend(name)
    try:
        res = engine.run(hub=hub, parties=specs, backend=be, rounds=rounds, noise_seed=0, monitor=False)
    finally:
        be.close()
        if parties is not None:
            parties.__exit__(None, None, None)
    return per_round(res.history["seconds"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="inprocess,process,ray")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--workloads", default="vertical,graph,noop-20,noop-2",
                    help="comma-separated subset of: vertical, graph, noop-20, noop-2")
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    backends = [b for b in args.backends.split(",") if b]
    if "ray" in backends:
        try:
            import ray  # noqa: F401
        except ImportError:
            print("Ray not installed: skipping the ray backend")
            backends.remove("ray")
        else:
            ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False,
                     log_to_driver=False)

    from dpadmm.data import load_a9a, normalize_rows, partition_columns

    X, y = load_a9a("train")
    blocks = [normalize_rows(b) for b in partition_columns(X, [66, 57])]
    workloads = {
        "vertical-a9a (2 parties)": lambda b: bench_vertical(b, blocks, y, args.rounds),
        "graph-20 (ring, 1 party per node)": lambda b: bench_graph(b, X, y, args.rounds),
        "noop-20 (20 parties x 10 floats)": lambda b: bench_noop(b, 20, 10, args.rounds),
        "noop-2 (2 parties x 32561 floats)": lambda b: bench_noop(b, 2, 32561, args.rounds),
    }
    keys = dict(zip(("vertical", "graph", "noop-20", "noop-2"), workloads))
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in chosen if w not in keys]
    if unknown:
        ap.error(f"unknown workload {unknown[0]!r}; choose from {', '.join(keys)}")
    workloads = {keys[w]: workloads[keys[w]] for w in chosen}
    results = {}
    for wl, fn in workloads.items():
        results[wl] = {}
        for b in backends:
            samples = np.concatenate([fn(b) for _ in range(args.repeats)])
            results[wl][b] = float(np.median(samples))
        if "inprocess" in backends and wl.startswith("graph"):
            samples = np.concatenate([bench_graph("inprocess", X, y, args.rounds, batch=True)
                                      for _ in range(args.repeats)])
            results[wl]["inprocess-batched"] = float(np.median(samples))
    print(f"\nmedian seconds per round ({args.rounds} rounds x {args.repeats} repeats, first round dropped); "
          f"overhead = backend - inprocess\n")
    print(f"| workload | backend | ms / round | overhead ms / round | x inprocess |")
    print("|---|---|---|---|---|")
    for wl, row in results.items():
        base = row.get("inprocess")
        for b, v in row.items():
            over = f"{1e3 * (v - base):.2f}" if base is not None and b != "inprocess" else "—"
            ratio = f"{v / base:.2f}" if base else "—"
            print(f"| {wl} | {b} | {1e3 * v:.2f} | {over} | {ratio} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rounds": args.rounds, "repeats": args.repeats, "median_seconds_per_round": results,
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, fh, indent=2)
    if "ray" in backends:
        import ray

        ray.shutdown()


if __name__ == "__main__":
    main()
