"""The audit games of the encrypted vertical protocol (dpadmm.experiments.audit_games_encrypted): the plaintext HE
layer they run on decrypts what sf-heu decrypts given the same noise draws (so the games audit the code as run),
the adversary's replay is exact, the planted σ/2 is caught; the full bounds (slow)."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

from dpadmm.algorithms.encrypted import he
from dpadmm.experiments import audit_games_encrypted as AE
from dpadmm.experiments.audit_games import ZeroRNG, calibrated_nm, play


@pytest.fixture(scope="module")
def real_keys():
    """Two sf-heu key pairs (2048 bits) made once for the module: the label party's (OU) and party 2's (Paillier)."""
    pytest.importorskip("heu")
    return {he.SCHEME_LABEL: he.keygen(), he.SCHEME_MASKED: he.keygen(scheme=he.SCHEME_MASKED)}


# ----------------------------------------------------------------------------- the plaintext layer = sf-heu
@pytest.mark.slow  # OU key generation and ciphertext arithmetic: ~10 CPU-s (the slow suite runs it)
@pytest.mark.parametrize("fit", [AE.feature_fit, AE.label_fit], ids=["feature", "label"])
def test_plaintext_layer_decrypts_what_sf_heu_decrypts_given_the_same_noise(real_keys, monkeypatch, fit):
    """The audited function, run once under the real OU keys and once under :class:`PlainHe`, from the same
    seed: the label party's decrypted releases (feature side: both of party 2's per round; label side: every γ₂)
    and the events are equal to float tolerance (the sums are exact integers in both layers). The keys are
    made once (``real_keys``): key generation is the slow part, not what is compared."""
    nm = calibrated_nm(6)
    monkeypatch.setattr(he, "keygen", lambda bits=he.KEY_BITS, scheme=he.SCHEME_LABEL: real_keys[scheme])
    real, ev_real = fit(1, np.random.default_rng(7), nm=nm, layer=contextlib.nullcontext)
    plain, ev_plain = fit(1, np.random.default_rng(7), nm=nm)
    np.testing.assert_allclose(real, plain, rtol=0, atol=1e-12)
    assert [(e.party, e.sigma, e.sensitivity) for e in ev_real] == [(e.party, e.sigma, e.sensitivity) for e in ev_plain]
    assert np.any(real != 0)


def test_plaintext_layer_is_active_only_inside_its_context():
    real = (he.keygen, he.from_public_key, he.require_he)
    with AE.plaintext_he():
        key = he.keygen()
        assert isinstance(key, AE.PlainHe) and not he.from_public_key(key.public_key()).secret
        with pytest.raises(PermissionError, match="only the key holder decrypts"):
            he.from_public_key(key.public_key()).decrypt([1])
    assert (he.keygen, he.from_public_key, he.require_he) == real


@pytest.mark.slow  # key generation and a whole (tiny) fit twice
def test_estimator_fit_is_the_same_under_the_plaintext_layer(real_keys):
    """A whole seeded fit through the driver (forward='encrypted', both sides private): the same weights and
    calibration under sf-heu and under the plaintext layer."""
    from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 5))
    y = np.where(X @ rng.normal(size=5) > 0, 1, -1)
    kw = dict(epsilon=1.0, label_epsilon=1.0, rounds=3, random_state=3)
    a = VerticalEncryptedClassifier(**kw).fit([X[:, :2], X[:, 2:]], y)
    with AE.plaintext_he():
        b = VerticalEncryptedClassifier(**kw).fit([X[:, :2], X[:, 2:]], y)
    for u, v in zip(a.coefs_, b.coefs_):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-12)
    assert a.calibration_ == pytest.approx(b.calibration_, abs=1e-9)


# ----------------------------------------------------------------------------- the games (fast)
def _model_mu(fit, nm: float) -> float:
    """μ of the likelihood-ratio statistic the noiseless fits on D and D' predict: √Σ_t (‖Δ_t‖/σ_t)² over a run."""
    mu0, events = fit(0, ZeroRNG(), nm=nm)
    mu1, _ = fit(1, ZeroRNG(), nm=nm)
    return math.sqrt(sum(float(np.sum((a - b) ** 2)) / e.sigma ** 2 for a, b, e in zip(mu0, mu1, events)))


@pytest.mark.parametrize("make, fit", [(AE.encrypted_feature_game, AE.feature_fit),
                                       (AE.encrypted_label_game, AE.label_fit)], ids=["feature", "label"])
def test_honest_game_replays_the_mean_exactly(make, fit):
    """100 runs per side: the claim is ε = 1, the likelihood-ratio scores have the spread the replayed means
    predict (Var = μ², within 5 sds of the estimate) and the honest row is not caught. The worst case is nearly
    attained: feature side X at 0.968 of Δ_X and Y at Δ_Y; label side 0.997 of Δ_L."""
    game = make()
    res = play(game, runs=20)
    st = res.details["statistics"]["likelihood-ratio"]
    mu = _model_mu(fit, calibrated_nm(game.rounds))
    assert res.epsilon_claimed == pytest.approx(1.0, rel=1e-3) and not res.caught
    assert mu >= 0.96 * res.details["claimed_mu"]
    assert abs(st["mu"] - mu) < 5 * math.sqrt(2 / 75), (st, mu)


def test_planted_half_noise_on_the_feature_side_is_caught_with_few_runs():
    res = play(AE.encrypted_feature_game(half=True), runs=60)  # 300 runs per side
    assert res.broken and res.caught and res.epsilon_lower_bound > res.epsilon_claimed, res.details["statistics"]


# ----------------------------------------------------------------------------- the games (full)
@pytest.mark.slow
@pytest.mark.parametrize("make", [AE.encrypted_feature_game, AE.encrypted_label_game], ids=["feature", "label"])
def test_planted_half_noise_is_caught_at_the_quick_run_count(make):
    res = play(make(half=True), runs=300)
    assert res.caught and res.epsilon_lower_bound > res.epsilon_claimed, res.details["statistics"]


@pytest.mark.slow
@pytest.mark.parametrize("make", [AE.encrypted_feature_game, AE.encrypted_label_game], ids=["feature", "label"])
def test_honest_game_reaches_half_its_claim_at_the_default_run_count(make):
    res = play(make(), runs=2000)  # 10,000 runs per side
    assert 0.5 * res.epsilon_claimed <= res.epsilon_lower_bound <= res.epsilon_claimed, res.details["statistics"]
