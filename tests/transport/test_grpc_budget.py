"""Each party enforces its own privacy budget (``dpadmm party serve --max-epsilon E --delta D``).

The coordinator may be malicious: it chooses the noise multiplier, the number of rounds and of runs.
A budgeted party composes its own ledger of every release (persisted across runs and restarts) and
refuses — sending nothing — a release that would take it over its operator's cap (REDTEAM F2-A4').
Parties run in-process (the state machine) or as in-thread insecure gRPC servers on 127.0.0.1.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms.vertical import messages as vertical_messages, protocol as vertical_protocol  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyBudget, PartyService, _Refused  # noqa: E402
from conftest import ledger_of  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy, RunPrice  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.exceptions import DataFileError, ProtocolError  # noqa: E402
from dpadmm.privacy.ledger_store import configured  # noqa: E402
from dpadmm.kernels.regularizers import L2  # noqa: E402
from dpadmm.privacy.accountants.gaussian import gaussian_epsilon  # noqa: E402
from dpadmm.privacy.events import FEATURE_COLUMN, RECORD_REPLACE, GaussianRelease, PureDPRelease  # noqa: E402
from conftest import serve_parties  # noqa: E402

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
    policy.setdefault("policy", PartyPolicy(relation="record"))
    svc = PartyService(name="party2", protocol=vertical_protocol.PROTOCOL, data={"train": str(path)}, out=out, secure=False, **policy)
    allowed = codec.allow_list(vertical_protocol.PROTOCOL.types)

    def call(method, body):
        return codec.decode(svc.handle(method, codec.encode(body, allowed=allowed), ""), allowed=allowed)

    def setup(nm, rounds=4):
        spec = vertical_messages.PrivacySpec(noise_multiplier=nm, mechanism="gaussian", relation="record", clip=30.0, clip_inf=3.0)
        D = PartyData("train", {"ids": np.arange(N), "index": 2, "n_features": 4}, (N, 4))
        opts = {"lam_sum": 1.0, "reg": L2(), "private": spec, "bound": None, "damping": 0.0, "eval_blocks": {}}
        return call("Setup", {"protocol": vertical_protocol.PROTOCOL.name, "party": "party2", "index": 1, "rounds": rounds,
                              "setup": {"name": "party2", "D": D, "options": opts}})

    def step(t):  # round 1 answers the protocol's all-zero first inbox (free), later rounds release
        return call("Step", {"round": t, "inbox": vertical_messages.CoordinatorMessage(t, np.zeros(N), np.ones(N) * (t > 0), 0.5)})

    return svc, setup, step


def _audit(out):
    return [json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines()]


def test_a_coordinator_asking_for_negligible_noise_is_refused_at_setup(files, tmp_path):
    _, _, paths = files
    out = tmp_path / "p2"
    svc, setup, step = _state_machine(paths[1], out, max_epsilon=10.0, delta=1e-5)
    try:
        with pytest.raises(_Refused, match=r"party 'party2' refused the run before releasing anything: the noise "
                                           r"multiplier σ/Δ is 1e-12.*≥ 0.5"):
            setup(nm=1e-12)
        with pytest.raises(_Refused, match="no run is set up"):  # nothing to step: the run was never set up
            step(0)
        assert ledger_of(svc)["releases"] == 0  # nothing was released
        setup(nm=5.0)  # an honest level is served afterwards
        step(0)
        reply = step(1)
        assert reply["events"][0].noise_multiplier == pytest.approx(5.0)
    finally:
        svc.close()
    log = _audit(out)
    assert log[0]["method"] == "Start" and log[0]["policy"]["max_epsilon"] == 10.0
    setups = [r for r in log if r["method"] == "Setup"]
    assert setups[0]["status"] == "refused" and "reply" not in setups[0]
    assert setups[1]["status"] == "ok" and setups[1]["budget"]["decision"] == "priced"
    assert setups[1]["budget"]["epsilon_if_run_completes"] == pytest.approx(gaussian_epsilon([5.0] * 3, 1e-5), rel=1e-3)
    steps = [r for r in log if r["method"] == "Step"]
    assert steps[-1]["status"] == "ok" and steps[-1]["budget"]["decision"] == "allowed"


def test_an_over_budget_run_is_refused_at_setup_with_the_spend_it_would_reach(files, tmp_path):
    _, _, paths = files
    out = tmp_path / "p2"
    cap = gaussian_epsilon([5.0] * 3, 1e-5) * 1.01  # room for three releases at nm = 5, not four
    svc, setup, step = _state_machine(paths[1], out, max_epsilon=cap, delta=1e-5)
    try:
        setup(nm=5.0, rounds=3)  # 2 releases (round 1 is free)
        step(0), step(1), step(2)
        with pytest.raises(_Refused, match="the coordinator declared 3 rounds at Setup"):
            step(3)  # more rounds than declared: refused, nothing sent
        would = gaussian_epsilon([5.0] * 4, 1e-5)
        with pytest.raises(_Refused, match=rf"refused the run at Setup, before releasing anything: its 3 declared rounds "
                                           rf"would bring its spend to ε = {would:.4g} at δ = 1e-05, above its "
                                           rf"operator's cap"):
            setup(nm=5.0, rounds=3)
        setup(nm=5.0, rounds=2)  # one more release fits: a second run (the ledger is per dataset, not per run)
        step(0), step(1)
    finally:
        svc.close()
    led = ledger_of(paths[1])
    assert led["releases"] == 3 and len(led["runs"]) == 2
    assert led["epsilon_spent"] == pytest.approx(gaussian_epsilon([5.0] * 3, 1e-5), rel=1e-3)
    # a restart reads the ledger (the JSON file and the journal of the last run): still refused
    svc, setup, step = _state_machine(paths[1], out, max_epsilon=cap, delta=1e-5)
    try:
        assert svc.budget.spent == pytest.approx(led["epsilon_spent"], rel=1e-9)
        with pytest.raises(_Refused, match="above its operator's cap"):
            setup(nm=5.0, rounds=2)
    finally:
        svc.close()
    # a damaged ledger stops the party (it is the only record of what was spent)
    key = Path(configured()[1])
    key.write_text("{not json")
    with pytest.raises(DataFileError, match="the ledger key .* is unreadable"):
        _state_machine(paths[1], out, max_epsilon=cap, delta=1e-5)


def test_a_round_beyond_the_declaration_is_refused_and_rounds_cost_no_accountant_call(files, tmp_path, monkeypatch):
    """Per-round work is a check against the price fixed at Setup: the accountant is never called per round."""
    from dpadmm.privacy import party_ledger

    _, _, paths = files
    out = tmp_path / "p2"
    svc, setup, step = _state_machine(paths[1], out, max_epsilon=50.0, delta=1e-5)
    try:
        setup(nm=5.0, rounds=3)

        def boom(*a, **k):
            raise AssertionError("the accountant was called in a round")

        monkeypatch.setattr(party_ledger, "compose", boom)
        step(0)
        step(1)
        step(2)
        monkeypatch.undo()
        setup(nm=5.0, rounds=2)  # a coordinator that departs: a non-zero first inbox is a release it did not declare
        svc.handle  # noqa: B018
        call = svc.handle
        allowed = codec.allow_list(vertical_protocol.PROTOCOL.types)
        msg = {"round": 0, "inbox": vertical_messages.CoordinatorMessage(0, np.zeros(N), np.ones(N), 0.5)}
        call("Step", codec.encode(msg, allowed=allowed), "")  # 1 priced release (round 1 would be free)
        with pytest.raises(_Refused, match=r"refused round 2 and sent nothing: the coordinator departed from the run "
                                           r"it declared at Setup"):
            call("Step", codec.encode(dict(msg, round=1), allowed=allowed), "")
    finally:
        svc.close()


def test_every_event_type_is_checked_against_the_declaration(tmp_path):
    b = PartyBudget(tmp_path, "node0", max_epsilon=1.0, delta=1e-5)
    b.open_run("r", "graph-consensus", RunPrice({20.0: 1}, 0.6, "record_replace"), 2)
    kw = dict(private_step=True)
    dec = b.charge([PureDPRelease("node0", 1, 0.3), PureDPRelease("node0", 2, 0.3)], round_=1, **kw)
    assert dec["decision"] == "allowed" and b.spent == pytest.approx(0.6)  # pure ε add up
    with pytest.raises(_Refused, match=r"pure ε 0.9 beyond the 0.6 priced at Setup"):
        b.charge([PureDPRelease("node0", 3, 0.3)], round_=2, **kw)
    for bad, why in [([object()], "unknown privacy event object"),
                     ([GaussianRelease("p", 0, 1.0, 100.0, RECORD_REPLACE, "range-gaussian")], "not differentially"),
                     ([GaussianRelease("p", 0, 1.0, 19.0, RECORD_REPLACE)], r"σ/Δ = 19 beyond the declaration"),
                     ([GaussianRelease("p", 0, 1.0, float("nan"), RECORD_REPLACE)], "cannot be accounted"),
                     ([PureDPRelease("p", 0, float("nan"))], "cannot be accounted"),
                     ([], "without a privacy event"),  # a private step that released without accounting it
                     ([GaussianRelease("p", 0, 1.0, 100.0, FEATURE_COLUMN)], "not the declared 'record_replace'")]:
        with pytest.raises(_Refused, match=why):
            b.charge(bad, round_=4, **kw)
    b.charge([GaussianRelease("p", 0, 0.0, 0.0, RECORD_REPLACE)], round_=5, **kw)  # data-independent: free
    b.charge([GaussianRelease("p", 0, 1.0, 25.0, RECORD_REPLACE)], round_=6, **kw)  # more noise than declared: ok
    with pytest.raises(_Refused, match="beyond the declaration"):  # but only as many releases as declared
        b.charge([GaussianRelease("p", 0, 1.0, 25.0, RECORD_REPLACE)], round_=7, **kw)
    assert b.spent == pytest.approx(0.6 + gaussian_epsilon([20.0], 1e-5), rel=1e-3)  # charged at the declared σ/Δ
    with pytest.raises(_Refused, match="above its operator's cap"):  # the next run is priced against what is left
        b.open_run("r2", "graph-consensus", RunPrice({}, 0.5, "record_replace"), 1)
    with pytest.raises(_Refused, match="under the relation 'record_replace', this run is under 'feature_column'"):
        b.open_run("r3", "vertical-sharing", RunPrice({50.0: 1}, 0.0, "feature_column"), 2)


def _serve(paths, out, **policy):
    # the label party (party1) serves its refit too
    services = {name: PartyService(name=name, protocol=vertical_protocol.PROTOCOL, data={"train": str(path)}, out=out / name,
                                   secure=False, requests=("score", "rank", "refit") if name == "party1" else None,
                                   **policy)
                for name, path in zip(NAMES, paths)}
    peers, stop = serve_parties(services)
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
        with pytest.raises(ProtocolError, match=r"refused the run at Setup, before releasing anything: its 4 declared "
                                                r"rounds would bring its spend to ε = [\d.]+ at δ = 1e-05, above its "
                                                r"operator's cap --max-epsilon 2.5"):
            VerticalLogisticRegression(**settings, backend=be).fit(data.train, data.y)
        be.close()
    finally:
        stop()
    for name in NAMES:
        led = ledger_of(services[name])
        assert led["epsilon_spent"] <= 2.5 and len(led["runs"]) == 1  # the refused run was never opened
        decisions = [r["budget"]["decision"] for r in _audit(tmp_path / name) if "budget" in r]
        assert decisions[0] == "priced" and "allowed" in decisions and decisions[-1] == "refused"
        assert [r["method"] for r in _audit(tmp_path / name) if r.get("status") == "refused"] == ["Setup"]


@pytest.mark.parametrize("args, message", [
    (["--max-epsilon", "1"], "--max-epsilon E and --delta D"), (["--delta", "1e-5"], "--max-epsilon E and --delta D"),
    ([], "give this party a privacy budget: --max-epsilon E --delta D"),  # safe by default: no silent no-budget party
    (["--min-noise-multiplier", "1"], "opt out with --no-budget"),
    (["--max-epsilon", "1", "--delta", "1e-5", "--no-budget"], "either a budget"),
    (["--no-budget", "--relation", "rows"], "relation must be 'feature_column' or 'record'"),
    (["--policy", "{tmp}/missing.json"], "cannot read --policy"),
    (["--policy", "{tmp}/bad.json"], "unknown field(s) ['max_eps']"),
])
def test_cli_budget_flags_and_policy_file_usage_errors(args, message, files, tmp_path, capsys):
    from dpadmm.cli import main

    _, _, paths = files
    (tmp_path / "bad.json").write_text('{"max_eps": 1}')
    code = main(["party", "serve", "--protocol", "vertical-sharing", "--name", "party1", "--data", f"train={paths[0]}",
                 "--insecure", "--out", str(tmp_path / "o"), *[a.format(tmp=tmp_path) for a in args]])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_policy_file_json_and_toml_with_flags_on_top(tmp_path):
    from dpadmm.privacy.policy import load_policy

    (tmp_path / "p.json").write_text('{"max_epsilon": 4, "delta": 1e-5, "relation": "record", "mechanisms": ["gaussian"]}')
    (tmp_path / "p.toml").write_text('max_epsilon = 4.0\ndelta = 1e-5\nmax_score_clip = 3.0\n')
    pj = load_policy(tmp_path / "p.json", max_epsilon=2.0)
    assert (pj.max_epsilon, pj.delta, pj.relation, pj.mechanisms) == (2.0, 1e-5, "record", ("gaussian",))
    pt = load_policy(tmp_path / "p.toml")
    assert pt.budgeted and pt.private_work and pt.max_score_clip == 3.0 and pt.relation == "feature_column"


@pytest.mark.parametrize("perturbation", ["pp", "pvp"])
def test_consensus_node_prices_pure_dp_releases_and_refuses_pvp(perturbation, tmp_path):
    """Penalty perturbation [Zhang, Thm 4.1] emits pure-DP ε per round: they add up in the node's ledger.
    PVP has no proved bound: a budgeted node refuses it at Setup."""
    from dpadmm.algorithms.consensus import messages as consensus_messages, protocol as consensus_protocol

    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 3))
    X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    opts = dict(degree=np.array([1.0]), C=1.0, reg=0.5, eta=np.ones((1, 3)), theta=np.ones((1, 3)),
                alpha=np.full((1, 3), 3.0), perturbation=perturbation)
    svc = PartyService(name="party1", protocol=consensus_protocol.PROTOCOL, data={}, out=tmp_path, secure=False,
                       accept_coordinator_data=True, max_epsilon=50.0, delta=1e-5)
    rounds = 2
    allowed = codec.allow_list(consensus_protocol.PROTOCOL.types)

    def call(method, body):
        return codec.decode(svc.handle(method, codec.encode(body, allowed=allowed), ""), allowed=allowed)

    try:
        if perturbation == "pvp":
            with pytest.raises(_Refused, match="the perturbation is 'pvp'"):
                call("Setup", {"protocol": consensus_protocol.PROTOCOL.name, "party": "party1", "index": 0, "rounds": rounds,
                               "setup": {"names": ["node0"], "X_list": [X], "y_list": [y], "options": opts}})
            return
        call("Setup", {"protocol": consensus_protocol.PROTOCOL.name, "party": "party1", "index": 0, "rounds": rounds,
                       "setup": {"names": ["node0"], "X_list": [X], "y_list": [y], "options": opts}})
        spent = 0.0
        for t in range(2):
            reply = call("Step", {"round": t, "inbox": consensus_messages.NeighbourMessage(t, np.zeros((1, 3)))})
            spent += sum(e.epsilon for e in reply["events"])
        assert 0 < svc.budget.spent == pytest.approx(spent, rel=1e-12)
    finally:
        svc.close()
