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

``grpc`` sends the rounds' Step frames on each party's raw mutual-TLS round channel (``backends/tls_rounds.py``;
the default of the backend and of ``party serve``); ``grpc-stream`` on one persistent bidirectional gRPC stream
per party (the earlier default); ``grpc-unary`` on one unary call per round, for comparison.

Usage: ``python benchmarks/bench_backends.py [--backends inprocess,process,ray,grpc,grpc-stream,grpc-unary] [--rounds 20]
[--repeats 3] [--workloads vertical,graph,noop-20,noop-2] [--interleave] [--json FILE]``

``--interleave`` runs every backend once per repeat, in turn (A, B, A, B, …; the order alternates), so a change
of machine load hits them alike, and prints each repeat's ratio to the process backend with the spread — the
way to compare backends on a shared machine.

Party budgets (``--budget``): a private vertical a9a fit over gRPC with parties started ``--no-budget``
and with ``--max-epsilon`` after 10 and 5,000 earlier runs in their ledgers (per-round time, and the
setup time that includes pricing the run):
``python benchmarks/bench_backends.py --budget [--rounds 20] [--repeats 3]``
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


def _die_with_parent() -> None:
    """In a spawned party: ask Linux to end it when the benchmark process dies, even by SIGKILL (otherwise a
    killed or crashed benchmark leaves its party servers running; a run once left 300 of them, 20 GB)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the context manager's exit still stops them
        pass


class GrpcParties:
    """``dpadmm party serve`` processes (mutual TLS, 127.0.0.1) for one workload; a context manager."""

    def __init__(self, names, protocol, data=None, accept=False, party_args=("--no-budget", "--allow-seeded-noise"), prefill=None):
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
            args += list(party_args)  # the benchmark's workloads are simulations: no budget unless asked
            # the benchmark's own ledger store (its key in another directory), shared by its parties
            args += ["--ledger", f"sqlite:///{self.dir / 'store' / 'ledger.db'}", "--ledger-key",
                     str(self.dir / "keys" / "ledger.key")]
            if prefill is not None:
                prefill(self.dir / name, name)
            logs[name] = self.dir / f"{name}.log"
            self.procs.append(subprocess.Popen(args, stdout=open(logs[name], "w"), stderr=subprocess.STDOUT,
                                               preexec_fn=_die_with_parent))
        deadline = time.monotonic() + 300
        try:
            for name in names:
                while "serving" not in logs[name].read_text():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"party {name} did not start: {logs[name].read_text()}")
                    time.sleep(0.1)
                self.peers[name] = logs[name].read_text().split(" on ")[1].split()[0]
        except BaseException:
            for p in self.procs:
                p.kill()
            raise

    def backend(self, stream: bool = True, round_transport: str = "tls"):
        from dpadmm.backends.grpc_backend import GrpcBackend
        from dpadmm.backends.grpc_tls import TLSFiles

        return GrpcBackend(self.peers, tls=TLSFiles.load(tls_dir=self.dir / "pki" / "coordinator"), timeout=600,
                           stream=stream, round_transport=round_transport)

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
                         data={f"party{m}": {"train": p} for m, p in enumerate(paths, start=1)},
                         party_args=("--no-budget", "--allow-seeded-noise", "--requests", "score,rank,refit")) as parties:
            be = parties.backend(**_transport(name))
            data = vertical_remote_data(be, [paths[0]], [], normalize=True)
            m = VerticalLogisticRegression(max_iter=rounds, rho=0.3, noise_scale=0.5, random_state=0, monitor=False,
                                           backend=be)
            m.fit(data.train, data.y)
        return per_round(m.history_["seconds"])
    m = VerticalLogisticRegression(max_iter=rounds, rho=0.3, noise_scale=0.5, random_state=0, monitor=False,
                                   backend=make_backend(name))
    m.fit(blocks, y)
    return per_round(m.history_["seconds"])


def _transport(name: str) -> dict:
    """grpc: Step frames on the TLS round channel; grpc-stream: on the gRPC stream; grpc-unary: unary calls."""
    return {"stream": name != "grpc-unary", "round_transport": "tls" if name == "grpc" else "grpc"}


def prefill_ledger(store_dir, data: dict, party: str, entries: int) -> None:
    """A party's budget holding ``entries`` earlier runs (one release each at σ/Δ = 50), as after months of use, in the
    ledger store of ``GrpcParties`` (``store_dir``: its directory)."""
    from dpadmm.privacy.dataset_identity import data_set_id
    from dpadmm.privacy.ledger_store import LedgerStore

    store = LedgerStore(f"sqlite:///{store_dir / 'store' / 'ledger.db'}", store_dir / "keys" / "ledger.key")
    key = data_set_id(party, data).key
    at = (0, "")
    with store.tx():
        at = (lambda rows: (rows[-1][0], rows[-1][3]) if rows else at)(store.entries(key))
        for i in range(entries):
            run = f"earlier/{i}"
            at = store.append(key, "open", {"run": run, "protocol": "vertical-sharing", "party": party, "out": "",
                                            "started": "2026-01-01T00:00:00+00:00", "declared_rounds": 2,
                                            "relation": "feature_column", "delta": 1e-5, "holder": "", "by": "",
                                            "priced": {"gaussian": {"50.0": 1}, "pure_epsilon": 0.0}}, at)
            at = store.append(key, "charge", {"run": run, "round": 1, "g": {"50.0": 1}}, at)
            at = store.append(key, "close", {"run": run, "closed": "2026-01-01T00:00:01+00:00"}, at)
    store.close()


def bench_budget(blocks, y, rounds, entries: int | None):
    """A private vertical a9a fit over gRPC (feature ε = 10 over the run) with parties started with
    ``--no-budget`` (``entries=None``) or ``--max-epsilon 1e6 --delta 1e-5`` and ``entries`` earlier runs
    in their ledgers. Returns (per-round seconds, setup seconds)."""
    import tempfile
    from pathlib import Path

    from dpadmm.cli.party import vertical_remote_data
    from dpadmm.data.parties import write_party_files
    from dpadmm.estimators import VerticalLogisticRegression

    tmp = Path(tempfile.mkdtemp(prefix="dpadmm-bench-budget-"))
    paths = write_party_files(blocks, y, tmp)
    party_args = (["--no-budget"] if entries is None else ["--max-epsilon", "1e6", "--delta", "1e-5"]) + [
        "--requests", "score,rank,refit"]  # the label party refits its block (party2 holds no labels: refused)
    data = {f"party{m}": {"train": p} for m, p in enumerate(paths, start=1)}
    prefill = None if not entries else (lambda out, name: prefill_ledger(out.parent, data[name], name, entries))
    with GrpcParties(["party1", "party2"], "vertical-sharing", party_args=party_args, prefill=prefill,
                     data=data) as parties:
        be = parties.backend()
        data = vertical_remote_data(be, [paths[0]], [], normalize=True)
        m = VerticalLogisticRegression(max_iter=rounds, rho=0.3, epsilon=10.0, delta=1e-5, monitor=False, backend=be)
        m.fit(data.train, data.y)
    return per_round(m.history_["seconds"]), float(m.setup_seconds_)


def bench_graph(name, X, y, rounds, batch=False):
    from dpadmm.estimators.consensus import ConsensusLogisticRegression

    if name.startswith("grpc"):
        with GrpcParties([f"node{i}" for i in range(20)], "graph-consensus", accept=True) as parties:
            m = ConsensusLogisticRegression(n_nodes=20, topology="ring", max_iter=rounds, batch=False, monitor=False,
                                            random_state=0, backend=parties.backend(**_transport(name)))
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
    be = parties.backend(**_transport(name)) if parties is not None else make_backend(name)
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
    ap.add_argument("--interleave", action="store_true", help="repeats outermost: every backend once per repeat, in "
                                                             "turn (A, B, A, B, …), so a change of machine load hits all "
                                                             "alike; prints each repeat's grpc/process ratio and the spread")
    ap.add_argument("--budget", action="store_true", help="only the party-budget workload: a private vertical a9a fit "
                                                         "over gRPC without a budget and with one after 10 and 5,000 "
                                                         "ledger entries")
    args = ap.parse_args(argv)
    if args.budget:
        return main_budget(args)
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
    results, per_repeat = {}, {}
    for wl, fn in workloads.items():
        results[wl] = {}
        if args.interleave:  # A, B, A, B, …: each repeat's medians side by side
            reps = {b: [] for b in backends}
            for r in range(args.repeats):
                for b in (backends if r % 2 == 0 else backends[::-1]):
                    reps[b].append(fn(b))
                print(f"{wl} | repeat {r + 1} | " + ", ".join(f"{b} {1e3 * np.median(reps[b][-1]):.2f}" for b in backends)
                      + " ms / round", flush=True)
            per_repeat[wl] = {b: [float(np.median(v)) for v in reps[b]] for b in backends}
            for b in backends:
                results[wl][b] = float(np.median(np.concatenate(reps[b])))
        for b in backends if not args.interleave else ():
            samples = np.concatenate([fn(b) for _ in range(args.repeats)])
            results[wl][b] = float(np.median(samples))
            print(f"{wl} | {b} | {1e3 * results[wl][b]:.2f} ms / round", flush=True)
        if "inprocess" in backends and wl.startswith("graph"):
            samples = np.concatenate([bench_graph("inprocess", X, y, args.rounds, batch=True)
                                      for _ in range(args.repeats)])
            results[wl]["inprocess-batched"] = float(np.median(samples))
    print(f"\nmedian seconds per round ({args.rounds} rounds x {args.repeats} repeats, first round dropped); "
          f"overhead = backend - inprocess\n")
    print("| workload | backend | ms / round | overhead ms / round | x inprocess |")
    print("|---|---|---|---|---|")
    for wl, row in results.items():
        base = row.get("inprocess")
        for b, v in row.items():
            over = f"{1e3 * (v - base):.2f}" if base is not None and b != "inprocess" else "—"
            ratio = f"{v / base:.2f}" if base else "—"
            print(f"| {wl} | {b} | {1e3 * v:.2f} | {over} | {ratio} |")
    ratios = {}
    if per_repeat and "process" in backends:
        print("\nper repeat (interleaved): no-op workloads (backend − in-process) / (process − in-process), others "
              "backend / process\n")
        print("| workload | backend | median ratio | min | max | per repeat |")
        print("|---|---|---|---|---|---|")
        for wl, row in per_repeat.items():
            for b in backends:
                if b in ("process", "inprocess"):
                    continue
                if wl.startswith("noop") and "inprocess" in row:
                    r = [(g - i) / (p - i) for g, p, i in zip(row[b], row["process"], row["inprocess"])]
                else:
                    r = [g / p for g, p in zip(row[b], row["process"])]
                ratios.setdefault(wl, {})[b] = r
                print(f"| {wl} | {b} | {np.median(r):.2f} | {min(r):.2f} | {max(r):.2f} | "
                      f"{', '.join(f'{v:.2f}' for v in r)} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rounds": args.rounds, "repeats": args.repeats, "median_seconds_per_round": results,
                       **({"per_repeat_seconds": per_repeat, "ratios_over_process": ratios} if per_repeat else {}),
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, fh, indent=2)
    if "ray" in backends:
        import ray

        ray.shutdown()


def bench_party_steps(rounds: int, entries=(None, 10, 5000), n: int = 32561):
    """The party's own cost per round, without the network: three vertical parties (no budget; a budget after
    10 and after 5,000 ledger entries) answer the same encoded Step messages, interleaved round by round (so a
    change of machine load hits all three alike). Returns {entries: median ms per Step}."""
    import tempfile
    from pathlib import Path

    from dpadmm.algorithms.vertical import messages as vertical_messages, protocol as vertical_protocol
    from dpadmm.backends import grpc_codec as codec
    from dpadmm.backends.grpc_party import PartyService
    from dpadmm.data.parties import write_party_files
    from dpadmm.kernels.regularizers import L2
    from dpadmm.protocol import PartyData

    rng = np.random.default_rng(0)
    tmp = Path(tempfile.mkdtemp(prefix="dpadmm-bench-steps-"))
    paths = write_party_files([rng.normal(size=(n, 3)), rng.normal(size=(n, 5))], np.where(rng.random(n) < .5, 1, -1),
                              tmp)
    allowed = codec.allow_list(vertical_protocol.PROTOCOL.types)
    D = PartyData("train", {"ids": np.arange(n), "index": 2, "n_features": 5}, (n, 5))
    spec = vertical_messages.PrivacySpec(noise_multiplier=5.0, mechanism="gaussian", relation="feature_column", clip=30.0)
    services = {}
    for e in entries:
        out = tmp / f"party-{e}"
        if e:
            prefill_ledger(out, "party2", e)
        svc = PartyService(name="party2", protocol=vertical_protocol.PROTOCOL, data={"train": str(paths[1])}, out=out, secure=False,
                           **({} if e is None else {"max_epsilon": 1e9, "delta": 1e-5}))
        svc.handle("Setup", codec.encode({"protocol": vertical_protocol.PROTOCOL.name, "party": "party2", "index": 1,
                                          "rounds": rounds + 1, "args": ["party2", D, {"lam_sum": 1.0, "reg": L2(),
                                                                                       "private": spec}]},
                                         allowed=allowed), "")
        services[e] = svc
    times = {e: [] for e in entries}
    for t in range(rounds):
        msg = codec.encode({"round": t, "inbox": vertical_messages.CoordinatorMessage(t, np.zeros(n), np.ones(n) * (t > 0), 0.5)},
                           allowed=allowed)
        order = list(entries)[t % len(entries):] + list(entries)[:t % len(entries)]
        for e in order:
            t0 = time.perf_counter()
            services[e].handle("Step", msg, "")
            times[e].append(time.perf_counter() - t0)
    for svc in services.values():
        svc.close()
    return {e: 1e3 * float(np.median(v[1:])) for e, v in times.items()}


def main_budget(args):
    from dpadmm.data import load_a9a, partition_columns

    X, y = load_a9a("train")
    blocks = partition_columns(X, [66, 57])
    configs = (("no budget (--no-budget)", None), ("budget, 10 ledger entries", 10),
               ("budget, 5,000 ledger entries", 5000))
    runs = {label: [] for label, _ in configs}
    for _ in range(args.repeats):  # interleaved, so a change of machine load hits every configuration alike
        for label, entries in configs:
            runs[label].append(bench_budget(blocks, y, args.rounds, entries))
    rows = {label: (float(np.median(np.concatenate([r[0] for r in rs]))), float(np.median([r[1] for r in rs])))
            for label, rs in runs.items()}
    base = rows["no budget (--no-budget)"][0]
    print(f"\nprivate vertical a9a over gRPC (mTLS), {args.rounds} rounds x {args.repeats} repeats, first round dropped\n")
    print("| party | ms / round | x no budget | setup s (incl. pricing) |")
    print("|---|---|---|---|")
    for label, (v, setup) in rows.items():
        print(f"| {label} | {1e3 * v:.2f} | {v / base:.2f} | {setup:.2f} |")
    steps = bench_party_steps(max(10 * args.rounds, 200))
    print(f"\nthe party's own Step (decode, x-step, noise, ledger check, journal, audit, encode; a9a-sized N), "
          f"{max(10 * args.rounds, 200)} rounds interleaved\n")
    print("| party | ms / Step | x no budget |")
    print("|---|---|---|")
    for e, v in steps.items():
        label = "no budget" if e is None else f"budget, {e:,} ledger entries"
        print(f"| {label} | {v:.3f} | {v / steps[None]:.3f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rounds": args.rounds, "repeats": args.repeats, "budget": rows, "party_steps_ms": steps,
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, fh, indent=2)


if __name__ == "__main__":
    main()
