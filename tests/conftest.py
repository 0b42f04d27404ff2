"""Shared fixtures: small slices of the bundled a9a (fast), the one Ray session, and helpers for CLI tests."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from dpadmm.data import load_a9a, normalize_rows, partition_columns

# One BLAS/OpenMP thread for the tests and the processes they start (the environment is inherited; libraries loaded
# later read it), unless the caller chose: their matrices are small, and on a 2-core machine the libraries' idle
# threads spin, about 10% of the default suite's CPU time. numpy is already loaded by a plugin when this file is
# read, so its BLAS is capped by threadpoolctl as well. The library itself never sets these for a user.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_ONE_THREAD = threadpool_limits(int(os.environ["OPENBLAS_NUM_THREADS"]))

XDIST_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
"""The run's id when pytest-xdist runs the tests in several worker processes (CI's slow suite: ``-n 2``), else None."""
if os.environ.get("PYTEST_XDIST_WORKER"):
    # xdist hands its workers COLUMNS=80; the CLI's tables (which tests parse) are then wrapped narrower than in a
    # sequential run, where output to a file is 200 wide (dpadmm.cli._common._width)
    os.environ.pop("COLUMNS", None)


@functools.cache
def _a9a_train():
    return load_a9a("train")  # read once per session (~0.4 CPU-s a read); callers slice it, never write to it


@pytest.fixture(scope="session")
def a9a_full():
    X, y = _a9a_train()
    Xt, yt = load_a9a("test")
    return X, y, Xt, yt


@pytest.fixture(scope="session")
def a9a_small(a9a_full):
    """2,000 training and 1,000 test rows of a9a, split 66/57 like [Hu, §5]."""
    X, y, Xt, yt = a9a_full
    return (partition_columns(X[:2000], (66, 57)), y[:2000], partition_columns(Xt[:1000], (66, 57)), yt[:1000])


@pytest.fixture(scope="session")
def a9a_small_normalized(a9a_small):
    B, y, Bt, yt = a9a_small
    return [normalize_rows(b) for b in B], y, [normalize_rows(b) for b in Bt], yt


def run_cli(args, capsys=None):
    """Run the CLI in-process; return (exit code, stdout, stderr)."""
    from dpadmm.cli import main

    code = main([str(a) for a in args])
    if capsys is not None:
        out = capsys.readouterr()
        return code, out.out, out.err
    return code, "", ""


OUTPUT_OPTIONS = ("--out", "--transcript")
_CLI_RUNS: dict = {}


def _command_key(args):
    """A command line as a key: its words before the first option, then its options (each with its values) in any
    order; the values of output options are left out (every run of the command writes somewhere else)."""
    head, options = [], []
    for i, a in enumerate(args):
        if i and args[i - 1] in OUTPUT_OPTIONS:
            continue
        if a.startswith("--"):
            options.append((a,))
        elif options:
            options[-1] += (a,)
        else:
            head.append(a)
    return tuple(head), tuple(sorted(options))


def run_cli_once(args, capsys):
    """``run_cli`` for a command that several tests check (the README's commands: test_readme_commands runs each,
    test_readme_numbers compares the figures quoted beside them): the first call runs it, later calls with the same
    command get that run's exit code and output. Returns (exit code, stdout, stderr, outputs): ``outputs`` maps each
    output option (``--out``…) to the path that run wrote.

    Under pytest-xdist the workers share the runs too: the first worker to ask runs the command under a file lock
    and leaves its result in a directory of the run's own; a worker asking meanwhile waits for it."""
    args = [str(a) for a in args]
    key = _command_key(args)
    if key not in _CLI_RUNS:
        outputs = {o: Path(args[args.index(o) + 1]) for o in OUTPUT_OPTIONS if o in args}
        _CLI_RUNS[key] = (_shared_run(key, args, capsys, outputs) if XDIST_RUN
                          else (*run_cli(args, capsys), outputs))
    return _CLI_RUNS[key]


_SHARED_DIR: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _shared_dir(tmp_path_factory):
    """The parent of this worker's base temporary directory: one per run, the same for every xdist worker, and
    removed by pytest's own retention of old runs."""
    _SHARED_DIR[:] = [tmp_path_factory.getbasetemp().parent]


def _shared_run(key, args, capsys, outputs):
    """``run_cli`` once per xdist run for the command ``key``: (exit code, stdout, stderr, outputs)."""
    where = _SHARED_DIR[0] / "cli-runs"  # in the run's base temporary directory, which every worker shares
    where.mkdir(exist_ok=True)
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
    with open(where / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = where / f"{name}.json"
        if done.exists():
            rec = json.loads(done.read_text())
            return rec["code"], rec["out"], rec["err"], {o: Path(p) for o, p in rec["outputs"].items()}
        code, out, err = run_cli(args, capsys)
        done.write_text(json.dumps({"code": code, "out": out, "err": err,
                                    "outputs": {o: str(p) for o, p in outputs.items()}}))
        return code, out, err, outputs


def serve_parties(services: dict, tls=None, rounds=None):
    """Start one in-thread gRPC server per ``PartyService`` in ``services`` (name → service) on a free port of
    127.0.0.1; ``tls(name)`` gives a party's TLSFiles (None: insecure); ``rounds="auto"`` also serves each party's
    raw TLS round channel (``backends/tls_rounds.py``). Returns ``(peers, stop)``: each party's address, and a
    function that stops every server and closes every service."""
    from dpadmm.backends.grpc_party import make_server

    servers, peers = [], {}
    for name, svc in services.items():
        srv, port = make_server(svc, "127.0.0.1:0", None if tls is None else tls(name), rounds=rounds)
        srv.start()
        servers.append(srv)
        peers[name] = f"127.0.0.1:{port}"

    def stop():
        for srv in servers:
            srv.stop(0).wait()
        for svc in services.values():
            svc.close()
    return peers, stop


@pytest.fixture(autouse=True)
def _own_ledger_store(tmp_path_factory, monkeypatch):
    """Every test's parties (in-process, or `party serve` subprocesses, which inherit the environment) keep their
    budgets in a ledger store of the test's own (an SQLite file; its key in another directory), as one
    organisation's servers would; never anything of the user's."""
    root = tmp_path_factory.mktemp("ledger")
    monkeypatch.setenv("DPADMM_LEDGER", f"sqlite:///{root}/store/ledger.db")
    monkeypatch.setenv("DPADMM_LEDGER_KEY", str(root / "keys" / "ledger.key"))


@pytest.fixture
def postgres_url():
    """A PostgreSQL database of the test's own (a fresh schema) when ``$DPADMM_TEST_POSTGRES`` names a server (CI
    starts one: .ci/run); skipped otherwise."""
    base = os.environ.get("DPADMM_TEST_POSTGRES")
    if not base:
        pytest.skip("no PostgreSQL server for the tests ($DPADMM_TEST_POSTGRES unset; .ci/run starts one)")
    psycopg = pytest.importorskip("psycopg")
    schema = "t_" + os.urandom(6).hex()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}options=-csearch_path%3D{schema}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance on 127.0.0.1 for the whole session, auth disabled (test-only).

    Defined here, once: a test module that imported it from another module would hold a second fixture of the
    same name (pytest registers a fixture in every module that holds it), whose ``ray.init`` fails while the
    first one's Ray runs ("ray.init twice"): every Ray case of the second module then failed in sequence."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False,
             log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def free_ports(k: int) -> list[int]:
    """``k`` distinct free TCP ports on 127.0.0.1, for servers whose addresses must be known before they start
    (a node's operator is given its neighbours' addresses). Every probe socket stays open until all are chosen:
    a port closed before the next probe can be handed out again."""
    held = [socket.socket() for _ in range(int(k))]
    try:
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def make_pki(root, names):
    """Two CAs under ``root`` (``good``, ``other``) issuing the same names: the other CA's certificates are the
    wrong-CA case of the TLS tests."""
    from dpadmm.backends.grpc_tls import provision

    provision(["coordinator", *names], root / "good")
    provision(["coordinator", *names], root / "other")
    return root


def a9a_party_files(directory, n):
    """The first ``n`` a9a rows as two party files (66 and 57 columns): (blocks, ±1 labels, paths)."""
    from dpadmm.data.parties import write_party_files

    X, y = _a9a_train()
    blocks = partition_columns(X[:n], [66, 57])
    paths = write_party_files(blocks, y[:n], directory)
    return blocks, np.where(y[:n] > 0, 1.0, -1.0), paths


def audit_records(service, wait_for=None, timeout=10.0):
    """A party's audit records, waiting up to ``timeout`` s for one that ``wait_for`` accepts (lines written from
    other threads, e.g. the round channel's)."""
    import json
    import time

    deadline = time.monotonic() + timeout
    while True:
        recs = [json.loads(x) for x in service.audit_path.read_text().splitlines()]
        if wait_for is None or any(wait_for(r) for r in recs) or time.monotonic() > deadline:
            return recs
        time.sleep(0.02)


def ledger_of(party, delta: float | None = None, *, key: str | None = None) -> dict:
    """The account of the data set a party serves (``party``: a runtime, or its data file), read from the test's
    ledger store — every row verified — whether the party is still open or not: the totals, its runs (each with
    ``priced`` and ``charged``), its PSI queries and ``epsilon_spent`` at ``delta`` (default: the party's δ).
    ``key``: the data set's key in the store instead (``"party:NAME"`` for a party without files of its own)."""
    from dpadmm.privacy.dataset_identity import data_set_id
    from dpadmm.privacy.ledger_fold import empty_ledger, fold
    from dpadmm.privacy.ledger_store import LedgerStore, configured
    from dpadmm.privacy.party_ledger import compose

    if key is not None:
        pass
    elif hasattr(party, "data_set"):
        key = party.data_set.key
        delta = delta if delta is not None else getattr(party.policy, "delta", None)
    else:
        key = data_set_id("", {"train": party}).key
    store = LedgerStore(*configured(), create=False)
    try:
        with store.tx():
            led = fold(empty_ledger(), store.entries(key))
    finally:
        store.close()
    if delta is None:
        delta = next((r["delta"] for r in reversed(led["runs"]) if r.get("delta")), 1e-5)
    led["epsilon_spent"] = compose(led["gaussian"], led["pure_epsilon"], delta)
    rels = {r.get("relation") for r in led["runs"] if r["charged"]["releases"]}
    led["relation"] = rels.pop() if len(rels) == 1 else (sorted(rels) if rels else None)
    return led
