"""The encrypted protocol's label mechanism against a non-label party that does not follow the protocol
(issue 35, item 2): a party that returns a PACKED linear map of the encrypted residuals instead of D̂ᵀĝ + ξ reads
every residual it packed from the gradient the label party returns. Under the Gaussian label mechanism (exact
labels, noise added after decryption) that reads the labels; under randomized response (the default) it reads
only ỹ, so its guesses are right at most as often as ε allows. Fast: the plaintext HE layer (the same integers)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from dpadmm.algorithms.encrypted import he, label
from dpadmm.algorithms.encrypted import party as ep
from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier
from dpadmm.experiments.audit_games_encrypted import plaintext_he
from dpadmm.privacy.accountants import calibrate_noise_multiplier

N, D_M, T, EPS, DELTA = 400, 50, 4, 1.0, 1e-5  # 2·D_M labels packed per round: T rounds read all N
HIGH, LOW = 30, 60 - 30  # the packed reply's weights 2^60 (first residual) and 2^30 (second) on each column
FAIL = 1e-6  # the probability the randomized-response bound below is exceeded by chance


def _blocks(seed=0):
    rng = np.random.default_rng(seed)
    A0 = rng.normal(size=(N, 2))
    D = rng.normal(size=(N, D_M))
    y = np.where(rng.random(N) < 0.5, 1.0, -1.0)  # balanced: the adversary's prior is 1/2
    return A0, D, y


def _packing(t: int) -> np.ndarray:
    """Round t's linear map (n × d_m integers): column j sums residuals a = 2·D_M·t + 2j and b = a + 1 as
    ``2^60·ĝ_a + 2^30·ĝ_b`` — a map of the encrypted residuals like D̂ᵀĝ, of another matrix."""
    P = np.zeros((N, D_M), dtype=np.int64)
    a = 2 * D_M * t + 2 * np.arange(D_M)
    P[a, np.arange(D_M)] = 1 << 60
    P[a + 1, np.arange(D_M)] = 1 << 30
    return P


def _unpack(gamma: np.ndarray) -> np.ndarray:
    """The packed residuals (2·d_m of them, fixed point) from the returned γ = Pᵀĝ / 2^40 + η: u = γ·2^10 =
    2^30ĝ_a + ĝ_b + 2^10η, with |ĝ_b| < 2^26 and |2^10 η| far below 2^29, so ĝ_a = round(u / 2^30) exactly."""
    u = gamma * float(2 ** (ep.RESIDUAL_BITS + ep.BLOCK_BITS - HIGH))
    ga = np.round(u / float(2 ** HIGH))
    gb = u - ga * float(2 ** HIGH)
    return np.ravel(np.column_stack([ga, gb]))


def _attack(mechanism: str, seed: int = 0):
    """The packed-reply attack over T rounds: the label party's labels as it uses them and the adversary's guesses
    (label 1 where the read residual ½ + s₀/4 − y is below ¼: s₀ stays small in the first rounds)."""
    A0, D, y = _blocks()
    zl = calibrate_noise_multiplier(EPS, DELTA, T) if mechanism == "gaussian" else None
    with plaintext_he():
        cfg, st = ep.setup_party("party2", D, None, 1.0, None, T, 1e-4, 2.0, "encrypted", 0.7, 2.0, 1.0, 2.0,
                                 A0.shape[1] + 1)
        lcfg, lst = label.setup_label(A0, y, R=1.0, widths={"party2": D_M}, clips={"party2": 1.0},
                                      noise_multiplier=zl, rounds=T, lam=1e-4, step=2.0, forward="encrypted",
                                      momentum=0.7, W=2.0, label_epsilon=EPS if mechanism == "rr" else None,
                                      rng=np.random.default_rng(seed))
        key = he.keygen()
        own = np.random.default_rng(1)  # the adversary's generator (it adds no noise)
        st, hello, _ = ep.step(cfg, st, ep.Start(he.wire(key.public_key())), rng=own)
        party_key, label_pub = he.from_public_key(hello.public_key), he.from_public_key(key.public_key())
        gamma, guesses = None, []
        for t in range(T):
            st, scores, _ = ep.step(cfg, st, ep.Forward(gamma), rng=own)
            lst, blob, cross = label.residuals_encrypted(lcfg, lst, key, party_key, scores.ciphertexts)
            st, honest, _ = ep.step(cfg, st, ep.Backward(he.wire(blob), he.wire(cross)), rng=own)
            plan = he.plane_indices(he.value_planes(_packing(t)))  # the adversary's map, under the label party's key
            packed = label_pub.column_sums(plan, label_pub.load(blob))
            reply = honest._replace(ciphertexts=he.wire(label_pub.dump(packed)))  # the honest cross sums kept
            lst, grads, _ = label.open_gradients(lcfg, lst, key, {"party2": reply},
                                                 rng=np.random.default_rng(100 + t))
            gamma = grads["party2"]
            guesses.append(_unpack(gamma) / float(2 ** ep.RESIDUAL_BITS) < 0.25)
    return (y > 0), lcfg.y01 > 0, np.concatenate(guesses)


def test_packed_reply_reads_the_labels_under_the_gaussian_mechanism():
    """The premise the Gaussian mechanism's privacy line names: without it a party reads (nearly) every label."""
    y, used, guess = _attack("gaussian")
    assert np.array_equal(used, y)  # exact labels
    assert np.mean(guess == y) >= 0.97


def test_packed_reply_guesses_labels_no_better_than_randomized_response_allows():
    """Randomized response (default): the same attack reads ỹ exactly — the residuals are computed from it — so its
    guesses of y are right on exactly the labels that were not flipped: Binomial(N, p), p = e^ε/(1 + e^ε) = 0.731.
    The bound: p plus the binomial upper tail at probability 1e-6 (N = 400: 0.836), far below what it reads with
    exact labels (≥ 0.97 above)."""
    y, used, guess = _attack("rr")
    assert np.mean(guess == used) >= 0.97  # the attack works: it reads the labels the label party uses
    p = math.exp(EPS) / (1.0 + math.exp(EPS))
    bound = binom.isf(FAIL, N, p) / N
    assert bound < 0.85
    assert np.mean(guess == y) <= bound


def test_randomized_response_is_booked_once_as_pure_epsilon():
    """The report: label ε = the RR ε, δ = 0, one release, no premise; the note names the adversary."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = np.where(X @ rng.normal(size=4) > 0, 1, -1)
    with plaintext_he():
        m = VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=0.5, rounds=3, random_state=2).fit(
            [X[:, :2], X[:, 2:]], y)
    lab = m.privacy_["labels"]
    assert lab["epsilon"] == 0.5 and lab["delta"] == 0.0 and lab["releases"] == 1 and lab["premise"] is None
    assert lab["mechanism"] == "randomized response" and "any other party" in lab["note"]
    assert m.noise_multipliers_["labels"] is None  # no Gaussian on the decrypted gradients
    train = np.sort(np.random.default_rng(2).permutation(300)[30:])  # the estimator's split (calibration 0.1)
    flips = int(np.sum(m.label_cfg_.y01 != (y[train] > 0)))  # Binomial(270, q), q = 1/(1 + e^0.5) = 0.378
    q = 1.0 / (1.0 + math.exp(0.5))
    assert binom.ppf(FAIL, 270, q) <= flips <= binom.isf(FAIL, 270, q)


@pytest.mark.parametrize("forward", ["encrypted", "clear"])
def test_randomized_response_at_a_huge_epsilon_equals_the_exact_label_fit(forward):
    """ε → ∞: nothing flipped (q = e^-60 ≈ 1e-26), so the fit is the exact-label fit, weight for weight."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(250, 5))
    y = np.where(X @ rng.normal(size=5) + 0.5 * rng.normal(size=250) > 0, 1, -1)
    kw = dict(rounds=4, forward=forward, random_state=1)
    with plaintext_he():
        exact = VerticalEncryptedClassifier(**kw).fit([X[:, :3], X[:, 3:]], y)
        rr = VerticalEncryptedClassifier(label_epsilon=60.0, **kw).fit([X[:, :3], X[:, 3:]], y)
    for a, b in zip(rr.coefs_, exact.coefs_):
        np.testing.assert_array_equal(a, b)
    assert rr.privacy_["labels"]["epsilon"] == 60.0


def test_unknown_label_mechanism_is_refused_with_the_choices():
    from dpadmm.exceptions import InvalidParameterError

    with pytest.raises(InvalidParameterError, match=r"label_mechanism must be one of \('rr', 'gaussian'\)"):
        VerticalEncryptedClassifier(label_epsilon=1.0, label_mechanism="laplace", rounds=2)._check(
            [np.zeros((4, 1)), np.zeros((4, 1))])
