"""A party's privacy never depends on the coordinator's honesty (issue 17).

Each protocol's party is driven through its real message path — ``PartyService.handle`` on the exact bytes a
coordinator sends (what ``dpadmm party serve`` runs behind gRPC), and for vertical sharing the in-thread gRPC
server with the real :class:`GrpcBackend` — with coordinator messages that depart from the party's policy in one
privacy-relevant field each. Every departure must be refused at Setup (or, for a round beyond the declaration, at
that round) before anything is released: no Step reply, no release in the party's ledger, one refusal line in its
audit log naming the field. The honest message is then served, so a refusal is for the right reason.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms.functional import messages as functional_messages, protocol as functional_protocol  # noqa: E402
from dpadmm.algorithms.functional import statistics as functional_statistics  # noqa: E402
from dpadmm.algorithms.consensus import messages as consensus_messages, protocol as consensus_protocol  # noqa: E402
from dpadmm.algorithms.vertical import messages as vertical_messages, protocol as vertical_protocol  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, _Refused  # noqa: E402
from conftest import ledger_of  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.kernels import fpca  # noqa: E402
from dpadmm.kernels.regularizers import L1, L2  # noqa: E402
from dpadmm.privacy.accountants.gaussian import gaussian_epsilon  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy  # noqa: E402
from dpadmm.protocol import PartyData, setup_fields  # noqa: E402
from conftest import serve_parties  # noqa: E402

N = 60
BUDGET = dict(max_epsilon=4.0, delta=1e-5)


class Party:
    """One party's state machine driven with encoded coordinator messages."""

    def __init__(self, tmp_path, protocol, name="p", data=None, **kw):
        self.out = tmp_path / name
        protos = protocol if isinstance(protocol, list) else [protocol]
        self.svc = PartyService(name=name, protocol=protos, data=data or {}, out=self.out, secure=False, **kw)
        self.allowed = codec.allow_list([t for p in protos for t in p.types])
        self.name = name

    def call(self, method, body):
        return codec.decode(self.svc.handle(method, codec.encode(body, allowed=self.allowed), ""), allowed=self.allowed)

    def setup(self, protocol, args, rounds):
        return self.call("Setup", {"protocol": protocol.name, "party": self.name, "index": 0, "rounds": rounds,
                                   "setup": setup_fields(protocol, args)})

    def step(self, t, inbox):
        return self.call("Step", {"round": t, "inbox": inbox})

    def audit(self):
        return [json.loads(x) for x in (self.out / "audit.jsonl").read_text().splitlines()]

    def released(self):
        self.svc.budget.close_run()
        return ledger_of(self.svc)["releases"]

    def assert_refused_before_release(self, fn, match):
        n_steps = sum(r["method"] == "Step" and r["status"] == "ok" for r in self.audit())
        before = self.released()
        with pytest.raises(_Refused, match=match):
            fn()
        assert self.released() == before  # nothing released
        with pytest.raises(_Refused, match="no run is set up|refused round"):  # and nothing can be stepped
            self.step(0, self.honest_inbox(0))
        log = self.audit()
        refused = [r for r in log if r["status"] == "refused"]
        assert refused and "reply" not in refused[-2] and sum(r["method"] == "Step" and r["status"] == "ok"
                                                              for r in log) == n_steps

    def close(self):
        self.svc.close()


# ----------------------------------------------------------------------------- vertical sharing [Hu]
@pytest.fixture
def vertical(tmp_path):
    rng = np.random.default_rng(0)
    paths = write_party_files([rng.normal(size=(N, 2)), rng.normal(size=(N, 3))], np.where(rng.random(N) < .5, 1, -1),
                              tmp_path / "data")
    p = Party(tmp_path, vertical_protocol.PROTOCOL, "party2", data={"train": str(paths[1])}, **BUDGET)
    D = PartyData("train", {"ids": np.arange(N), "index": 2, "n_features": 3}, (N, 3))

    def args(spec=None, **opts):
        spec = spec if spec is not None else vertical_messages.PrivacySpec(noise_multiplier=4.0, mechanism="gaussian",
                                                            relation="feature_column", clip=30.0)
        o = dict({"lam_sum": 1.0, "reg": L2(), "private": spec, "bound": None, "damping": 0.0, "eval_blocks": {}},
                 **opts)
        return ["party2", D, o]

    p.honest_inbox = lambda t: vertical_messages.CoordinatorMessage(t, np.zeros(N), np.ones(N) * (t > 0), 0.5)
    p.args = args
    yield p
    p.close()


def _spec(**kw):
    return vertical_messages.PrivacySpec(**dict(dict(noise_multiplier=4.0, mechanism="gaussian", relation="feature_column",
                                      clip=30.0), **kw))


VERTICAL_ATTACKS = {
    "relation constant": (dict(spec=_spec(column_change=1e-6)), "column_change is 1e-06"),
    "relation": (dict(spec=_spec(relation="record", clip_inf=3.0)), "the neighbouring relation is 'record'"),
    "no regulariser, huge lam_sum": (dict(reg=None, lam_sum=1e12), "the regulariser is None"),
    "l1 regulariser": (dict(reg=L1()), "the regulariser is 'L1'"),
    "zero lam_sum": (dict(lam_sum=0.0), "lam_sum is 0.0"),
    "not private": (dict(private=None), "refused a non-private run: its operator gave it a privacy budget"),
    "negligible noise": (dict(spec=_spec(noise_multiplier=1e-12)), "σ/Δ is 1e-12"),
    "raw noise scale": (dict(spec=_spec(noise_multiplier=None, noise_scale=1e-9)), "the noise is 'noise_scale=1e-09'"),
    "paper mechanism": (dict(spec=vertical_messages.PrivacySpec(noise_multiplier=4.0, bounds=vertical_messages.Bounds(1, 1, 1))),
                        "the mechanism is 'paper'"),
    "damping": (dict(damping=0.5), "the damping is 0.5"),
}


@pytest.mark.parametrize("attack", list(VERTICAL_ATTACKS))
def test_vertical_party_refuses_every_departure_before_release(vertical, attack):
    kw, match = VERTICAL_ATTACKS[attack]
    kw = dict(kw)  # a copy: the table stays as declared for every parametrised case
    spec = kw.pop("spec", None)
    vertical.assert_refused_before_release(lambda: vertical.setup(vertical_protocol.PROTOCOL, vertical.args(spec, **kw), 5), match)
    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 5)
    for t in range(5):
        vertical.step(t, vertical.honest_inbox(t))
    assert vertical.released() == 4  # round 1 answers the zero inbox (free): 4 charged releases


def test_vertical_party_refuses_more_rounds_than_declared_and_an_overspending_declaration(vertical):
    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 3)
    for t in range(3):
        vertical.step(t, vertical.honest_inbox(t))
    with pytest.raises(_Refused, match="the coordinator declared 3 rounds at Setup"):
        vertical.step(3, vertical.honest_inbox(3))
    with pytest.raises(_Refused, match=r"its 200 declared rounds would bring its spend to ε = ([\d.]+)") as exc:
        vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 200)
    would = float(exc.value.budget["epsilon_if_run_completes"])
    assert would == pytest.approx(gaussian_epsilon([4.0] * (2 + 199), 1e-5), rel=1e-3) and would > 4.0


def test_vertical_refusal_reaches_the_coordinator_as_one_protocol_error_over_grpc(tmp_path):
    """Both sides see the same one-line refusal: the party's audit log and the coordinator's ProtocolError."""
    from dpadmm.backends import PartySpec
    from dpadmm.backends.grpc_backend import GrpcBackend
    from dpadmm.backends.grpc_party import make_server
    from dpadmm.exceptions import ProtocolError

    rng = np.random.default_rng(1)
    paths = write_party_files([rng.normal(size=(N, 2)), rng.normal(size=(N, 3))], np.where(rng.random(N) < .5, 1, -1),
                              tmp_path / "data")
    svc = PartyService(name="party2", protocol=vertical_protocol.PROTOCOL, data={"train": str(paths[1])}, out=tmp_path / "p2",
                       secure=False, **BUDGET)
    srv, port = make_server(svc, "127.0.0.1:0")
    srv.start()
    D = PartyData("train", {"ids": np.arange(N), "index": 2, "n_features": 3}, (N, 3))
    try:
        be = GrpcBackend({"party2": f"127.0.0.1:{port}"}, insecure=True, timeout=30.0)
        spec = _spec(column_change=1e-6)
        specs = [PartySpec.of(vertical_protocol.PROTOCOL, "party2", vertical_protocol.PROTOCOL.setup_type(
            name="party2", D=D, options={"lam_sum": 1.0, "reg": L2(), "private": spec}))]
        with pytest.raises(ProtocolError, match=r"^party 'party2' refused the run before releasing anything: the "
                                                r"relation's constant column_change is 1e-06") as exc:
            be.start(specs, rounds=5)
        assert "\n" not in str(exc.value)
        be.close()
    finally:
        srv.stop(0).wait()
        svc.close()
    refused = [r for r in map(json.loads, (tmp_path / "p2" / "audit.jsonl").read_text().splitlines())
               if r["method"] == "Setup"][-1]
    assert refused["method"] == "Setup" and refused["status"] == "refused" and "column_change" in refused["detail"]


# ----------------------------------------------------------------------------- graph consensus [Zhang]
def _node_data(scale=1.0, n=40, d=3, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X = scale * X / (2 * np.linalg.norm(X, axis=1, keepdims=True))
    return X, np.where(X[:, 0] > 0, 1.0, -1.0)


def _node_opts(T=4, **kw):
    return dict(dict(degree=np.array([2.0]), C=1.0, reg=0.5, eta=np.ones((1, T)), theta=np.ones((1, T)),
                     alpha=np.full((1, T), 3.0), perturbation="pp"), **kw)


CONSENSUS_ATTACKS = {
    "no perturbation": (dict(perturbation="none"), "refused a non-private run"),
    "pvp": (dict(perturbation="pvp"), "the perturbation is 'pvp'"),
    "no noise (alpha = inf)": (dict(alpha=np.full((1, 4), np.inf)), "the noise rate alpha is 'inf or non-positive'"),
    "alpha above the operator's ceiling": (dict(alpha=np.full((1, 4), 50.0)), r"alpha is 50.0.*α ≤ 10"),
    "theta outside [Zhang, Alg. 1]": (dict(theta=np.full((1, 4), 1e-6), eta=np.full((1, 4), 1e-6), C=1e4),
                                      "the schedule is 'outside"),
    "inexact local solve": (dict(newton_tol=1.0), "the local solver's tolerance"),
    "rows of norm 5 (unit norm off)": ("rows", "the rows' norm is 'above 1'"),
}


@pytest.mark.parametrize("attack", list(CONSENSUS_ATTACKS))
def test_consensus_node_refuses_every_departure_before_release(tmp_path, attack):
    node = Party(tmp_path, consensus_protocol.PROTOCOL, "node0", accept_coordinator_data=True,
                 policy=PartyPolicy(max_alpha=10.0, **BUDGET))
    node.honest_inbox = lambda t: consensus_messages.NeighbourMessage(t, np.zeros((1, 3)))
    X, y = _node_data()
    try:
        kw, match = CONSENSUS_ATTACKS[attack]
        args = [["node0"], [5 * X if kw == "rows" else X], [y], _node_opts(**({} if kw == "rows" else kw))]
        node.assert_refused_before_release(lambda: node.setup(consensus_protocol.PROTOCOL, args, 4), match)
        node.setup(consensus_protocol.PROTOCOL, [["node0"], [X], [y], _node_opts()], 4)
        eps = sum(e.epsilon for t in range(4) for e in node.step(t, node.honest_inbox(t))["events"])
        assert node.svc.budget.spent == pytest.approx(eps, rel=1e-12)
        with pytest.raises(_Refused, match=r"above its operator's cap"):  # priced by [Zhang, Thm 4.1] up front
            node.setup(consensus_protocol.PROTOCOL, [["node0"], [X], [y], _node_opts(T=400)], 400)
    finally:
        node.close()


def test_consensus_node_normalises_the_rows_it_reads_whatever_the_coordinator_asks(tmp_path):
    import pandas as pd

    X, y = _node_data(scale=10.0)  # rows of norm 5 in the node's own file
    pd.DataFrame(np.c_[X, y], columns=["a", "b", "c", "y"]).to_csv(tmp_path / "node.csv", index=False)
    node = Party(tmp_path, consensus_protocol.PROTOCOL, "node0", data={"train": str(tmp_path / "node.csv")}, **BUDGET)
    try:
        ref = [PartyData("train", {"part": p, "normalize": False, "require_unit_norm": False}) for p in ("X", "y")]
        node.setup(consensus_protocol.PROTOCOL, [["node0"], [ref[0]], [ref[1]], _node_opts()], 4)
        assert float(np.linalg.norm(node.svc.cfg.X, axis=-1).max()) <= 1.0 + 1e-12
    finally:
        node.close()


# ----------------------------------------------------------------------------- functional quantile [Zhou]
def _curves(m=50, T=20, seed=3):
    rng = np.random.default_rng(seed)
    grid = np.linspace(0, 1, T)
    X = rng.normal(size=(m, 4)) @ np.array([np.cos(k * np.pi * grid) for k in range(4)]) * 3
    return grid, X, X[:, 2] + rng.normal(size=m)


def _functional_args(X, y, basis, *, nm=3.0, clip=3.0, c1=None, tau=0.5, lam=0.05, **opts):
    settings = functional_messages.Settings.make([tau], noise_multiplier=nm, lam=lam)
    o = dict(dict(rho=1.0, n_workers=2, fit_intercept=True, c1=math.hypot(clip or 0.0, 1.0) if c1 is None else c1),
             **opts)
    return ["worker1", X, y, basis, 1.0, 0.0, 1.0, clip, settings, o]


FUNCTIONAL_ATTACKS = {
    "no score clip, tiny c1": (dict(clip=None, c1=1e-9), "the score clip is None"),
    "c1 smaller than the clip": (dict(clip=3.0, c1=0.1), r"c1 of the sensitivity is 0.1.*c1 ≥ 3.16"),
    "clip above the operator's ceiling": (dict(clip=100.0), r"the score clip is 100.0.*≤ 4"),
    "negligible noise": (dict(nm=1e-12), "σ/Δ is 1e-12"),
    "not private": (dict(nm=0.0), "refused a non-private run"),
    "unaccounted releases": (dict(emit_events=False), "emit_events is False"),
    "quantile level outside (0, 1)": (dict(tau=5.0), r"a quantile level tau is \[5.0\]"),
    "negative penalty": (dict(lam=-1.0, local_step="exact"), r"the penalty weight lam is \[-1.0\]"),
    "inexact exact step": (dict(local_step="exact", newton_tol=0.5), "newton_tol is 0.5"),
}


@pytest.mark.parametrize("attack", list(FUNCTIONAL_ATTACKS))
def test_functional_worker_refuses_every_departure_before_release(tmp_path, attack):
    grid, X, y = _curves()
    basis = fpca.fourier_basis(grid, 3)
    w = Party(tmp_path, [functional_protocol.PROTOCOL, functional_protocol.STATISTICS_PROTOCOL], "worker1", accept_coordinator_data=True,
              policy=PartyPolicy(max_score_clip=4.0, **BUDGET))
    w.honest_inbox = lambda t: functional_messages.HubMessage(t, np.zeros((1, 1, 4)))
    try:
        kw, match = FUNCTIONAL_ATTACKS[attack]
        w.assert_refused_before_release(lambda: w.setup(functional_protocol.PROTOCOL, _functional_args(X, y, basis, **kw), 5), match)
        w.setup(functional_protocol.PROTOCOL, _functional_args(X, y, basis), 5)
        for t in range(5):
            w.step(t, w.honest_inbox(t))
        with pytest.raises(_Refused, match="declared 5 rounds"):
            w.step(5, w.honest_inbox(5))
        assert w.svc.budget.spent == pytest.approx(gaussian_epsilon([3.0] * 5, 1e-5), rel=1e-3)
    finally:
        w.close()


def test_functional_statistics_worker_refuses_departures_and_a_stage_beyond_the_declaration(tmp_path):
    grid, X, y = _curves()
    q = fpca.trapezoid_weights(grid)
    w = Party(tmp_path, [functional_protocol.PROTOCOL, functional_protocol.STATISTICS_PROTOCOL], "worker1", accept_coordinator_data=True, **BUDGET)
    w.honest_inbox = lambda t: functional_statistics.StatsRequest("ranges")
    try:
        for nm, match in ((1e-12, "σ/Δ is 1e-12"), (0.0, "refused a non-private run")):
            w.assert_refused_before_release(lambda: w.setup(functional_protocol.STATISTICS_PROTOCOL, ["worker1", X, y, q, nm], 2), match)
        w.setup(functional_protocol.STATISTICS_PROTOCOL, ["worker1", X, y, q, 2.0], 2)
        w.step(0, functional_statistics.StatsRequest("ranges"))
        w.step(1, functional_statistics.StatsRequest("mean", curve_clip=5.0, y_range=(-10.0, 10.0)))
        with pytest.raises(_Refused, match="declared 2 rounds"):  # a third stage (or a repeated one) is refused
            w.step(2, functional_statistics.StatsRequest("mean", curve_clip=5.0, y_range=(-10.0, 10.0)))
        with pytest.raises(_Refused, match="departed from the run it declared|the next round is"):  # a repeated stage
            w.setup(functional_protocol.STATISTICS_PROTOCOL, ["worker1", X, y, q, 2.0], 1)                  # rounds but not declared: the
            w.step(0, functional_statistics.StatsRequest("mean", curve_clip=5.0, y_range=(-10.0, 10.0)))  # price covers it, so it is
            w.step(0, functional_statistics.StatsRequest("mean", curve_clip=5.0, y_range=(-10.0, 10.0)))  # a second release: refused
        assert w.svc.budget.spent == pytest.approx(gaussian_epsilon([2.0] * 3, 1e-5), rel=1e-3)
    finally:
        w.close()


# ----------------------------------------------------------------------------- resume counts every release
def test_after_a_kill_and_resume_the_coordinators_report_and_every_party_ledger_agree(tmp_path):
    """Every side is killed after round 7 (checkpoint at round 5): rounds 6–7 were released; the resumed run
    releases them again. Every party's ledger counts both, and so does the coordinator's report (the parties
    hand the re-released rounds back at Restore); the restarted parties read their ledgers back."""
    from dpadmm.backends.grpc_backend import GrpcBackend
    from dpadmm.backends.grpc_party import make_server
    from dpadmm.cli.party import vertical_remote_data
    from dpadmm.estimators import VerticalLogisticRegression

    rng = np.random.default_rng(5)
    X1, X2 = rng.normal(size=(N, 3)), rng.normal(size=(N, 4))
    paths = write_party_files([X1, X2], np.where(X1[:, 0] + X2[:, 1] > 0, 1, -1), tmp_path / "data")

    class Crash(Exception):
        pass

    def crash(round_, record):
        if round_ == 7:
            raise Crash

    def fit(kill=False, **kw):
        services, servers, peers = [], [], {}
        for i, name in enumerate(("party1", "party2")):  # fresh party processes' worth of state, same --out
            svc = PartyService(name=name, protocol=vertical_protocol.PROTOCOL, data={"train": str(paths[i])}, out=tmp_path / name,
                               secure=False, requests=("score", "rank", "refit") if i == 0 else None,
                               max_epsilon=50.0, delta=1e-5)
            srv, port = make_server(svc, "127.0.0.1:0")
            srv.start()
            services.append(svc)
            servers.append(srv)
            peers[name] = f"127.0.0.1:{port}"
        try:
            be = GrpcBackend(peers, insecure=True, timeout=30.0)
            data = vertical_remote_data(be, [paths[0]], [], normalize=True)
            return VerticalLogisticRegression(epsilon=3.0, delta=1e-5, max_iter=10, tol=0.0, backend=be).fit(
                data.train, data.y, **kw)
        finally:
            for srv in servers:
                srv.stop(0).wait()
            for svc in services:
                if not kill:  # killed: no clean shutdown of the party
                    svc.close()

    with pytest.raises(Crash):
        fit(kill=True, checkpoint_dir=tmp_path / "ckpt", checkpoint_every=5, callbacks=[crash])
    resumed = fit(resume_from=tmp_path / "ckpt")
    rel = resumed.privacy_.releases
    for name in ("party1", "party2"):
        led = ledger_of(paths[0 if name == "party1" else 1])
        assert led["releases"] == 9 + 2  # rounds 2–10 once (round 1 is free) + rounds 6–7 again
        mine = [r for r in rel if r["party"] == name and r["side"] == "features"]
        assert sum(r["rounds"] for r in mine) == 11
        assert led["epsilon_spent"] == pytest.approx(resumed.privacy_.epsilon, rel=2e-3)
    assert f"{resumed.privacy_.epsilon:.4g}" == f"{led['epsilon_spent']:.4g}"  # as both are printed
    assert resumed.privacy_.epsilon > 3.0  # the re-released rounds are on top of the planned budget


def test_docs_list_every_protocols_party_and_coordinator_fields():
    from pathlib import Path

    from dpadmm.protocol import find_protocol

    doc = (Path(__file__).resolve().parents[2] / "docs" / "algorithms.md").read_text()
    for name in ("vertical-sharing", "graph-consensus", "consensus-baseline", "vertical-experts",
                 "functional-quantile", "functional-statistics", "noisy-gradient-gossip"):
        hooks = find_protocol(name).policy
        assert hooks is not None and hooks.check is not None and hooks.price is not None, name
        assert f"### `{name}`" in doc
        for who, table in (("party", hooks.party), ("coordinator", hooks.coordinator)):
            for field, rule in table.items():
                assert f"| `{field}` | {who} | {rule} |" in doc, (name, field)


# ----------------------------------------------------------------------------- honest fits through budgeted parties
def test_a_statistics_run_is_priced_at_the_releases_its_stages_make_and_no_more(tmp_path):
    """The pooled-statistics price is the run's costliest possible releases by stage (one-shot stages at z_s,
    B counts at z_q, one comparison at z_c): an honest plan is priced exactly; a coordinator asking for one
    more one-shot stage than it declared finds no priced release to charge it to and is refused."""
    from dpadmm.algorithms.functional.policy import _stats_price
    from dpadmm.privacy.events import RECORD_REPLACE, GaussianRelease
    from dpadmm.privacy.party_ledger import PartyBudget
    from dpadmm.privacy.policy import PolicyRefusal

    X, y, q = np.zeros((3, 4)), np.zeros(3), np.full(4, 0.25)
    zs, zq, zc = 6.0, 9.0, 4.0
    B = functional_statistics.QUANTILE_STEPS
    cfg = functional_statistics.setup_stats("p", X, y, q, zs, zq, 0.0, 0.0, 2)[0]
    assert _stats_price(cfg, 2 + B).gaussian == {zs: 2, zq: B}  # mean, moments, then the B counts: exact
    assert _stats_price(functional_statistics.setup_stats("p", X, y, q, zs, 0.0, zc, 0.0, 0)[0], 1).gaussian == {zc: 1}
    assert _stats_price(cfg, 2 + B + 3).gaussian == {zs: 5, zq: B}  # rounds beyond the stages: at the costliest
    with pytest.raises(ValueError, match="one-shot stages must be an integer in"):
        functional_statistics.setup_stats("p", X, y, q, zs, zq, 0.0, 0.0, 4)
    b = PartyBudget(tmp_path, "p", 10.0, 1e-5)
    b.open_run("r", functional_protocol.STATISTICS_PROTOCOL.name, _stats_price(cfg, 2 + B), 2 + B)
    for t in range(2):
        b.charge([GaussianRelease("p", t, 1.0, zs, RECORD_REPLACE)], private_step=True, round_=t)
    with pytest.raises(PolicyRefusal, match="beyond the declaration"):  # a third one-shot release (e.g. ranges)
        b.charge([GaussianRelease("p", 2, 1.0, zs, RECORD_REPLACE)], private_step=True, round_=2)
    for t in range(B):
        b.charge([GaussianRelease("p", 2 + t, 1.0, zq, RECORD_REPLACE)], private_step=True, round_=2 + t)
    assert b.spent == pytest.approx(gaussian_epsilon([zs] * 2 + [zq] * B, 1e-5), rel=1e-6)
    b.close()


def _serve(names, protocols, tmp_path, **policy):
    services = {name: PartyService(name=name, protocol=protocols, data={}, out=tmp_path / name, secure=False,
                                   accept_coordinator_data=True, **policy) for name in names}
    peers, stop = serve_parties(services)
    return peers, services, stop


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:the fitted model is worse")  # 10 rounds on a simulation: the check is the ledgers
def test_honest_functional_and_consensus_fits_pass_every_check_of_budgeted_parties(tmp_path):
    """The estimators' own Setup messages satisfy the default policy, and each party's ledger agrees with the
    coordinator's report (functional: the pooled statistics and FDP-ADMM composed per worker)."""
    from dpadmm import ConsensusLogisticRegression, FunctionalQuantileRegressor
    from dpadmm.backends.grpc_backend import GrpcBackend
    from dpadmm.data.functional import simulate_zhou

    # n·ε = 2,600 ≥ MIN_N_EPSILON: the default fit runs the private statistics and FDP-ADMM (below it, only a
    # DP constant); the response's range is estimated privately too (no public y_range)
    data = simulate_zhou(1300, tau=0.5, random_state=0)
    peers, services, stop = _serve(["worker1", "worker2"], [functional_protocol.PROTOCOL, functional_protocol.STATISTICS_PROTOCOL], tmp_path, **BUDGET)
    try:
        be = GrpcBackend(peers, insecure=True, timeout=60)
        m = FunctionalQuantileRegressor(tau=0.5, n_components=4, workers=2, max_iter=10, total_epsilon=2.0,
                                        curve_clip=10.0, backend=be).fit(data.curves, data.y, grid=data.grid)
    finally:
        stop()
    for svc in services.values():
        assert ledger_of(svc)["epsilon_spent"] == pytest.approx(m.privacy_.per_party[svc.name], rel=2e-3)
    X, y = _node_data(n=120)
    from dpadmm.algorithms.consensus import protocol as consensus_protocol

    # the nodes also serve the DP base-rate fallback (fallback_epsilon=0.5 by default): their ledgers price it too
    peers, services, stop = _serve([f"node{i}" for i in range(3)], [consensus_protocol.PROTOCOL, consensus_protocol.BASELINE_PROTOCOL], tmp_path / "c",
                                   max_epsilon=50.0, delta=1e-5)  # [Zhang, Thm 4.1]'s pure ε is large at these sizes
    try:
        be = GrpcBackend(peers, insecure=True, timeout=60)
        m = ConsensusLogisticRegression(perturbation="pp", alpha=3.0, n_nodes=3, max_iter=4, batch=False,
                                        backend=be).fit(X, y)
    finally:
        stop()
    assert m.handed_over_ in ("model", "dp-base-rate") and m.dp_base_rate_ is not None
    for svc in services.values():
        assert ledger_of(svc)["epsilon_spent"] == pytest.approx(m.privacy_.per_party[svc.name], rel=1e-9)
        led = ledger_of(svc)
        assert [r["protocol"] for r in led["runs"]][-2:] == ["graph-consensus", "consensus-baseline"]


def test_a_killed_partys_charges_are_read_back_at_restart(tmp_path):
    """Each charged round is a row of the store, committed before the reply leaves: a party killed mid-run loses
    none of them; an edited row stops the next start (one line naming it)."""
    import sqlite3

    from dpadmm.privacy.ledger_store import LedgerTampered, configured
    from dpadmm.privacy.events import RECORD_REPLACE, GaussianRelease
    from dpadmm.privacy.party_ledger import PartyBudget
    from dpadmm.privacy.policy import RunPrice

    b = PartyBudget(tmp_path, "p", 10.0, 1e-5)
    b.open_run("r1", "x", RunPrice({5.0: 5}, 0.0, "record_replace"), 6)
    for t in range(3):
        b.charge([GaussianRelease("p", t, 1.0, 5.0, RECORD_REPLACE)], private_step=True, round_=t)
    # killed here: no close
    again = PartyBudget(tmp_path, "p", 10.0, 1e-5)
    assert again.ledger["releases"] == 3 and again.find_run("r1")["charged"]["releases"] == 3
    assert again.spent == pytest.approx(gaussian_epsilon([5.0] * 3, 1e-5), rel=1e-6)
    again.close()
    db = sqlite3.connect(configured()[0][len("sqlite:///"):])
    with db:  # every charge's count lowered to 0
        for seq, body in db.execute("SELECT seq, body FROM dpadmm_entries WHERE kind = 'charge'").fetchall():
            b = json.loads(body)
            db.execute("UPDATE dpadmm_entries SET body = ? WHERE seq = ?",
                       (json.dumps(dict(b, g={k: 0 for k in b["g"]})), seq))
    db.close()
    with pytest.raises(LedgerTampered, match=r"tampered with: row \d+ \(charge of data set party:p\) does not match"):
        PartyBudget(tmp_path, "p", 10.0, 1e-5)


@pytest.mark.parametrize("label_mechanism", ["gaussian", "rr"])
def test_a_resumed_simulation_counts_the_rounds_it_releases_again_on_both_sides(label_mechanism):
    """In-process (no party ledger): the driver journals each round's events beside its checkpoint, so the
    resumed report counts the re-released rounds — the parties' feature shares and the coordinator's own
    label releases. Randomized-response labels are released once per run: the resumed run reuses the release
    stored in the label party's checkpoint, so the label side counts exactly one release and no more ε."""
    import tempfile
    from pathlib import Path

    from dpadmm.estimators import VerticalLogisticRegression

    rng = np.random.default_rng(6)
    X1, X2 = rng.normal(size=(N, 3)), rng.normal(size=(N, 4))
    y = np.where(X1[:, 0] + X2[:, 1] > 0, 1, -1)

    class Crash(Exception):
        pass

    def crash(round_, record):
        if round_ == 7:
            raise Crash

    kw = dict(epsilon=3.0, label_epsilon=2.0, delta=1e-5, max_iter=10, tol=0.0, label_mechanism=label_mechanism)
    ck = Path(tempfile.mkdtemp()) / "ckpt"
    with pytest.raises(Crash):
        VerticalLogisticRegression(**kw).fit([X1, X2], y, checkpoint_dir=ck, checkpoint_every=5, callbacks=[crash])
    m = VerticalLogisticRegression(**kw).fit([X1, X2], y, resume_from=ck)
    full = VerticalLogisticRegression(**kw).fit([X1, X2], y)
    rel = m.privacy_.releases
    for name in ("party1", "party2"):
        assert sum(r["rounds"] for r in rel if r["party"] == name and r["side"] == "features") == 9 + 2
    assert m.privacy_.epsilon > full.privacy_.epsilon
    if label_mechanism == "gaussian":
        assert sum(r["rounds"] for r in rel if r["side"] == "labels") == 9 + 2
        assert m.privacy_.label["epsilon"] > full.privacy_.label["epsilon"]
    else:
        assert sum(r["rounds"] for r in rel if r["side"] == "labels") == 1
        assert m.privacy_.label["epsilon"] == full.privacy_.label["epsilon"] == 2.0
