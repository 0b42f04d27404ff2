"""The party's own CPU per round message: ``PartyService.handle`` on encoded Step messages, in-process.

No gRPC and no coordinator: the benchmark encodes the coordinator's Setup and Step messages once (as
:class:`~dpadmm.backends.grpc_backend.GrpcBackend` does) and times only the party's side of each Step —
identity check, decoding, the round and policy checks, the protocol's step, the budget's journal line,
encoding the reply and the audit line — i.e. what a ``dpadmm party serve`` process spends per round
beyond the transport. Workloads × configurations:

- ``noop``: the self-test protocol (:mod:`dpadmm.backends.selftest`) with ``--size`` floats (10, as
  ``bench_backends.py``'s ``noop-20``), seeded noise (``noise_seed=0``, as that benchmark's engine run);
- ``vertical``: a vertical-sharing party (:mod:`dpadmm.algorithms.vertical`) with ``--rows``
  rows and 3 features, its round's N-vector messages;

configurations: ``simulation`` (no budget, plaintext: no identity check), ``secure`` (the caller's
certificate name checked against the allow list, the state-change echo on, as ``party serve`` runs),
``budgeted`` (vertical only: a private run within ``--max-epsilon``: every Step is checked against the
price and appends a journal line before its reply; also secure).

Each repeat builds a fresh party in a temporary directory, sets it up (not timed) and serves ``--steps``
Steps; the figure is the median over repeats of CPU (``time.process_time_ns``) and wall
(``time.perf_counter_ns``) per ``handle`` call. ``--profile WORKLOAD/CONFIG`` prints a cProfile of one
repeat instead.

    python benchmarks/bench_party_step.py [--steps 400] [--repeats 7] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIGS = {"noop": ("simulation", "secure"), "vertical": ("simulation", "secure", "budgeted")}
PEER = "coordinator"


def _noop(out: Path, config: str, steps: int, size: int):
    from dpadmm.backends import grpc_codec as codec
    from dpadmm.backends.grpc_party import PartyService
    from dpadmm.backends.selftest import PROTOCOL, Broadcast

    secure = config == "secure"
    svc = PartyService(name="p1", protocol=PROTOCOL, data={}, out=out, secure=secure, allow=(PEER,),
                       allow_seeded_noise=True, echo=(lambda line: None) if secure else None)
    allowed = codec.allow_list(PROTOCOL.types)
    setup = {"protocol": "selftest", "party": "p1", "index": 0, "noise_seed": 0,
             "args": ["p1", size, 0.0, None, 3600.0], "rounds": steps}
    mean = np.linspace(0.0, 1.0, size)
    msgs = [codec.encode({"round": t, "inbox": Broadcast(t + 1, mean)}, allowed=allowed) for t in range(steps)]
    return svc, codec.encode(setup, allowed=allowed), msgs, PEER if secure else ""


def _vertical(out: Path, config: str, steps: int, rows: int):
    from dpadmm.algorithms.vertical import messages as vertical_messages, protocol as vertical_protocol
    from dpadmm.backends import grpc_codec as codec
    from dpadmm.backends.grpc_party import PartyService
    from dpadmm.data.parties import write_party_files
    from dpadmm.kernels.regularizers import L2
    from dpadmm.protocol import PartyData

    rng = np.random.default_rng(0)
    paths = write_party_files([rng.normal(size=(rows, 2)), rng.normal(size=(rows, 3))],
                              np.where(rng.random(rows) < .5, 1, -1), out / "data")
    secure = config != "simulation"
    kw = dict(max_epsilon=1e4, delta=1e-5) if config == "budgeted" else {}
    svc = PartyService(name="party2", protocol=vertical_protocol.PROTOCOL, data={"train": str(paths[1])}, out=out / "party",
                       secure=secure, allow=(PEER,), echo=(lambda line: None) if secure else None, **kw)
    allowed = codec.allow_list(vertical_protocol.PROTOCOL.types)
    spec = vertical_messages.PrivacySpec(noise_multiplier=4.0, mechanism="gaussian", relation="feature_column", clip=30.0)
    D = PartyData("train", {"ids": np.arange(rows), "index": 2, "n_features": 3}, (rows, 3))
    opts = {"lam_sum": 1.0, "reg": L2(), "private": spec if config == "budgeted" else None, "bound": None,
            "damping": 0.0, "eval_blocks": {}}
    setup = {"protocol": vertical_protocol.PROTOCOL.name, "party": "party2", "index": 1, "noise_seed": None,
             "args": ["party2", D, opts], "rounds": steps}
    r = np.random.default_rng(1)
    msgs = [codec.encode({"round": t, "inbox": vertical_messages.CoordinatorMessage(t, r.normal(size=rows) * 0.1 * (t > 0),
                                                                     r.normal(size=rows) * (t > 0), 0.5)},
                         allowed=allowed) for t in range(steps)]
    return svc, codec.encode(setup, allowed=allowed), msgs, PEER if secure else ""


def one_repeat(workload: str, config: str, steps: int, size: int, rows: int, profile=None) -> tuple[float, float]:
    """(CPU µs, wall µs) per Step ``handle`` call for one fresh party."""
    tmp = Path(tempfile.mkdtemp(prefix="dpadmm-bench-party-"))
    try:
        build = _noop if workload == "noop" else _vertical
        svc, setup, msgs, peer = build(tmp, config, steps, size if workload == "noop" else rows)
        try:
            svc.handle("Setup", setup, peer)
            svc.handle("Step", msgs[0], peer)  # warm: the first call fills the codec's and the audit's caches
            run = msgs[1:]
            handle = svc.handle
            if profile is not None:
                profile.enable()
            c0, w0 = time.process_time_ns(), time.perf_counter_ns()
            for m in run:
                handle("Step", m, peer)
            c1, w1 = time.process_time_ns(), time.perf_counter_ns()
            if profile is not None:
                profile.disable()
        finally:
            svc.close()
        return (c1 - c0) / len(run) / 1e3, (w1 - w0) / len(run) / 1e3
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--steps", type=int, default=400, help="Step calls per repeat (default 400)")
    ap.add_argument("--repeats", type=int, default=7, help="fresh parties per configuration (default 7)")
    ap.add_argument("--size", type=int, default=10, help="floats in a no-op message (default 10)")
    ap.add_argument("--rows", type=int, default=2000, help="rows of the vertical party (default 2000)")
    ap.add_argument("--only", default=None, help="comma-separated WORKLOAD/CONFIG to run, e.g. noop/secure")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--profile", default=None, metavar="WORKLOAD/CONFIG",
                    help="print a cProfile (cumulative, top 35) of one repeat of this configuration and exit")
    args = ap.parse_args(argv)
    if args.steps < 2 or args.repeats < 1:
        print("error: --steps must be at least 2 and --repeats at least 1", file=sys.stderr)
        return 2
    todo = [(w, c) for w, cs in CONFIGS.items() for c in cs]
    if args.profile or args.only:
        wanted = [x.strip() for x in (args.profile or args.only).split(",")]
        bad = [x for x in wanted if tuple(x.split("/", 1)) not in todo]
        if bad:
            print(f"error: unknown configuration {bad[0]!r}; choose from {['/'.join(t) for t in todo]}", file=sys.stderr)
            return 2
        todo = [tuple(x.split("/", 1)) for x in wanted]
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        one_repeat(*todo[0], args.steps, args.size, args.rows, profile=prof)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
        return 0
    results = []
    samples = {t: [] for t in todo}
    for _ in range(args.repeats):  # configurations alternated within each repeat
        for t in todo:
            samples[t].append(one_repeat(*t, args.steps, args.size, args.rows))
    print(f"party CPU per Step handle call ({args.steps} steps, median of {args.repeats} fresh parties; "
          f"noop {args.size} floats, vertical {args.rows} rows)")
    print(f"{'workload':<10} {'config':<11} {'CPU µs':>8} {'(min–max)':>16} {'wall µs':>8}")
    for (w, c), s in samples.items():
        cpu, wall = [x[0] for x in s], [x[1] for x in s]
        row = {"workload": w, "config": c, "cpu_us": statistics.median(cpu), "cpu_min": min(cpu), "cpu_max": max(cpu),
               "wall_us": statistics.median(wall), "steps": args.steps, "repeats": args.repeats,
               "size": args.size, "rows": args.rows}
        results.append(row)
        print(f"{w:<10} {c:<11} {row['cpu_us']:8.1f} {f'({min(cpu):.1f}–{max(cpu):.1f})':>16} {row['wall_us']:8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
