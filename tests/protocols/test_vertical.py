"""Vertical ADMM sharing [Hu]: correctness against scikit-learn, zero-noise limit, messages, privacy."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, PoissonRegressor, Ridge

from dpadmm import (VerticalLinearRegression, VerticalLogisticRegression, VerticalPoissonRegression,
                    VerticalSGDClassifier)
from dpadmm.algorithms.vertical import (coordinator as vertical_coordinator, messages as vertical_messages,
                                        party as vertical_party)
from dpadmm.exceptions import InvalidDataError, InvalidParameterError, PrivacyPreconditionError


def _sk_objective(B, y, lam, fit_intercept):
    X = np.hstack(B)
    m = LogisticRegression(C=1 / (lam * len(y)), fit_intercept=fit_intercept, tol=1e-12, max_iter=10000).fit(X, y)
    s = X @ m.coef_.ravel() + m.intercept_
    return m, float(np.mean(np.logaddexp(0, -y * s)) + lam / 2 * np.sum(m.coef_**2))


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_nonprivate_matches_sklearn(a9a_small, fit_intercept):
    B, y, _, _ = a9a_small
    lam = 1e-2
    sk, opt = _sk_objective(B, y, lam, fit_intercept)
    m = VerticalLogisticRegression(lam=lam, max_iter=400, tol=1e-10).fit(B, y) if fit_intercept else \
        VerticalLogisticRegression(lam=lam, max_iter=400, tol=1e-10, fit_intercept=False).fit(B, y)
    assert m.history_["objective"][-1] == pytest.approx(opt, rel=1e-6)
    np.testing.assert_allclose(m.coef_, sk.coef_.ravel(), atol=2e-3)
    assert m.intercept_ == pytest.approx(float(sk.intercept_[0]) if fit_intercept else 0.0, abs=2e-3)
    X = np.hstack(B)
    np.testing.assert_allclose(m.predict_proba(B)[:, 1], sk.predict_proba(X)[:, 1], atol=1e-3)
    assert (m.predict(B) == sk.predict(X)).mean() > 0.995


def test_ridge_matches_sklearn(rng):
    X = rng.normal(size=(300, 9))
    y = X @ rng.normal(size=9) + 0.1 * rng.normal(size=300) + 2.0
    lam = 0.1
    m = VerticalLinearRegression(lam=lam, max_iter=500, tol=0, party_sizes=[4, 5]).fit(X, y)
    # mean ½(z−y)² + λ/2‖x‖²  ⇔  Ridge(alpha = λ N) on ½‖·‖² sums
    sk = Ridge(alpha=lam * 300).fit(X, y)
    np.testing.assert_allclose(m.coef_, sk.coef_, atol=1e-5)
    assert m.intercept_ == pytest.approx(sk.intercept_, abs=1e-5)
    assert m.score(X, y) == pytest.approx(sk.score(X, y), abs=1e-8)


def _counts(rng, n=600):
    X = rng.normal(size=(n, 6))
    return X, rng.poisson(np.exp(0.5 + X @ np.array([0.3, -0.2, 0.1, 0.4, 0.0, -0.3]))).astype(np.float64)


def test_poisson_distributed_equals_centralised_sklearn(rng):
    """Two parties, ADMM sharing with the Poisson prox in the z-step: the optimum of ``mean(e^s − y s) + λ/2‖x‖²``
    is scikit-learn's ``PoissonRegressor(alpha=λ)`` (half the mean deviance differs by a constant in the model)."""
    X, y = _counts(rng)
    lam = 1e-2
    m = VerticalPoissonRegression(lam=lam, max_iter=3000, tol=1e-8, adaptive_rho=True, party_sizes=[2, 4]).fit(X, y)
    sk = PoissonRegressor(alpha=lam, tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(m.coef_, sk.coef_, atol=1e-5)
    assert m.intercept_ == pytest.approx(sk.intercept_, abs=1e-5)
    np.testing.assert_allclose(m.predict(X), sk.predict(X), rtol=1e-5)
    np.testing.assert_allclose(m.linear_predictor(X), np.log(sk.predict(X)), atol=1e-5)


def test_poisson_zero_noise_equals_nonprivate_and_bad_inputs_are_refused(rng):
    X, y = _counts(rng, 300)
    B = [X[:, :2] / np.linalg.norm(X[:, :2], axis=1, keepdims=True), X[:, 2:] / np.linalg.norm(X[:, 2:], axis=1,
                                                                                                  keepdims=True)]
    common = dict(lam=1e-2, rho=0.3, max_iter=20, tol=0.0, damping=0.0, random_state=3, monitor=True)
    plain = VerticalPoissonRegression(**common).fit(B, y)
    zero = VerticalPoissonRegression(noise_scale=0.0, bound=1e9, mechanism="paper", **common).fit(B, y)
    assert plain.history_["objective"] == zero.history_["objective"]
    np.testing.assert_array_equal(plain.coef_, zero.coef_)
    with pytest.raises(PrivacyPreconditionError, match="unbounded curvature"):
        VerticalPoissonRegression(epsilon=1.0).fit(B, y)
    with pytest.raises(InvalidDataError, match="negative value"):
        VerticalPoissonRegression().fit(B, y - 1.0)


def test_zero_noise_equals_nonprivate_exactly(a9a_small_normalized):
    B, y, Bt, yt = a9a_small_normalized
    common = dict(lam=1e-3, rho=0.3, max_iter=15, tol=0.0, damping=0.0, random_state=3, monitor=True)
    # the published mechanism runs ADMM: zero noise == non-private ADMM
    plain = VerticalLogisticRegression(**common).fit(B, y, eval_set=[(Bt, yt)])
    zero = VerticalLogisticRegression(noise_scale=0.0, bound=1e9, mechanism="paper", **common).fit(
        B, y, eval_set=[(Bt, yt)])
    assert plain.history_["objective"] == zero.history_["objective"]
    np.testing.assert_array_equal(plain.coef_, zero.coef_)
    assert zero.privacy_ is not None and zero.privacy_.epsilon == np.inf
    # the gaussian mechanism runs the linearised coordinator: zero noise (and a clip that never binds)
    # == that protocol without any privacy (label_noise_scale=0)
    plain = VerticalLogisticRegression(label_noise_scale=0.0, **common).fit(B, y, eval_set=[(Bt, yt)])
    zero = VerticalLogisticRegression(noise_scale=0.0, clip=1e9, **common).fit(B, y, eval_set=[(Bt, yt)])
    assert plain.history_["objective"] == zero.history_["objective"]
    np.testing.assert_array_equal(plain.coefs_[1] * zero.passive_weight_, zero.coefs_[1])
    # the final refit may weigh the (here exact) passive scores by alpha: same quality either way
    assert abs(plain.evaluate(Bt, yt)["log_loss"] - zero.evaluate(Bt, yt)["log_loss"]) < 2e-3
    assert zero.privacy_.epsilon == np.inf and zero.privacy_.label["protected"] is False


def test_dp_run_is_seeded_and_noise_changes_result(a9a_small_normalized):
    B, y, _, _ = a9a_small_normalized
    kw = dict(lam=1e-3, rho=0.3, max_iter=5, epsilon=50.0, fallback=False)  # (the fallback may keep the label party's own)
    a = VerticalLogisticRegression(random_state=7, **kw).fit(B, y)
    b = VerticalLogisticRegression(random_state=7, **kw).fit(B, y)
    c = VerticalLogisticRegression(random_state=8, **kw).fit(B, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.allclose(a.coef_, c.coef_)


def test_privacy_report_names_relation_and_budget(a9a_small_normalized):
    B, y, _, _ = a9a_small_normalized
    m = VerticalLogisticRegression(lam=1e-3, rho=0.3, max_iter=8, epsilon=5.0, delta=1e-6, random_state=0).fit(B, y)
    p = m.privacy_
    assert p.relation == "feature_column" and "one feature column" in p.relation_description
    assert p.epsilon <= 5.0 and p.epsilon > 4.8
    assert p.delta == 1e-6 and p.rounds == 8
    assert "dp-accounting" in p.accountant and "isotropic" in p.mechanism
    names = " ".join(a["name"] for a in p.assumptions)
    assert "clipped" in names and "rows" in names and "ridge x-step" in names
    # C and sigma per party; labels unprotected, said plainly
    assert {r["party"] for r in p.releases} == {"party1", "party2"}
    assert all(r["sigma"] > 0 and r["sensitivity"] > 0 for r in p.releases)
    assert p.label["protected"] is False and "read the training labels" in p.label["note"]
    assert any("read the training labels" in n for n in p.notes)


def test_paper_mechanism_reports_infinite_epsilon(a9a_small_normalized):
    B, y, _, _ = a9a_small_normalized
    m = VerticalLogisticRegression(lam=1e-3, rho=0.3, max_iter=4, epsilon=5.0, mechanism="paper",
                                   random_state=0).fit(B, y)
    p = m.privacy_
    assert p.epsilon == np.inf and not p.private
    assert p.to_dict()["epsilon"] == "inf"
    assert "range(D_m)" in p.notes[0] and "not differentially private" in p.notes[0]
    assert "NOT differentially private" in p.mechanism
    names = " ".join(a["name"] for a in p.assumptions)
    assert "unit-norm rows" in names and "bounded iterates" in names and "Lemma 1" in names


def test_bounded_iterates_enforced(a9a_small_normalized):
    B, y, _, _ = a9a_small_normalized
    m = VerticalLogisticRegression(lam=1e-3, rho=0.3, max_iter=6, noise_scale=50.0, bound=0.5, mechanism="paper",
                                   random_state=0).fit(B, y)
    assert all(np.linalg.norm(c) <= 0.5 + 1e-12 for c in m.coefs_)


def test_dp_refuses_unnormalised_rows_and_nonsmooth_penalty(a9a_small):
    B, y, _, _ = a9a_small
    with pytest.raises(PrivacyPreconditionError, match="not unit-norm"):
        VerticalLogisticRegression(epsilon=1.0, mechanism="paper").fit(B, y)
    with pytest.raises(PrivacyPreconditionError, match="penalty='l2'"):
        VerticalLogisticRegression(epsilon=1.0, penalty="l1").fit(B, y)
    with pytest.raises(PrivacyPreconditionError, match="damping"):
        VerticalLogisticRegression(epsilon=1.0, damping=0.5).fit(B, y)


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": 0.0}, "epsilon must be positive"),
    ({"epsilon": -1.0}, "epsilon must be positive"),
    ({"epsilon": 1.0, "delta": 1.0}, r"delta must be in \(0, 1\)"),
    ({"epsilon": 1.0, "delta": 0.0}, r"delta must be in \(0, 1\)"),
    ({"rho": 0.0}, "rho must be positive"),
    ({"max_iter": 0}, "max_iter must be an integer"),
    ({"epsilon": 1.0, "noise_scale": 1.0}, "at most one of"),
    ({"epsilon": 1.0, "mechanism": "hu"}, "mechanism must be one of"),
    ({"epsilon": 1.0, "relation": "row"}, "relation must be one of"),
    ({"label_epsilon": 0.0}, "label_epsilon must be positive"),
    ({"label_epsilon": 1.0, "label_noise_scale": 1.0}, "at most one of label_epsilon"),
    ({"clip": -1.0}, "clip must be positive"),
])
def test_bad_parameters(a9a_small_normalized, kwargs, match):
    B, y, _, _ = a9a_small_normalized
    with pytest.raises(InvalidParameterError, match=match):
        VerticalLogisticRegression(**kwargs).fit(B, y)


def test_bad_data(a9a_small):
    B, y, _, _ = a9a_small
    bad = [b.copy() for b in B]
    bad[1][3, 2] = np.nan
    with pytest.raises(InvalidDataError, match="NaN"):
        VerticalLogisticRegression().fit(bad, y)
    with pytest.raises(InvalidDataError, match="same rows"):
        VerticalLogisticRegression().fit([B[0], B[1][:-1]], y)
    with pytest.raises(InvalidDataError, match="exactly two classes"):
        VerticalLogisticRegression().fit(B, np.arange(len(y)) % 3)
    with pytest.raises(InvalidDataError, match="entries but the features"):
        VerticalLogisticRegression().fit(B, y[:-1])
    with pytest.raises(InvalidDataError, match="empty"):
        VerticalLogisticRegression().fit([B[0], B[1][:, :0]], y)
    m = VerticalLogisticRegression(max_iter=3, tol=0).fit(B, y)
    with pytest.raises(InvalidDataError, match="party widths"):
        m.predict([B[0], B[1][:, :10]])


def test_messages_carry_only_n_vectors(a9a_small_normalized):
    """Only D_m x̃_m (party → coordinator) and s̃ − z, y (coordinator → parties) cross, as docs/algorithms.md §1 lists."""
    B, y, _, _ = a9a_small_normalized
    n = len(y)
    rng = np.random.default_rng(0)
    cfgs = [vertical_party.make_party(f"p{m}", b, lam_sum=n * 1e-3, reg=vertical_messages.Regularizer.__subclasses__()[0](),
                          private=vertical_messages.PrivacySpec(noise_multiplier=1.0, bounds=vertical_messages.Bounds(10, 100, 100), n_parties=2),
                          bound=10.0) for m, b in enumerate(B)]
    from dpadmm.kernels import get_loss
    hub = vertical_messages.CoordinatorConfig(labels=y, loss=get_loss("logistic"), lam=1e-3, rho=0.3, party_names=("p0", "p1"))
    hs, inboxes = vertical_coordinator.init_coordinator(hub)
    states = {c.name: s for c, s in cfgs}
    for _ in range(3):
        outs = {}
        for cfg, _ in cfgs:
            states[cfg.name], out, events = vertical_party.party_step(cfg, states[cfg.name], inboxes[cfg.name], rng=rng)
            assert set(out._fields) == {"share"} and out.share.shape == (n,)
            # the share is not the raw block, the model, or the noiseless score
            assert not np.allclose(out.share, cfg.D @ states[cfg.name].x)
            assert len(events) == 1 and events[0].sigma > 0
            outs[cfg.name] = out
        hs, inboxes, _ = vertical_coordinator.coordinator_step(hub, hs, outs, rng=rng)
        for msg in inboxes.values():
            assert msg.residual.shape == (n,) and msg.dual.shape == (n,)
            assert np.isscalar(msg.rho) and isinstance(msg.round, int)
            assert set(msg._fields) == {"round", "residual", "dual", "rho"}


def test_sgd_baseline_learns(a9a_small):
    B, y, Bt, yt = a9a_small
    m = VerticalSGDClassifier(epochs=4, lr=0.5, batch_size=64, random_state=0).fit(B, y, eval_set={"test": (Bt, yt)})
    assert len(m.history_["objective"]) == 4
    assert m.history_["test_log_loss"][-1] < 0.45
    assert m.history_["objective"][-1] < m.history_["objective"][0]
    assert (m.predict(Bt) == yt).mean() > 0.8


@pytest.mark.slow  # ~3 CPU-seconds: the default suite stays under 3 CPU-minutes (CI runs the slow suite too)
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_penalties_l1_elasticnet_sparsify(a9a_small):
    B, y, _, _ = a9a_small
    dense = VerticalLogisticRegression(lam=1e-2, penalty="l2", max_iter=100, tol=0).fit(B, y)
    l1 = VerticalLogisticRegression(lam=1e-2, penalty="l1", max_iter=100, tol=0).fit(B, y)
    en = VerticalLogisticRegression(lam=1e-2, penalty="elasticnet", l1_ratio=0.5, max_iter=100, tol=0).fit(B, y)
    assert np.sum(np.abs(l1.coef_) < 1e-8) > np.sum(np.abs(dense.coef_) < 1e-8) + 10
    assert 0 < np.sum(np.abs(en.coef_) < 1e-8) < np.sum(np.abs(l1.coef_) < 1e-8) + 1
    # l1 solution vs scikit-learn (saga) on the same objective: mean loss + λ‖x‖₁
    from sklearn.linear_model import LogisticRegression
    sk = LogisticRegression(penalty="l1", C=1 / (1e-2 * len(y)), solver="saga", tol=1e-10, max_iter=20000,
                            fit_intercept=True).fit(np.hstack(B), y)
    X = np.hstack(B)
    obj = lambda c, b: np.mean(np.logaddexp(0, -y * (X @ c + b))) + 1e-2 * np.abs(c).sum()  # noqa: E731
    assert obj(l1.coef_, l1.intercept_) <= obj(sk.coef_.ravel(), sk.intercept_[0]) + 1e-4


def test_get_set_params_roundtrip():
    m = VerticalLogisticRegression(lam=0.5, epsilon=3.0)
    p = m.get_params()
    assert p["lam"] == 0.5 and p["epsilon"] == 3.0
    m.set_params(lam=0.1)
    assert m.lam == 0.1


def test_rank_deficient_block_warns_and_is_noted(a9a_small_normalized):
    from dpadmm.estimators.vertical import RankDeficiencyWarning

    B, y, _, _ = a9a_small_normalized
    with pytest.warns(RankDeficiencyWarning, match="range"):
        m = VerticalLogisticRegression(rho=0.3, max_iter=2, epsilon=10.0, mechanism="paper", random_state=0).fit(B, y)
    assert any("rank" in n for n in m.privacy_.notes)
