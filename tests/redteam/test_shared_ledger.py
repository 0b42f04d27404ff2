"""Issue 26: a budget that holds across every process of an organisation (real ``dpadmm party serve`` processes).

Attacked as a coordinator sending well-formed messages: a fit server and a second server on the same ``--out``
(and the same training file) used to each keep their own copy of the ledger and overwrite each other; two
``--out`` directories kept two ledgers for one data set; after a ``kill -9`` the JSON file read ε = 0. Here every
sequence ends with every run that would pass the cap refused, and the ledger (``dpadmm party ledger``'s reading:
the JSON file with the journal folded in, written back) equal to the true composed spend at every step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms.vertical import messages as vertical_messages, protocol as vertical_protocol  # noqa: E402
from dpadmm.algorithms.vertical.messages import Setup  # noqa: E402
from dpadmm.backends.base import PartySpec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.exceptions import ProtocolError  # noqa: E402
from dpadmm.kernels.regularizers import L2  # noqa: E402
from dpadmm.privacy.accountants.gaussian import gaussian_epsilon  # noqa: E402
from dpadmm.privacy.ledger_store import LedgerStore, configured  # noqa: E402
from conftest import ledger_of  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402

N, NM, DELTA = 60, 4.0, 1e-5
ROUNDS = 3  # round 1 answers an all-zero inbox (free): a fit is two Gaussian releases at σ/Δ = 4
SRC = str(Path(__file__).resolve().parents[2] / "src")


def eps(releases: int) -> float:
    return gaussian_epsilon([NM] * releases, DELTA) if releases else 0.0


@pytest.fixture
def train(tmp_path):
    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(N, 3)), rng.normal(size=(N, 4))
    y = np.where(X1[:, 0] + X2[:, 1] > 0, 1.0, -1.0)
    return write_party_files([X1, X2], y, tmp_path / "data")[1]  # party2's file


@pytest.fixture
def new(tmp_path):
    rng = np.random.default_rng(1)
    return write_party_files([rng.normal(size=(20, 3)), rng.normal(size=(20, 4))], np.ones(20), tmp_path / "new",
                             ids=1000 + np.arange(20))[1]


class Server:
    """One `dpadmm party serve` process of party2 (vertical-sharing, record relation, a budget)."""

    def __init__(self, tmp_path, out, cap, data: dict, tag: str, env: dict | None = None, extra=()):
        self.log = tmp_path / f"{tag}.log"
        args = [sys.executable, "-m", "dpadmm", "party", "serve", "--protocol", "vertical-sharing", "--name", "party2",
                "--relation", "record", "--insecure", "--listen", "127.0.0.1:0", "--out", str(out),
                "--max-epsilon", repr(cap), "--delta", repr(DELTA), *extra,
                *sum((["--data", f"{k}={v}"] for k, v in data.items()), [])]
        env = dict(os.environ, PYTHONPATH=SRC, **(env or {}))  # the test's store ($DPADMM_LEDGER, conftest)
        with open(self.log, "w") as fh:
            # SIGINT as an operator's terminal has it: a test run started in the background by a non-interactive shell
            # ignores SIGINT, and the server would inherit that and never see the Ctrl-C that stop() sends
            self.proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = self.log.read_text()
            if " serving " in text:
                self.addr = text.split(" on ")[1].split()[0]
                return
            if self.proc.poll() is not None:
                raise AssertionError(text)
            time.sleep(0.1)
        self.proc.kill()
        raise AssertionError("party serve did not start")

    def stop(self, sig=signal.SIGINT):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)


def _coordinator(server: Server) -> tuple[GrpcBackend, PartySpec]:
    be = GrpcBackend({"party2": server.addr}, insecure=True, timeout=30.0, connect_timeout=10.0)
    spec = vertical_messages.PrivacySpec(noise_multiplier=NM, mechanism="gaussian", relation="record", clip=30.0, clip_inf=3.0)
    D = PartyData("train", {"ids": np.arange(N), "index": 2, "n_features": 4}, (N, 4))
    opts = {"lam_sum": 1.0, "reg": L2(), "private": spec, "bound": None, "damping": 0.0, "eval_blocks": {}}
    return be, PartySpec.of(vertical_protocol.PROTOCOL, "party2", Setup(name="party2", D=D, options=opts), owner="party2")


def _steps(be, t0, t1):
    for t in range(t0, t1):
        be.step({"party2": vertical_messages.CoordinatorMessage(t, np.zeros(N), np.ones(N) * (t > 0), 0.5)}, t)


def fit(server: Server) -> None:
    """A whole private run: Setup (its 3 rounds priced), 3 rounds, Finish."""
    be, spec = _coordinator(server)
    try:
        be.start([spec], rounds=ROUNDS)
        _steps(be, 0, ROUNDS)
    finally:
        be.close()


def refused(server: Server) -> str:
    with pytest.raises(ProtocolError) as err:
        fit(server)
    msg = " ".join(str(err.value).split())
    assert "refused the run at Setup, before releasing anything" in msg and "above its operator's cap" in msg, msg
    return msg


def assert_ledger(train, releases: int) -> None:
    led = ledger_of(train, DELTA)  # every row of the store verified with its key
    assert led["releases"] == releases
    assert led["epsilon_spent"] == pytest.approx(eps(releases), rel=1e-3)


@pytest.mark.slow
@pytest.mark.serial  # waits on server processes' exits: CI runs it alone, after the two-worker run
def test_fit_fit_second_server_on_the_same_out_restart_fit(tmp_path, train, new):
    """The README's experts recipe's shape: the fit server, then a second server (its training file and a file of
    new records) on its --out."""
    out = tmp_path / "out"
    cap = eps(4) * 1.01  # two fits, not three
    a = Server(tmp_path, out, cap, {"train": train}, "fit")
    b = None
    try:
        fit(a)
        assert_ledger(train, 2)
        b = Server(tmp_path, out, cap, {"train": train, "new": new}, "second")
        fit(a)
        assert_ledger(train, 4)
        msg = refused(b)  # it read the ledger at its start (ε of one fit) but prices against the file as it is now
        assert f"ε = {eps(6):.4g}" in msg and str(tmp_path) not in msg
        b.stop()  # its close re-reads under the lock: it cannot write back a stale copy
        assert_ledger(train, 4)
        a.stop(signal.SIGKILL)
        assert_ledger(train, 4)
        a = Server(tmp_path, out, cap, {"train": train}, "restarted")
        refused(a)
        assert_ledger(train, 4)
    finally:
        a.stop()
        if b is not None:
            b.stop()


@pytest.mark.slow
@pytest.mark.serial  # waits on server processes' exits: CI runs it alone, after the two-worker run
def test_kill_9_mid_run_keeps_every_charged_release(tmp_path, train):
    out = tmp_path / "out"
    cap = eps(5) * 1.01
    a = Server(tmp_path, out, cap, {"train": train}, "fit")
    try:
        fit(a)
        be, spec = _coordinator(a)
        be.start([spec], rounds=ROUNDS)
        _steps(be, 0, 2)  # one release of the second run, then the party is killed
        a.stop(signal.SIGKILL)
        assert_ledger(train, 3)
        a = Server(tmp_path, out, cap, {"train": train}, "restarted")
        fit(a)  # 3 + 2 ≤ cap: the killed run's unreleased round is not reserved any more
        assert_ledger(train, 5)
        refused(a)
        assert_ledger(train, 5)
    finally:
        a.stop()


@pytest.mark.slow
@pytest.mark.serial  # waits on server processes' exits: CI runs it alone, after the two-worker run
def test_two_outs_of_one_training_file_share_one_budget(tmp_path, train):
    """Two fit servers of the same bytes (one a copy under another name) with two --out directories, both live."""
    copy = tmp_path / "copy-of-train.csv"
    copy.write_bytes(Path(train).read_bytes())
    cap = eps(3) * 1.01  # one fit, not two
    a = Server(tmp_path, tmp_path / "out1", cap, {"train": train}, "one")
    c = Server(tmp_path, tmp_path / "out2", cap, {"train": str(copy)}, "two")
    try:
        be, spec = _coordinator(a)
        be.start([spec], rounds=ROUNDS)  # a run in progress at one server reserves its price ...
        msg = refused(c)  # ... so the other refuses a run that would pass the cap with it
        assert "runs in progress on this data set" in msg
        _steps(be, 0, ROUNDS)
        be.close()
        assert_ledger(train, 2)
        refused(c)
        refused(a)
        assert_ledger(train, 2)
    finally:
        a.stop()
        c.stop()
    store = LedgerStore(*configured(), create=False)
    assert len(store.data_sets()) == 1  # one budget for the data set
    store.close()


def _fits(servers, attempts: int) -> tuple[int, list[str]]:
    """``attempts`` fits, round-robin over ``servers``: (the number that ran, the refusals' messages)."""
    ran, refusals = 0, []
    for i in range(attempts):
        try:
            fit(servers[i % len(servers)])
            ran += 1
        except ProtocolError as exc:
            refusals.append(" ".join(str(exc).split()))
    return ran, refusals


@pytest.mark.slow
@pytest.mark.serial  # waits on server processes' exits: CI runs it alone, after the two-worker run
def test_renamed_trailing_newline_and_crlf_copies_are_one_data_set(tmp_path, train):
    """Issue 36: the training file, a renamed copy, a copy with one more newline and a CRLF copy, each served by its
    own server with its own --out: one budget (the rows' digest), so at most the 2 fits the cap allows."""
    raw = Path(train).read_bytes()
    copies = {"renamed.csv": raw, "newline.csv": raw + b"\n", "crlf.csv": raw.replace(b"\n", b"\r\n")}
    files = [train]
    for name, data in copies.items():
        (tmp_path / name).write_bytes(data)
        files.append(str(tmp_path / name))
    cap = eps(4) * 1.01  # two fits, not three
    servers = []
    try:
        for i, f in enumerate(files):
            servers.append(Server(tmp_path, tmp_path / f"out{i}", cap, {"train": f}, f"copy{i}"))
        ran, refusals = _fits(servers, 8)
        assert ran == 2 and len(refusals) == 6 and all("above its operator's cap" in m for m in refusals), refusals
        assert_ledger(train, 4)
        led = ledger_of(train, DELTA)
        assert set(led["data_set"]["seen_as"]) == {"train=" + Path(f).name for f in files}
    finally:
        for s in servers:
            s.stop()


@pytest.mark.slow
@pytest.mark.serial
def test_servers_of_two_hosts_sharing_a_postgresql_store_take_at_most_the_cap(tmp_path, train, postgres_url):
    """Two hosts' worth of servers: each with its own copy of the training file, its own copy of the operator's key
    and its own --out, one PostgreSQL store: the 2 fits the cap allows, no more."""
    cap = eps(4) * 1.01
    hosts = [tmp_path / "host1", tmp_path / "host2"]
    for h in hosts:
        (h / "keys").mkdir(parents=True)
        (h / "train.csv").write_bytes(Path(train).read_bytes())
    first = Server(tmp_path, hosts[0] / "out", cap, {"train": str(hosts[0] / "train.csv")}, "h1",
                   env={"DPADMM_LEDGER": postgres_url, "DPADMM_LEDGER_KEY": str(hosts[0] / "keys" / "ledger.key")})
    (hosts[1] / "keys" / "ledger.key").write_bytes((hosts[0] / "keys" / "ledger.key").read_bytes())  # the same key
    second = Server(tmp_path, hosts[1] / "out", cap, {"train": str(hosts[1] / "train.csv")}, "h2",
                    env={"DPADMM_LEDGER": postgres_url, "DPADMM_LEDGER_KEY": str(hosts[1] / "keys" / "ledger.key")})
    try:
        ran, refusals = _fits([first, second, first, second], 5)
        assert ran == 2 and len(refusals) == 3, refusals
    finally:
        first.stop()
        second.stop()
    store = LedgerStore(postgres_url, hosts[0] / "keys" / "ledger.key", create=False)
    try:
        [key] = store.data_sets()
        with store.tx():
            released = sum(sum(body["g"].values()) for _, kind, body, _ in store.entries(key) if kind == "charge")
        assert released == 4  # two fits of two Gaussian releases (round 1 answers an all-zero inbox: free)
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.serial
def test_a_server_that_sees_its_store_deleted_refuses_further_fits(tmp_path, train):
    cap = eps(8) * 1.01
    a = Server(tmp_path, tmp_path / "out", cap, {"train": train}, "fit")
    try:
        fit(a)
        db = Path(configured()[0][len("sqlite:///"):])
        for p in db.parent.glob(db.name + "*"):
            if p.is_file():
                p.unlink()
        with pytest.raises(ProtocolError, match="was deleted or replaced while this server ran"):
            fit(a)
        with pytest.raises(ProtocolError, match="was deleted or replaced while this server ran"):
            fit(a)  # and stays refused
    finally:
        a.stop()
    assert "was deleted or replaced while this server ran" in a.log.read_text()
