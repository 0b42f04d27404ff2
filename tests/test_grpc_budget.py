"""Each party enforces its own privacy budget (``dpadmm party serve --max-epsilon E --delta D``).

The coordinator may be malicious: it chooses the noise multiplier, the number of rounds and of runs.
A budgeted party composes its own ledger of every release (persisted across runs and restarts) and
refuses — sending nothing — a release that would take it over its operator's cap (REDTEAM F2-A4').
Parties run in-process (the state machine) or as in-thread insecure gRPC servers on 127.0.0.1.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms import vertical_sharing as vs  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import LEDGER_NAME, PartyBudget, PartyService, _Refused, make_server  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.exceptions import DataFileError, ProtocolError  # noqa: E402
from dpadmm.kernels.regularizers import L2  # noqa: E402
from dpadmm.privacy.accountants.gaussian import gaussian_epsilon  # noqa: E402
from dpadmm.privacy.events import FEATURE_COLUMN, RECORD_REPLACE, GaussianRelease, PureDPRelease  # noqa: E402

N = 120
NAMES = ("party1", "party2")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(N, 3)), rng.normal(size=(N, 4))
    y = np.where(X1[:, 0] + X2[:, 1] + 0.3 * rng.normal(size=N) > 0, 1.0, -1.0)
    return [X1, X2], y, write_party_files([X1, X2], y, tmp_path_factory.mktemp("data"))


def _state_machine(path, out, **policy):
    """party2 as `dpadmm party serve` runs it, driven with the exact bytes a coordinator would send."""
    svc = PartyService(name="party2", protocol=vs.PROTOCOL, data={"train": str(path)}, out=out, secure=False, **policy)
    allowed = codec.allow_list(vs.PROTOCOL.types)

    def call(method, body):
        return codec.decode(svc.handle(method, codec.encode(body, allowed=allowed), ""), allowed=allowed)

    def setup(nm):
        spec = vs.PrivacySpec(noise_multiplier=nm, mechanism="gaussian", relation="record", clip=30.0, clip_inf=3.0)
        D = PartyData("train", {"ids": np.arange(N), "index": 2, "n_features": 4}, (N, 4))
        opts = {"lam_sum": 1.0, "reg": L2(), "private": spec, "bound": None, "damping": 0.0, "eval_blocks": {}}
        return call("Setup", {"protocol": vs.PROTOCOL.name, "party": "party2", "index": 1, "args": ["party2", D, opts]})

    def step(t):
        return call("Step", {"round": t, "inbox": vs.CoordinatorMessage(t, np.zeros(N), np.ones(N), 0.5)})

    return svc, setup, step


def _audit(out):
    return [json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines()]


def test_a_coordinator_asking_for_negligible_noise_is_refused_by_the_budget(files, tmp_path):
    _, _, paths = files
    out = tmp_path / "p2"
    svc, setup, step = _state_machine(paths[1], out, max_epsilon=10.0, delta=1e-5)
    try:
        setup(nm=1e-12)  # the coordinator's setup options: accepted (private), but every release is priced
        with pytest.raises(_Refused, match=r"party 'party2' refused round 1 and sent nothing.*above its operator's "
                                           r"cap --max-epsilon 10.*ε = inf"):
            step(0)
        assert not (out / LEDGER_NAME).exists()  # nothing was released, nothing recorded
        setup(nm=5.0)  # an honest level is served afterwards
        reply = step(0)
        assert reply["events"][0].noise_multiplier == pytest.approx(5.0)
    finally:
        svc.close()
    steps = [r for r in _audit(out) if r["method"] == "Step"]
    assert steps[0]["status"] == "refused" and steps[0]["budget"]["decision"] == "refused"
    assert steps[0]["budget"]["epsilon_after"] == "inf" and "reply" not in steps[0]
    assert steps[1]["status"] == "ok" and steps[1]["budget"]["decision"] == "allowed"
    assert steps[1]["budget"]["epsilon_after"] == pytest.approx(gaussian_epsilon([5.0], 1e-5), rel=1e-3)


def test_the_budget_spans_runs_and_restarts_and_the_noise_floor(files, tmp_path):
    _, _, paths = files
    out = tmp_path / "p2"
    cap = gaussian_epsilon([5.0] * 3, 1e-5) * 1.01  # room for three releases at nm = 5, not four
    svc, setup, step = _state_machine(paths[1], out, max_epsilon=cap, delta=1e-5)
    try:
        setup(nm=5.0)
        step(0), step(1)
        setup(nm=5.0)  # a second run: the ledger is per dataset, not per run
        step(0)
        with pytest.raises(_Refused, match="above its operator's cap"):
            step(1)
    finally:
        svc.close()
    led = json.loads((out / LEDGER_NAME).read_text())
    assert led["releases"] == 3 and len(led["runs"]) == 2
    assert led["epsilon_spent"] == pytest.approx(gaussian_epsilon([5.0] * 3, 1e-5), rel=1e-3)
    # a restart reads the ledger: still refused; with a floor, a low multiplier is refused whatever the cap
    svc, setup, step = _state_machine(paths[1], out, max_epsilon=cap, delta=1e-5)
    try:
        assert svc.budget.spent == pytest.approx(led["epsilon_spent"], rel=1e-9)
        setup(nm=5.0)
        with pytest.raises(_Refused, match="above its operator's cap"):
            step(0)
    finally:
        svc.close()
    svc, setup, step = _state_machine(paths[1], tmp_path / "floor", max_epsilon=1e6, delta=1e-5,
                                      min_noise_multiplier=1.0)
    try:
        setup(nm=0.5)
        with pytest.raises(_Refused, match="below its operator's floor --min-noise-multiplier 1"):
            step(0)
    finally:
        svc.close()
    # a damaged ledger stops the party (it is the only record of what was spent)
    (out / LEDGER_NAME).write_text("{not json")
    with pytest.raises(DataFileError, match="deleting it resets the budget"):
        _state_machine(paths[1], out, max_epsilon=cap, delta=1e-5)


def test_every_event_type_is_composed_by_its_rule_and_unknown_ones_are_refused(tmp_path):
    b = PartyBudget(tmp_path, "node0", max_epsilon=1.0, delta=1e-5)
    kw = dict(private_step=True, protocol="graph-consensus", run="r")
    led, dec = b.charge([PureDPRelease("node0", 1, 0.3), PureDPRelease("node0", 2, 0.3)], round_=1, **kw)
    b.commit(led)
    assert b.spent == pytest.approx(0.6) and dec["decision"] == "allowed"  # pure ε add up
    with pytest.raises(_Refused, match="above its operator's cap") as exc:  # 0.6 + 0.3 + the Gaussian's ε > 1
        b.charge([PureDPRelease("node0", 3, 0.3), GaussianRelease("node0", 3, 1.0, 20.0, RECORD_REPLACE)],
                 round_=3, **kw)
    assert exc.value.budget["epsilon_after"] == pytest.approx(0.9 + gaussian_epsilon([20.0], 1e-5), rel=1e-3)
    for bad, why in [([object()], "unknown privacy event object"),
                     ([GaussianRelease("p", 0, 1.0, 100.0, FEATURE_COLUMN, "range-gaussian")], "not differentially"),
                     ([GaussianRelease("p", 0, 1.0, 0.0, RECORD_REPLACE)], "without noise"),
                     ([PureDPRelease("p", 0, float("nan"))], "cannot be accounted"),
                     ([], "without a privacy event"),  # a private step that released without accounting it
                     ([GaussianRelease("p", 0, 1.0, 100.0, FEATURE_COLUMN)], "under the relation 'record_replace'")]:
        with pytest.raises(_Refused, match=why):
            b.charge(bad, round_=4, **kw)
    # a data-independent message (sensitivity 0) costs nothing
    led, dec = b.charge([GaussianRelease("p", 0, 0.0, 0.0, RECORD_REPLACE)], round_=5, **kw)
    assert dec["epsilon_after"] == pytest.approx(0.6)
    assert math.isinf(PartyBudget(tmp_path / "x", "p", 1.0, 1e-5).epsilon({"infinite": 1, "gaussian": {},
                                                                             "pure_epsilon": 0.0}))


def _serve(paths, out, **policy):
    servers, services, peers = [], {}, {}
    for name, path in zip(NAMES, paths):
        req = ("score", "rank", "refit") if name == "party1" else None  # the label party serves its refit
        svc = PartyService(name=name, protocol=vs.PROTOCOL, data={"train": str(path)}, out=out / name, secure=False,
                           requests=req, **policy)
        srv, port = make_server(svc, "127.0.0.1:0")
        srv.start()
        servers.append(srv)
        services[name] = svc
        peers[name] = f"127.0.0.1:{port}"

    def stop():
        for srv in servers:
            srv.stop(0).wait()
        for svc in services.values():
            svc.close()
    return peers, services, stop


def test_honest_fit_within_budget_then_a_second_fit_over_budget_is_refused(files, tmp_path):
    from dpadmm.cli.party import vertical_remote_data
    from dpadmm.data import normalize_rows
    from dpadmm.estimators import VerticalLogisticRegression

    blocks, y, paths = files
    settings = dict(epsilon=2.0, delta=1e-5, max_iter=4, rho=0.3)
    ref = VerticalLogisticRegression(**settings).fit([normalize_rows(B) for B in blocks], y)
    peers, services, stop = _serve(paths, tmp_path, max_epsilon=2.5, delta=1e-5)
    try:
        be = GrpcBackend(peers, insecure=True, timeout=30.0, connect_timeout=5.0)
        data = vertical_remote_data(be, [paths[0]], [], normalize=True)
        m = VerticalLogisticRegression(**settings, backend=be).fit(data.train, data.y)
        assert m.privacy_.epsilon == pytest.approx(ref.privacy_.epsilon, rel=1e-12)
        for svc in services.values():  # each party's own account agrees with the coordinator's report
            assert svc.budget.spent == pytest.approx(ref.privacy_.epsilon, rel=2e-3)
            assert svc.budget.spent <= 2.5
        with pytest.raises(ProtocolError, match=r"refused round \d+ and sent nothing.*above its operator's cap "
                                                r"--max-epsilon 2.5"):
            VerticalLogisticRegression(**settings, backend=be).fit(data.train, data.y)
        be.close()
    finally:
        stop()
    for name in NAMES:
        led = json.loads((tmp_path / name / LEDGER_NAME).read_text())
        assert led["epsilon_spent"] <= 2.5 and len(led["runs"]) == 2
        decisions = [r["budget"]["decision"] for r in _audit(tmp_path / name) if "budget" in r]
        assert "allowed" in decisions and decisions[-1] == "refused"


@pytest.mark.parametrize("args", [["--max-epsilon", "1"], ["--delta", "1e-5"], ["--min-noise-multiplier", "1"]])
def test_cli_budget_flags_come_together(args, files, tmp_path, capsys):
    from dpadmm.cli import main

    _, _, paths = files
    code = main(["party", "serve", "--protocol", "vertical-sharing", "--name", "party1", "--data", f"train={paths[0]}",
                 "--insecure", "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert code == 2 and "--max-epsilon E and --delta D" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("perturbation", ["pp", "pvp"])
def test_consensus_node_prices_pure_dp_releases_and_refuses_pvp(perturbation, tmp_path):
    """Penalty perturbation [Zhang, Thm 4.1] emits pure-DP ε per round: they add up in the node's ledger.
    PVP emits none (not DP): a budgeted node refuses its first release."""
    from dpadmm.algorithms import graph_consensus as gc

    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 3))
    X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    opts = dict(degree=np.array([1.0]), C=1.0, reg=0.5, eta=np.ones((1, 3)), theta=np.ones((1, 3)),
                alpha=np.full((1, 3), 3.0), perturbation=perturbation)
    svc = PartyService(name="party1", protocol=gc.PROTOCOL, data={}, out=tmp_path, secure=False,
                       accept_coordinator_data=True, max_epsilon=50.0, delta=1e-5)
    allowed = codec.allow_list(gc.PROTOCOL.types)

    def call(method, body):
        return codec.decode(svc.handle(method, codec.encode(body, allowed=allowed), ""), allowed=allowed)

    try:
        call("Setup", {"protocol": gc.PROTOCOL.name, "party": "party1", "index": 0,
                       "args": [["node0"], [X], [y], opts]})
        if perturbation == "pvp":
            with pytest.raises(_Refused, match="without a privacy event"):
                call("Step", {"round": 0, "inbox": gc.NeighbourMessage(0, np.zeros((1, 3)))})
            return
        spent = 0.0
        for t in range(2):
            reply = call("Step", {"round": t, "inbox": gc.NeighbourMessage(t, np.zeros((1, 3)))})
            spent += sum(e.epsilon for e in reply["events"])
        assert 0 < svc.budget.spent == pytest.approx(spent, rel=1e-12)
    finally:
        svc.close()
