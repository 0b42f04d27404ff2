"""A hostile Setup is refused the same way whatever carries the messages (issue 25, item 1).

The party's privacy lives in one runtime (:mod:`dpadmm.runtime`) that every backend hosts. Each case below is a
coordinator's Setup departing from the party's policy in one privacy-relevant field of one protocol (the
``PolicyHooks.party`` tables of each folder's ``policy.py``; the departures of ``tests/test_party_policy.py``),
or the run's own declaration (a coordinator-chosen noise seed, more rounds than the budget covers). On an
in-process, process, Ray and gRPC party with the same policy, the run must be refused at ``Backend.start`` with the
message a bare party runtime gives for that Setup (one ``ProtocolError`` line naming the field), the party's
ledger must record no run and no release, and its audit log must end its Setups with that refusal.

Protocols covered: vertical-sharing, graph-consensus, functional-quantile, functional-statistics, vertical-experts,
noisy-gradient-gossip and vertical-encrypted (its cases skip without the ``he`` extra, ``heu``).
"""

from __future__ import annotations

import inspect
import json
import math

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms.functional import messages as functional_messages, protocol as functional_protocol  # noqa: E402
from dpadmm.algorithms.consensus import protocol as gc  # noqa: E402
from dpadmm.algorithms.vertical import messages as vertical_messages, protocol as vertical_protocol  # noqa: E402
from dpadmm.algorithms.encrypted import protocol as en  # noqa: E402
from dpadmm.algorithms.experts import protocol as ex  # noqa: E402
from dpadmm.algorithms.gossip import protocol as go  # noqa: E402
from dpadmm.backends import InProcessBackend, PartyOperator, PartySpec, ProcessBackend  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, make_server  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.exceptions import ProtocolError  # noqa: E402
from dpadmm.kernels import fpca  # noqa: E402
from dpadmm.kernels.regularizers import L1, L2  # noqa: E402
from dpadmm.privacy.party_ledger import PartyBudget  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal  # noqa: E402
from dpadmm.protocol import PartyData, setup_fields  # noqa: E402
from dpadmm.runtime import PartyRuntime  # noqa: E402
from test_backends import HOSTILE_RAY_CASES, RAY_MARKS  # noqa: E402 (ray_session: tests/conftest.py's)

NAME = "party2"
N = 60
BUDGET = dict(max_epsilon=4.0, delta=1e-5)
# one operator's policy for every protocol (row_clip: experts and encrypted; max_rounds: above every declaration
# below but the one that departs from it)
POLICY = PartyPolicy(max_alpha=10.0, max_score_clip=4.0, row_clip=1.0, max_rounds=1000,
                     accept_premises=("honest-label-party",), **BUDGET)  # encrypted: its operator accepts the premise
PROTOCOLS = [vertical_protocol.PROTOCOL, gc.PROTOCOL, functional_protocol.PROTOCOL, functional_protocol.STATISTICS_PROTOCOL, ex.PROTOCOL, go.PROTOCOL, en.PROTOCOL]


# ----------------------------------------------------------------------------- the hostile Setups
def _vertical(spec=None, **opts):
    spec = spec if spec is not None else _vspec()
    D = PartyData("train", {"ids": np.arange(N), "index": 2, "n_features": 3}, (N, 3))
    return [NAME, D, dict({"lam_sum": 1.0, "reg": L2(), "private": spec, "bound": None, "damping": 0.0,
                           "eval_blocks": {}}, **opts)]


def _vspec(**kw):
    return vertical_messages.PrivacySpec(**dict(dict(noise_multiplier=4.0, mechanism="gaussian", relation="feature_column",
                                      clip=30.0), **kw))


def _node(scale=1.0, T=4, **opts):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3))
    X = X / (2 * np.linalg.norm(X, axis=1, keepdims=True))
    o = dict(dict(degree=np.array([2.0]), C=1.0, reg=0.5, eta=np.ones((1, T)), theta=np.ones((1, T)),
                  alpha=np.full((1, T), 3.0), perturbation="pp"), **opts)
    return [[NAME], [scale * X], [np.where(X[:, 0] > 0, 1.0, -1.0)], o]


def _curves():
    rng = np.random.default_rng(3)
    grid = np.linspace(0, 1, 20)
    X = rng.normal(size=(50, 4)) @ np.array([np.cos(k * np.pi * grid) for k in range(4)]) * 3
    return grid, X, X[:, 2] + rng.normal(size=50)


def _functional(nm=3.0, clip=3.0, c1=None, tau=0.5, lam=0.05, **opts):
    grid, X, y = _curves()
    settings = functional_messages.Settings.make([tau], noise_multiplier=nm, lam=lam)
    o = dict(dict(rho=1.0, n_workers=2, fit_intercept=True, c1=math.hypot(clip or 0.0, 1.0) if c1 is None else c1),
             **opts)
    return [NAME, X, y, fpca.fourier_basis(grid, 3), 1.0, 0.0, 1.0, clip, settings, o]


def _statistics(nm):
    grid, X, y = _curves()
    return [NAME, X, y, fpca.trapezoid_weights(grid), nm]


def _train(**params):
    """A reference to the party's training file (its ``train`` data), every row of it."""
    return PartyData("train", dict({"ids": np.arange(N), "index": 2, "n_features": 3}, **params))


def _experts(train=None, score=None, R=1.0, lam=1e-3, nm=4.0, noise_norm=0.5):
    return [NAME, _train() if train is None else train, score, R, lam, nm, noise_norm]


def _gossip(name=NAME, **opts):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3))
    o = dict(dict(degree=2, max_degree=2, n_nodes=3, n_total=120, rounds=5, range_rounds=0, noise_multiplier=4.0,
                  step=0.5, momentum=0.5, ridge=0.01, row_clip=1.0, bounds=(-np.ones(3), np.ones(3))), **opts)
    return [name, X, np.where(X[:, 0] > 0, 1.0, -1.0), o]


def _encrypted(**kw):
    """setup_party's arguments of an honest forward="encrypted" run (5 rounds: 11 backend rounds)."""
    a = dict(name=NAME, train=_train(), score=None, R=1.0, noise_multiplier=4.0, rounds=5, lam=1e-4, step=8.0,
             forward="encrypted", momentum=0.0, W=1.0, label_R=1.0, label_W=1.0, label_width=3)
    return list(dict(a, **kw).values())


# name: (protocol, setup args (built lazily), declared rounds, noise seed, what the refusal names)
HOSTILE = {
    "vertical: relation constant": (vertical_protocol.PROTOCOL, lambda: _vertical(_vspec(column_change=1e-6)), 5, None,
                                    "column_change is 1e-06"),
    "vertical: relation": (vertical_protocol.PROTOCOL, lambda: _vertical(_vspec(relation="record", clip_inf=3.0)), 5, None,
                           "the neighbouring relation is 'record'"),
    "vertical: no regulariser": (vertical_protocol.PROTOCOL, lambda: _vertical(reg=None, lam_sum=1e12), 5, None, "the regulariser is None"),
    "vertical: l1 regulariser": (vertical_protocol.PROTOCOL, lambda: _vertical(reg=L1()), 5, None, "the regulariser is 'L1'"),
    "vertical: zero lam_sum": (vertical_protocol.PROTOCOL, lambda: _vertical(lam_sum=0.0), 5, None, "lam_sum is 0.0"),
    "vertical: not private": (vertical_protocol.PROTOCOL, lambda: _vertical(private=None), 5, None,
                              "refused a non-private run: its operator gave it a privacy budget"),
    "vertical: negligible noise": (vertical_protocol.PROTOCOL, lambda: _vertical(_vspec(noise_multiplier=1e-12)), 5, None,
                                   "σ/Δ is 1e-12"),
    "vertical: paper mechanism": (vertical_protocol.PROTOCOL, lambda: _vertical(vertical_messages.PrivacySpec(noise_multiplier=4.0, bounds=vertical_messages.Bounds(1, 1, 1))),
                                 5, None, "the mechanism is 'paper'"),
    "vertical: damping": (vertical_protocol.PROTOCOL, lambda: _vertical(damping=0.5), 5, None, "the damping is 0.5"),
    "vertical: clip below the floor": (vertical_protocol.PROTOCOL, lambda: _vertical(_vspec(clip=1e-13)), 5, None, "1e-13"),
    "vertical: overspending declaration": (vertical_protocol.PROTOCOL, lambda: _vertical(), 200, None,
                                           "its 200 declared rounds would bring its spend to ε"),
    "vertical: coordinator's noise seed": (vertical_protocol.PROTOCOL, lambda: _vertical(), 5, 7,
                                           "refused a coordinator-chosen noise seed"),
    "consensus: no perturbation": (gc.PROTOCOL, lambda: _node(perturbation="none"), 4, None, "refused a non-private run"),
    "consensus: pvp": (gc.PROTOCOL, lambda: _node(perturbation="pvp"), 4, None, "the perturbation is 'pvp'"),
    "consensus: alpha = inf": (gc.PROTOCOL, lambda: _node(alpha=np.full((1, 4), np.inf)), 4, None,
                               "the noise rate alpha is 'inf or non-positive'"),
    "consensus: alpha above the cap": (gc.PROTOCOL, lambda: _node(alpha=np.full((1, 4), 50.0)), 4, None, "alpha is 50.0"),
    "consensus: schedule outside [Zhang, Alg. 1]": (gc.PROTOCOL, lambda: _node(theta=np.full((1, 4), 1e-6),
                                                                      eta=np.full((1, 4), 1e-6), C=1e4), 4, None,
                                                    "the schedule is 'outside"),
    "consensus: inexact local solve": (gc.PROTOCOL, lambda: _node(newton_tol=1.0), 4, None, "the local solver's tolerance"),
    "consensus: rows of norm 5": (gc.PROTOCOL, lambda: _node(scale=10.0), 4, None, "the rows' norm is 'above 1'"),
    "functional: no score clip": (functional_protocol.PROTOCOL, lambda: _functional(clip=None, c1=1e-9), 5, None, "the score clip is None"),
    "functional: c1 below the clip": (functional_protocol.PROTOCOL, lambda: _functional(c1=0.1), 5, None, "c1 of the sensitivity is 0.1"),
    "functional: clip above the cap": (functional_protocol.PROTOCOL, lambda: _functional(clip=100.0), 5, None, "the score clip is 100.0"),
    "functional: negligible noise": (functional_protocol.PROTOCOL, lambda: _functional(nm=1e-12), 5, None, "σ/Δ is 1e-12"),
    "functional: not private": (functional_protocol.PROTOCOL, lambda: _functional(nm=0.0), 5, None, "refused a non-private run"),
    "functional: unaccounted releases": (functional_protocol.PROTOCOL, lambda: _functional(emit_events=False), 5, None, "emit_events is False"),
    "functional: tau outside (0, 1)": (functional_protocol.PROTOCOL, lambda: _functional(tau=5.0), 5, None, "a quantile level tau is [5.0]"),
    "functional: negative penalty": (functional_protocol.PROTOCOL, lambda: _functional(lam=-1.0, local_step="exact"), 5, None,
                                     "the penalty weight lam is [-1.0]"),
    "functional: inexact exact step": (functional_protocol.PROTOCOL, lambda: _functional(local_step="exact", newton_tol=0.5), 5, None,
                                       "newton_tol is 0.5"),
    "statistics: negligible noise": (functional_protocol.STATISTICS_PROTOCOL, lambda: _statistics(1e-12), 2, None, "σ/Δ is 1e-12"),
    "statistics: not private": (functional_protocol.STATISTICS_PROTOCOL, lambda: _statistics(0.0), 2, None, "refused a non-private run"),
    "experts: negligible noise": (ex.PROTOCOL, lambda: _experts(nm=1e-12), 1, None, "σ/Δ is 1e-12"),
    "experts: not private": (ex.PROTOCOL, lambda: _experts(nm=None), 1, None, "refused a non-private run"),
    "experts: row clip below the floor": (ex.PROTOCOL, lambda: _experts(R=1e-13), 1, None, "the row clip R is 1e-13"),
    "experts: row clip not the operator's": (ex.PROTOCOL, lambda: _experts(R=2.0), 1, None,
                                             "the row clip R is 2.0, its operator's policy requires R = 1"),
    "experts: non-finite ridge": (ex.PROTOCOL, lambda: _experts(lam=float("nan")), 1, None, "the ridge lam is nan"),
    "experts: zero noise-norm rule": (ex.PROTOCOL, lambda: _experts(noise_norm=0.0), 1, None, "the noise-norm rule is 0.0"),
    "experts: normalised rows": (ex.PROTOCOL, lambda: _experts(_train(normalize=True)), 1, None,
                                 "the preparation of 'train' is 'normalize-rows'"),
    "experts: training rows from another file": (ex.PROTOCOL, lambda: _experts(PartyData("new", dict(_train().params))), 1,
                                                 None, "the training rows' file is 'new'"),
    "experts: scoring the training file": (ex.PROTOCOL, lambda: _experts(score={"x": _train()}), 1, None,
                                           "refused to score 'x': it is its training file"),
    "experts: overspending noise": (ex.PROTOCOL, lambda: _experts(nm=0.6), 1, None,
                                    "its 1 declared round would bring its spend to ε"),
    "gossip: another node's name": (go.PROTOCOL, lambda: _gossip(name="mallory"), 5, None, "the node name is 'mallory'"),
    "gossip: negligible noise": (go.PROTOCOL, lambda: _gossip(noise_multiplier=1e-12), 5, None, "σ/Δ is 1e-12"),
    "gossip: not private": (go.PROTOCOL, lambda: _gossip(noise_multiplier=0.0), 5, None, "refused a non-private run"),
    "gossip: infinite row clip": (go.PROTOCOL, lambda: _gossip(row_clip=np.inf), 5, None, "the row clip R is inf"),
    "gossip: non-finite step": (go.PROTOCOL, lambda: _gossip(step=np.nan), 5, None, "the step η is nan"),
    "gossip: momentum 1": (go.PROTOCOL, lambda: _gossip(momentum=1.0), 5, None, "the momentum β is 1.0"),
    "gossip: negative ridge": (go.PROTOCOL, lambda: _gossip(ridge=-1.0), 5, None, "the ridge λ is -1.0"),
    "gossip: bounds lo > hi": (go.PROTOCOL, lambda: _gossip(bounds=(np.ones(3), -np.ones(3))), 5, None,
                               "the declared column bounds is 'non-finite or lo >= hi'"),
    "gossip: rounds above max_rounds": (go.PROTOCOL, lambda: _gossip(rounds=2000), 5, None, "the rounds is 2000"),
    "gossip: overspending declaration": (go.PROTOCOL, lambda: _gossip(rounds=500), 500, None,
                                         "its 500 declared rounds would bring its spend to ε"),
    "encrypted: clear forward": (en.PROTOCOL, lambda: _encrypted(forward="clear"), 11, None, "the forward pass is 'clear'"),
    "encrypted: negligible noise": (en.PROTOCOL, lambda: _encrypted(noise_multiplier=1e-12), 11, None, "σ/Δ is 1e-12"),
    "encrypted: not private": (en.PROTOCOL, lambda: _encrypted(noise_multiplier=None), 11, None, "refused a non-private run"),
    "encrypted: row clip below the floor": (en.PROTOCOL, lambda: _encrypted(R=1e-13), 11, None, "the row clip R is 1e-13"),
    "encrypted: row clip not the operator's": (en.PROTOCOL, lambda: _encrypted(R=2.0), 11, None,
                                               "the row clip R is 2.0, its operator's policy requires R = 1"),
    "encrypted: zero ridge": (en.PROTOCOL, lambda: _encrypted(lam=0.0), 11, None, "the ridge lam is 0.0"),
    "encrypted: negative step": (en.PROTOCOL, lambda: _encrypted(step=-1.0), 11, None, "the step size is -1.0"),
    "encrypted: rounds above max_rounds": (en.PROTOCOL, lambda: _encrypted(rounds=2000), 11, None, "the rounds is 2000"),
    "encrypted: overspending declaration": (en.PROTOCOL, lambda: _encrypted(rounds=400, noise_multiplier=1.0), 801, None,
                                            "its 801 declared rounds would bring its spend to ε"),
}


# ----------------------------------------------------------------------------- the party, on every backend
@pytest.fixture(scope="module")
def party_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    paths = write_party_files([rng.normal(size=(N, 2)), rng.normal(size=(N, 3))],
                              np.where(rng.random(N) < .5, 1, -1), tmp_path_factory.mktemp("data"))
    return str(paths[1])


@pytest.fixture(scope="module")
def grpc_party(party_file, tmp_path_factory):
    """One gRPC party for every case (refused Setups spend nothing, so its ledger stays empty throughout)."""
    svc = PartyService(name=NAME, protocol=PROTOCOLS, data={"train": party_file}, out=tmp_path_factory.mktemp("grpc"),
                       secure=False, accept_coordinator_data=True, policy=POLICY)
    srv, port = make_server(svc, "127.0.0.1:0")
    srv.start()
    yield svc, f"127.0.0.1:{port}"
    srv.stop(0).wait()
    svc.close()


def _reference(setup, party_file, out) -> str:
    """The refusal a bare party runtime gives for ``setup`` (what every backend's party must say)."""
    rt = PartyRuntime(name=NAME, protocol=PROTOCOLS, data={"train": party_file}, out=out,
                      accept_coordinator_data=True, policy=POLICY)
    try:
        with pytest.raises(PolicyRefusal) as exc:
            rt.call("Setup", setup)
    finally:
        rt.close()
    return str(exc.value)


def _setups(case):
    proto, args, rounds, seed, _ = HOSTILE[case]
    spec = PartySpec.of(proto, NAME, proto.setup_type(*args()))  # the hostile values, unchecked
    setup = {"protocol": proto.name, "party": NAME, "index": 0, "noise_seed": seed, "setup": setup_fields(proto, spec.setup),
             "rounds": rounds}
    return spec, setup


def _audit(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _keygen(case) -> bool:
    """An encrypted case whose Setup reaches the party's policy check with forward="encrypted": the party's setup
    has made its own 2048-bit Okamoto–Uchiyama key pair by then (seconds of CPU, twice a case)."""
    proto, args = HOSTILE[case][:2]
    return proto is en.PROTOCOL and inspect.signature(en.PROTOCOL.setup).bind(*args()).arguments["forward"] == "encrypted"


def _cases():
    for case in HOSTILE:
        for backend in ("inprocess", "process", "ray", "grpc"):
            marks = RAY_MARKS if backend == "ray" else [pytest.mark.slow] if _keygen(case) else []
            yield pytest.param(case, backend, marks=marks, id=f"{case}-{backend}")


@pytest.mark.parametrize(("case", "backend"), list(_cases()))
def test_a_hostile_setup_is_refused_alike_on_every_backend(case, backend, party_file, tmp_path, request):
    if HOSTILE[case][0] is en.PROTOCOL:
        pytest.importorskip("heu")  # the he extra: without it the encrypted party refuses to start at all
    spec, setup = _setups(case)
    if backend == "grpc":
        svc, address = request.getfixturevalue("grpc_party")
        be = GrpcBackend({NAME: address}, insecure=True, timeout=60.0)
        out, status = svc.out, svc.budget.status
    else:
        out = tmp_path / NAME  # the backend's party_dir/<name>: the party's own directory
        operators = {NAME: PartyOperator(policy=POLICY, data={"train": party_file})}
        if backend == "ray":
            request.getfixturevalue("ray_session")
            from dpadmm.backends.ray import RayBackend

            be = RayBackend(policies=operators, party_dir=tmp_path)
        else:
            be = (InProcessBackend if backend == "inprocess" else ProcessBackend)(policies=operators, party_dir=tmp_path)
        status = None
    # the bare runtime, on the party's own directory (a refusal names its ledger's path)
    expected = _reference(setup, party_file, out)
    assert HOSTILE[case][4] in expected  # the refusal names the departing field (not some other reason)
    try:
        with pytest.raises(ProtocolError) as exc:
            be.start([spec], noise_seed=setup["noise_seed"], rounds=setup["rounds"])
    finally:
        be.close()
    assert str(exc.value) == expected and type(exc.value) is ProtocolError and exc.value.party == NAME
    if status is None:  # the simulation's party wrote its ledger in its own directory
        budget = PartyBudget(out, NAME, BUDGET["max_epsilon"], BUDGET["delta"])
        ledger = budget.status()
        budget.close()
    else:
        ledger = status()
    assert (ledger["runs"], ledger["releases"], ledger["epsilon_spent"]) == (0, 0, 0)
    setups = [r for r in _audit(out / "audit.jsonl") if r["method"] == "Setup"]
    assert setups[-1]["status"] == "refused" and setups[-1]["detail"] == expected and "reply" not in setups[-1]
    assert not any(r["method"] == "Step" for r in _audit(out / "audit.jsonl"))


@pytest.mark.parametrize("mod, args, rounds", [
    (ex, _experts, 1), (go, _gossip, 5),
    pytest.param(en, _encrypted, 11, marks=pytest.mark.slow),  # the party's own Paillier key pair: seconds of CPU
], ids=["experts", "gossip", "encrypted"])
def test_the_honest_setups_the_hostile_ones_depart_from_are_accepted(mod, args, rounds, party_file, tmp_path):
    """Each hostile Setup above departs from one of these in one field: the same party accepts them as they are."""
    if mod is en:
        pytest.importorskip("heu")
    rt = PartyRuntime(name=NAME, protocol=PROTOCOLS, data={"train": party_file}, out=tmp_path,
                      accept_coordinator_data=True, policy=POLICY)
    try:
        rt.call("Setup", {"protocol": mod.PROTOCOL.name, "party": NAME, "index": 0, "noise_seed": None,
                          "setup": setup_fields(mod.PROTOCOL, args()), "rounds": rounds})
        assert rt.budget.status()["runs"] == 1
    finally:
        rt.close()


def test_the_loopback_namespace_refuses_a_hostile_setup_of_every_protocol_on_ray():
    """The namespace run (test_backends.test_ray_suite_in_loopback_namespace) picks its Ray cases by name: they are
    cases of this file, and they cover every protocol."""
    assert set(HOSTILE_RAY_CASES) <= set(HOSTILE)
    assert {HOSTILE[case][0].name for case in HOSTILE_RAY_CASES} == {p.name for p in PROTOCOLS}
