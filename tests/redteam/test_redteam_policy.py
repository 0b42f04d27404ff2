"""Red team of the party-side privacy policy (issue 17): a hostile coordinator against a budgeted party.

Every attack drives a :class:`PartyService` through its real message path (``handle`` on the exact encoded
bytes a coordinator sends, well-formed, values changed only). A test of a hole that is still open is marked
``xfail(strict=True)``: it asserts the *safe* behaviour, so it flips (XPASS → failure) once the hole is
fixed and the mark must be removed. A plain test is a check that held. Findings: docs in
/work/wt/briefs/REDTEAM_POLICY.md (the lead's copy).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms.functional import (local as functional_local, messages as functional_messages,  # noqa: E402
                                          party as functional_party, protocol as functional_protocol,
                                          rules as functional_rules)
from dpadmm.algorithms.functional import statistics as functional_statistics  # noqa: E402
from dpadmm.algorithms.vertical import (data as vertical_data, messages as vertical_messages,  # noqa: E402
                                        party as vs_party, protocol as vertical_protocol)
from dpadmm.backends.grpc_party import _Refused  # noqa: E402
from conftest import ledger_of  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.kernels import fpca  # noqa: E402
from dpadmm.kernels.regularizers import L2  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402
from test_party_policy import Party as _PolicyParty  # noqa: E402  (one harness for both files)

N = 60
BUDGET = dict(max_epsilon=4.0, delta=1e-5)


class Party(_PolicyParty):
    """The policy tests' party harness (encoded coordinator messages into a real PartyService), plus the
    persisted ledger as a dict."""

    def ledger(self):
        if self.svc.budget.run is not None:
            self.svc.budget.close_run()
        return ledger_of(self.svc)


# ----------------------------------------------------------------------------- vertical sharing [Hu]
@pytest.fixture
def vertical(tmp_path):
    rng = np.random.default_rng(0)
    paths = write_party_files([rng.normal(size=(N, 2)), rng.normal(size=(N, 3))], np.where(rng.random(N) < .5, 1, -1),
                              tmp_path / "data")
    p = Party(tmp_path, vertical_protocol.PROTOCOL, "party2", data={"train": str(paths[1])}, **BUDGET)
    p.paths = paths

    def args(spec=None, params=None, **opts):
        spec = spec if spec is not None else vertical_messages.PrivacySpec(noise_multiplier=4.0, mechanism="gaussian",
                                                            relation="feature_column", clip=30.0)
        D = PartyData("train", dict({"ids": np.arange(N), "index": 2, "n_features": 3}, **(params or {})), (N, 3))
        return ["party2", D, dict({"lam_sum": 1.0, "reg": L2(), "private": spec}, **opts)]

    p.args = args
    yield p
    p.close()


def _exact_share(cfg, v):
    """The party's un-noised share D_m x_m for the (clipped) input v: x = −(λ I + ρ DᵀD)⁻¹ Dᵀ v at ρ = 1."""
    D = cfg.D.toarray() if hasattr(cfg.D, "toarray") else np.asarray(cfg.D)
    return D @ -np.linalg.solve(cfg.lam_sum * np.eye(D.shape[1]) + D.T @ D, D.T @ v)


def test_R1_vertical_tiny_input_is_not_an_unnoised_free_release(vertical):
    """The coordinator sends dual = 1e-200·w (w its choice) at round index 0, again and again. Each reply is
    1e-200·D_m(λI + DᵀD)⁻¹Dᵀw exactly (no noise): rescaled, the party's exact D_m x_m for any w."""
    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 3)
    w = np.random.default_rng(5).normal(size=N)
    served = 0
    for _ in range(5):
        try:
            out = vertical.step(0, vertical_messages.CoordinatorMessage(0, np.zeros(N), 1e-200 * w, 1.0))
        except _Refused:
            continue
        served += 1
        exact = _exact_share(vertical.svc.cfg, w)
        # rescaled, the noise is ~1e190: a plain norm squares it past the float range (an overflow
        # warning and err = inf), so the difference is measured in units of its largest entry
        diff = out["outbox"].share * 1e200 - exact
        scale = np.max(np.abs(diff))
        err = scale * np.linalg.norm(diff / scale) / np.linalg.norm(exact) if scale > 0 else 0.0
        assert err > 1e-3, f"share equals the exact D_m x_m to {err:.1e} (σ = {out['events'][0].sigma})"
    assert served <= 2  # at most the declared rounds minus the free zero round... and each charged
    assert vertical.ledger()["releases"] >= served


def test_R2_vertical_round_indices_must_increase(vertical):
    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 4)
    vertical.step(0, vertical_messages.CoordinatorMessage(0, np.zeros(N), np.zeros(N), 1.0))
    with pytest.raises(_Refused, match="refused round index 0 .*the next round is 1"):
        vertical.step(0, vertical_messages.CoordinatorMessage(0, np.zeros(N), np.zeros(N), 1.0))
    with pytest.raises(_Refused, match="refused round index -1 .*the next round is 1"):
        vertical.step(-1, vertical_messages.CoordinatorMessage(-1, np.zeros(N), np.zeros(N), 1.0))


def test_R2b_replayed_rounds_with_real_input_are_still_charged_and_capped(vertical):
    """What held: with an ordinary (non-underflowing) input every replayed release is charged, and no more than
    the priced releases get out. (Since R2 a replayed index is refused outright; the rounds here increase.)"""
    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 3)
    ok = 0
    for t in range(4):
        try:
            vertical.step(t, vertical_messages.CoordinatorMessage(t, np.zeros(N), np.ones(N), 1.0))
            ok += 1
        except _Refused as exc:
            assert "beyond the declaration" in str(exc) or "the next round is" in str(exc)
    assert ok == 2 and vertical.ledger()["releases"] == 2


def test_R3_row_normalisation_amplifies_a_feature_column_change(tmp_path):
    """The math behind R3 (holds, as a fact): a raw column change of ℓ2 norm 1 over small rows becomes, after
    ``normalize=True`` (a coordinator-chosen PartyData parameter), a block change of spectral norm ≫ 1 = Δ_c,
    and a share change 2.5× the sensitivity the party charges (λ_s = 100, ρ = 1, V = 30)."""
    from dpadmm.privacy.mechanisms import ridge_share_sensitivity

    n, lam = 200, 100.0
    a = 1.0 / math.sqrt(n)
    base = np.zeros((n, 3))
    base[0::2, 0] = base[1::2, 2] = a * 1e-3
    neigh = base.copy()
    neigh[:, 1] = a  # column 2 changed by a vector of ℓ2 norm 1 (= Δ_c)
    lab = np.where(np.arange(n) % 2, 1, -1)
    p0 = write_party_files([np.zeros((n, 1)), base], lab, tmp_path / "d0")[1]
    p1 = write_party_files([np.zeros((n, 1)), neigh], lab, tmp_path / "d1")[1]
    params = {"ids": np.arange(n), "index": 2, "n_features": 3, "normalize": True}
    D0, D1 = (vs_party.clip_rows(vertical_data.load_party_data(p, params)) for p in (p0, p1))  # as setup_party builds the block
    assert np.linalg.norm(neigh - base) == pytest.approx(1.0)
    assert np.linalg.norm(D1 - D0, 2) > 10.0  # the relation's Δ_c = 1 no longer bounds the change

    def A(D):
        return D @ np.linalg.solve(lam * np.eye(3) + D.T @ D, D.T)

    ev, U = np.linalg.eigh(A(D1) - A(D0))
    v = 30.0 * U[:, np.argmax(np.abs(ev))]  # ‖v‖ = V = 30, a transcript the coordinator can steer to
    charged = ridge_share_sensitivity(relation="feature_column", V=30.0, lam_sum=lam, rho=1.0)
    assert np.linalg.norm((A(D1) - A(D0)) @ v) > 2.0 * charged


def test_R3_vertical_party_refuses_or_ignores_coordinator_normalisation(vertical):
    try:
        vertical.setup(vertical_protocol.PROTOCOL, vertical.args(params={"normalize": True}), 3)
    except _Refused:
        return
    raw = vertical_data.load_party_data(vertical.paths[1], {"ids": np.arange(N), "index": 2, "n_features": 3})
    D = vertical.svc.cfg.D
    assert np.allclose(D.toarray() if hasattr(D, "toarray") else D, vs_party.clip_rows(raw))


def test_R6_vertical_rank_request_refused_in_private_run(vertical):
    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 3)
    with pytest.raises(_Refused, match="refused request 'rank' in a private run"):
        vertical.call("Request", {"handler": "rank", "arguments": {}})


@pytest.mark.parametrize("rho", [math.nan, -1.0, math.inf, 0.0])
def test_vertical_nonfinite_or_nonpositive_rho_releases_nothing_and_keeps_the_ledger(vertical, rho):
    """Held: a per-round ρ of NaN / negative / inf / 0 is refused or errors before any reply; ledger intact."""
    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 3)
    vertical.step(0, vertical_messages.CoordinatorMessage(0, np.zeros(N), np.zeros(N), 1.0))
    try:
        out = vertical.step(1, vertical_messages.CoordinatorMessage(1, np.zeros(N), np.ones(N), rho))
    except Exception:  # noqa: BLE001 - refused or errored: nothing left the party
        out = None
    if out is not None:  # served: must be no information (NaN) or a charged release
        share = out["outbox"].share
        assert not np.all(np.isfinite(share)) or vertical.ledger()["releases"] == 1
    led = vertical.ledger()
    assert led["releases"] <= 1 and math.isfinite(float(led["epsilon_spent"]))


def test_vertical_noise_scale_next_to_a_noise_multiplier_is_refused_at_the_round(vertical):
    """Held: both set (noise_scale wins in release()) passes Setup but the per-round check refuses σ/Δ ≪ declared."""
    spec = vertical_messages.PrivacySpec(noise_multiplier=4.0, noise_scale=1e-12, mechanism="gaussian", clip=30.0)
    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(spec), 3)
    vertical.step(0, vertical_messages.CoordinatorMessage(0, np.zeros(N), np.zeros(N), 1.0))
    with pytest.raises(_Refused, match="beyond the declaration"):
        vertical.step(1, vertical_messages.CoordinatorMessage(1, np.zeros(N), np.ones(N), 1.0))
    assert vertical.ledger()["releases"] == 0


@pytest.mark.parametrize("rounds", [True, 2.5, "3", [3], -1, 0])
def test_vertical_declared_rounds_must_be_a_positive_integer(vertical, rounds):
    with pytest.raises(_Refused, match="declared rounds must be a positive integer"):
        vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), rounds)


# ----------------------------------------------------------------------------- functional quantile [Zhou]
def _curves(m=50, T=20, seed=3):
    rng = np.random.default_rng(seed)
    grid = np.linspace(0, 1, T)
    X = rng.normal(size=(m, 4)) @ np.array([np.cos(k * np.pi * grid) for k in range(4)]) * 3
    return grid, X, X[:, 2] + rng.normal(size=m)


def _fargs(X, y, basis, *, tau=0.5, nm=3.0, clip=3.0, c1=None, score_scale=1.0, fit_intercept=True, **opts):
    settings = functional_messages.Settings.make([tau], noise_multiplier=nm, lam=0.05)
    need = math.hypot(clip, 1.0) if fit_intercept else clip
    o = dict(dict(rho=1.0, n_workers=2, fit_intercept=fit_intercept, c1=need if c1 is None else c1, step="constant"),
             **opts)
    return ["worker1", X, y, basis, score_scale, 0.0, 1.0, clip, settings, o]


@pytest.fixture
def worker(tmp_path):
    grid, X, y = _curves()
    w = Party(tmp_path, [functional_protocol.PROTOCOL, functional_protocol.STATISTICS_PROTOCOL], "worker1", accept_coordinator_data=True, **BUDGET)
    w.data = (grid, X, y, fpca.fourier_basis(grid, 3))
    yield w
    w.close()


def _noiseless(cfg, state, inbox):
    """What the party's step computes before its noise (same step, σ forced to 0)."""
    import dataclasses

    quiet = dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings,
                                                                  noise_multiplier=np.zeros_like(
                                                                      cfg.settings.noise_multiplier)))
    return functional_party.party_step(quiet, state, inbox, rng=np.random.default_rng(0))[1].w_tilde


def _relative_noise(worker, args):
    """Setup + one step; the release's distance to the noiseless value, relative to the value (None: refused)."""
    try:
        worker.setup(functional_protocol.PROTOCOL, args, 3)
    except _Refused:
        return None
    K = worker.svc.cfg.K
    inbox = functional_messages.HubMessage(0, np.zeros((1, 1, K)))
    exact = _noiseless(worker.svc.cfg, worker.svc.state, inbox)
    try:
        out = worker.step(0, inbox)
    except _Refused:
        return None
    scale = float(np.max(np.abs(exact)))  # norms of ~1e-200 vectors underflow: compare in the value's own units
    return float(np.linalg.norm((out["outbox"].w_tilde - exact) / scale) / np.linalg.norm(exact / scale))


def test_functional_honest_release_is_noised(worker):
    grid, X, y, basis = worker.data
    rel = _relative_noise(worker, _fargs(X, y, basis))
    assert rel is not None and rel > 1e-2


def test_R4_functional_tau_outside_unit_interval_is_refused(worker):
    grid, X, y, basis = worker.data
    rel = _relative_noise(worker, _fargs(X, y, basis, tau=1e6))
    assert rel is None or rel > 1e-2, f"release within {rel:.1e} (relative) of its noiseless value"


def test_R5_functional_score_clip_survives_a_huge_score_scale(worker):
    grid, X, y, basis = worker.data
    rel = _relative_noise(worker, _fargs(X, y, basis, score_scale=1e200, clip=1e-250, fit_intercept=False))
    assert rel is None or rel > 1e-2, f"release within {rel:.1e} (relative) of its noiseless value"


# ----------------------------------------------------------------------------- functional pooled statistics
def test_R5b_statistics_mean_stage_clip_survives_a_tiny_projection(worker):
    grid, X, y, basis = worker.data
    q = fpca.trapezoid_weights(grid)
    worker.setup(functional_protocol.STATISTICS_PROTOCOL, ["worker1", X, y, q, 2.0], 2)
    P = np.eye(len(grid))[:, :3] * 1e-170
    cx = 1e-185
    try:
        with np.errstate(invalid="ignore", divide="ignore"):  # as in production: a warning, not an error
            out = worker.step(0, functional_statistics.StatsRequest("mean", curve_clip=cx, projection=P, y_range=(-10.0, 10.0)))
    except _Refused:
        return
    Z = fpca.scale_curves(X, q) @ P
    exact = Z.sum(0) / cx  # what an unclipped sum reveals; a clipped one has norm ≤ m = 50
    got = out["outbox"].values["mean"][:3]
    assert np.linalg.norm(got - exact) > 1e-3 * np.linalg.norm(exact), "curve sums released exactly"


# ----------------------------------------------------------------------------- functional: λ and per-round ρ
def test_R7_negative_lambda_amplifies_the_exact_steps_sensitivity():
    """The math behind R7 (holds, as a fact): with λ/M = −0.99ρ and the ℓ2 penalty the exact local objective
    is only 0.01ρ-strongly convex; one replaced sample moves the exact step > 3× the charged 2c₁/(mρ)."""
    rng = np.random.default_rng(1)
    m, K = 50, 3
    A = rng.normal(size=(m, K))
    A /= np.maximum(np.linalg.norm(A, axis=1, keepdims=True) / 2.0, 1.0)  # ‖A_j‖ ≤ c₁ = 2
    y = rng.normal(size=m) + 5.0
    A2 = A.copy()
    A2[0] = -A[0]  # one sample replaced (still ‖A_j‖ ≤ c₁)
    opts = dict(rho=1.0, n_workers=2, c1=2.0, local_step="exact", penalty="l2", step="constant")
    S = functional_messages.Settings.make([0.5], noise_multiplier=1.0, lam=-1.98)
    c, _ = functional_party.make_party("w", A, y, S, **opts)
    c2, _ = functional_party.make_party("w", A2, y, S, **opts)
    z = np.zeros((1, 1, 1, K))
    w1 = functional_local.exact_local_solve(c, z, z, levels=functional_rules.FULL_LEVELS)
    w2 = functional_local.exact_local_solve(c2, z, z, levels=functional_rules.FULL_LEVELS)
    assert np.linalg.norm(w1 - w2) > 3.0 * float(functional_local.sensitivity(c, np.ones(1))[0])


def test_R7_functional_negative_lambda_is_refused_for_the_exact_step(worker):
    grid, X, y, basis = worker.data
    args = _fargs(X, y, basis, local_step="exact", penalty="l2")
    args[8] = functional_messages.Settings.make([0.5], noise_multiplier=3.0, lam=-1.98)
    with pytest.raises(_Refused, match="the penalty weight lam is .*requires finite λ ≥ 0"):
        worker.setup(functional_protocol.PROTOCOL, args, 3)


def test_R8_functional_every_released_setting_is_charged(worker):
    grid, X, y, basis = worker.data
    args = _fargs(X, y, basis, step="paper")
    args[8] = functional_messages.Settings.make([0.5, 0.5], noise_multiplier=3.0, lam=[0.05, 1000.0])
    worker.setup(functional_protocol.PROTOCOL, args, 3)
    cfg = worker.svc.cfg
    s = cfg.settings
    eta = functional_rules.step_size(cfg.step, 1, c_w=cfg.c_w, c1=cfg.c1, c2=cfg.c2, lam=s.lam, n_workers=cfg.n_workers, K=cfg.K,
                       m=cfg.m, eps_iter=s.eps_iter, delta_iter=s.delta_iter, eta0=cfg.eta0)
    rho = -0.5 * float(1.0 / eta[0] + 1.0 / eta[1])  # ρ + 1/η₀ < 0 < ρ + 1/η₁
    try:
        out = worker.step(0, functional_messages.HubMessage(0, np.zeros((1, 2, cfg.K)), rho))
    except _Refused:
        return
    released = out["outbox"].w_tilde.shape[2]
    assert worker.ledger()["releases"] == released  # 2 settings released, 1 charged


# ----------------------------------------------------------------------------- graph consensus [Zhang]
def test_consensus_replayed_or_negative_round_index_stays_within_the_priced_epsilon(tmp_path):
    """Held: the node indexes its schedule by the coordinator's round (t = −1 → the last column, whose α may be
    above every priced column), but the per-round check caps the charged pure ε at the price."""
    from dpadmm.algorithms.consensus import messages as consensus_messages, protocol as consensus_protocol

    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3))
    X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    T = 10
    alpha = np.full((1, T), 3.0)
    alpha[0, -1] = 4.0
    opts = dict(degree=np.array([2.0]), C=1.0, reg=0.5, eta=np.ones((1, T)), theta=np.ones((1, T)), alpha=alpha,
                perturbation="pp")
    node = Party(tmp_path, consensus_protocol.PROTOCOL, "node0", accept_coordinator_data=True, **BUDGET)
    try:
        node.setup(consensus_protocol.PROTOCOL, [["node0"], [X], [y], opts], 2)
        priced = node.svc.budget.run["priced"]["pure_epsilon"]
        served = 0
        for t in (-1, -1, 0, 0, 1):
            try:
                node.step(t, consensus_messages.NeighbourMessage(t, np.zeros((1, 3))))
                served += 1
            except _Refused as exc:
                assert "beyond the" in str(exc) or "the next round is" in str(exc)  # R2: indices strictly increase
        led = node.ledger()
        assert served < 5 and led["pure_epsilon"] <= priced * (1 + 1e-9)
    finally:
        node.close()


# ----------------------------------------------------------------------------- I1: a functional worker reads its own file
def test_I1_functional_worker_reads_its_own_curve_file(tmp_path):
    """Both functional protocols declare ``load``/``describe``: a budgeted worker started with ``--data
    train=FILE`` (no --accept-coordinator-data) serves the statistics and the ADMM run from its own curves,
    and still refuses curves sent by the coordinator."""
    from dpadmm.data.functional import FunctionalData, write_functional_csv

    grid, X, y = _curves()
    path = tmp_path / "w1.csv"
    write_functional_csv(path, FunctionalData(X, y, grid))
    w = Party(tmp_path, [functional_protocol.PROTOCOL, functional_protocol.STATISTICS_PROTOCOL], "worker1", data={"train": str(path)}, **BUDGET)
    try:
        assert w.call("Hello", {})["data"] == {"train": {"grid_points": len(grid)}}
        Xr, yr = PartyData("train", {"part": "curves"}), PartyData("train", {"part": "y"})
        q = fpca.trapezoid_weights(grid)
        w.setup(functional_protocol.STATISTICS_PROTOCOL, ["worker1", Xr, yr, q, 2.0], 1)
        np.testing.assert_allclose(w.svc.cfg.X, X)
        np.testing.assert_allclose(w.svc.cfg.y, y)
        w.step(0, functional_statistics.StatsRequest("ranges"))
        args = _fargs(Xr, yr, fpca.fourier_basis(grid, 3))
        w.setup(functional_protocol.PROTOCOL, args, 2)
        assert w.svc.cfg.m == X.shape[0]
        out = w.step(0, functional_messages.HubMessage(0, np.zeros((1, 1, w.svc.cfg.K))))
        assert np.all(np.isfinite(out["outbox"].w_tilde)) and w.ledger()["releases"] == 2
        with pytest.raises(_Refused, match="refused data sent by the coordinator"):
            w.setup(functional_protocol.PROTOCOL, _fargs(X, y, fpca.fourier_basis(grid, 3)), 2)
    finally:
        w.close()


# ----------------------------------------------------------------------------- the fixes' own checks (planted bugs)
def test_R1_planted_zero_sensitivity_is_caught_twice(vertical, monkeypatch):
    """A step that prices a non-zero share at sensitivity 0 is stopped by the algorithm (``release``) and, if its
    event lies, by the party (``_step``: a non-zero message at sensitivity 0 and σ 0 never leaves)."""
    from dpadmm.exceptions import PrivacyPreconditionError
    from dpadmm.privacy.events import FEATURE_COLUMN, GaussianRelease

    vertical.setup(vertical_protocol.PROTOCOL, vertical.args(), 3)
    vertical.step(0, vertical_messages.CoordinatorMessage(0, np.zeros(N), np.zeros(N), 1.0))
    from dpadmm.algorithms.vertical import party as vertical_party  # the step's home module (vs re-exports it)

    monkeypatch.setattr(vertical_party, "sensitivity", lambda cfg, rho, v=None: 0.0)
    with pytest.raises(PrivacyPreconditionError, match="non-zero share at sensitivity 0"):
        vertical.step(1, vertical_messages.CoordinatorMessage(1, np.zeros(N), np.ones(N), 1.0))
    monkeypatch.setattr(vertical_party, "release", lambda cfg, share, rho, t, rng, v=None, size=None:
                        (share, [GaussianRelease(cfg.name, t, 0.0, 0.0, FEATURE_COLUMN)]))
    with pytest.raises(_Refused, match="priced a non-zero message at sensitivity 0"):
        vertical.step(1, vertical_messages.CoordinatorMessage(1, np.zeros(N), np.ones(N), 1.0))
    assert vertical.ledger()["releases"] == 0


@pytest.mark.parametrize("clip", [1e-13, 1e-300])
def test_R5_vertical_clip_below_the_policy_floor_is_refused(vertical, clip):
    spec = vertical_messages.PrivacySpec(noise_multiplier=4.0, mechanism="gaussian", relation="feature_column", clip=clip)
    with pytest.raises(_Refused, match="min_clip"):
        vertical.setup(vertical_protocol.PROTOCOL, vertical.args(spec), 3)


def test_R3_policy_allows_vertical_normalisation_only_with_the_record_relation():
    from dpadmm.exceptions import InvalidParameterError
    from dpadmm.privacy.policy import PartyPolicy

    with pytest.raises(InvalidParameterError, match="normalize_vertical_rows needs relation 'record'"):
        PartyPolicy(max_epsilon=4.0, delta=1e-5, normalize_vertical_rows=True)
    assert PartyPolicy(max_epsilon=4.0, delta=1e-5, normalize_vertical_rows=True, relation="record")


@pytest.mark.parametrize("req", [dict(curve_clip=math.nan), dict(curve_clip=1e-20), dict(y_range=(1.0, 1.0)),
                                 dict(y_range=(-math.inf, 1.0)), dict(projection=2.0 * np.eye(20)[:, :3])],
                         ids=["nan-clip", "clip-below-floor", "empty-range", "infinite-range", "not-orthonormal"])
def test_R5b_statistics_requests_outside_the_premises_are_refused(worker, req):
    grid, X, y, basis = worker.data
    worker.setup(functional_protocol.STATISTICS_PROTOCOL, ["worker1", X, y, fpca.trapezoid_weights(grid), 2.0], 2)
    with pytest.raises(_Refused, match="refused the 'mean' stage"):
        worker.step(0, functional_statistics.StatsRequest("mean", **dict(dict(curve_clip=5.0, y_range=(-10.0, 10.0)), **req)))
    assert worker.ledger()["releases"] == 0


@pytest.mark.parametrize("rho", [math.nan, -1.0, 0.0, math.inf])
def test_R8_functional_bad_hub_rho_releases_nothing(worker, rho):
    grid, X, y, basis = worker.data
    worker.setup(functional_protocol.PROTOCOL, _fargs(X, y, basis), 3)
    with pytest.raises(_Refused, match="the hub's rho"):
        worker.step(0, functional_messages.HubMessage(0, np.zeros((1, 1, worker.svc.cfg.K)), rho))
    assert worker.ledger()["releases"] == 0
