"""Black-box privacy audit: an empirical lower bound on ε from samples of a mechanism.

Method (Jagielski et al. 2020; Nasr et al. 2021): run the mechanism n times on each of two
neighbouring inputs; any test that tells the two output distributions apart has false-positive
and false-negative rates (FPR, FNR) that an (ε, δ)-DP mechanism must keep above
``FPR + e^ε FNR ≥ 1 − δ`` and ``FNR + e^ε FPR ≥ 1 − δ``. Hence

    ε ≥ max( ln((1 − δ − FPR) / FNR), ln((1 − δ − FNR) / FPR) ).

The test thresholds a scalar statistic of the output (here the projection on the direction in
which the two noiseless outputs differ — the Neyman–Pearson optimal test for Gaussian noise). The
threshold is chosen on one half of the samples and the rates are estimated on the other half
with Clopper–Pearson upper bounds at level α/2 each, so the reported lower bound holds with
probability at least ``1 − α`` (``confidence``).

What it can prove: that an implementation spends *more* than it claims (a lower bound above the
claim is a bug, with the stated confidence). What it cannot prove: that a mechanism is private —
a lower bound below the claim is only consistent with it; the lower bound is limited by the
number of samples (about ln n) and by the neighbours tried (the worst case may be elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping

import numpy as np
from scipy.stats import beta


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided (1 − alpha) upper confidence bound on a binomial rate with k successes in n."""
    if k >= n:
        return 1.0
    return float(beta.ppf(1.0 - alpha, k + 1, n - k))


def _eps_from_rates(fpr: float, fnr: float, delta: float) -> float:
    vals = []
    for a, b in ((fpr, fnr), (fnr, fpr)):
        num = 1.0 - delta - a
        if num > 0 and b > 0:
            vals.append(math.log(num / b))
    return max(vals + [0.0])


def _pilot(p0: np.ndarray, p1: np.ndarray, delta: float, alpha: float, n_thresholds: int) -> tuple[float, float, int]:
    """Best (pilot bound, threshold, orientation) of a threshold test on the pilot samples.

    The pilot scores each threshold by the same Clopper–Pearson bound used in the evaluation, so
    thresholds resting on a handful of tail samples do not win by chance.
    """
    p0, p1 = np.sort(p0), np.sort(p1)
    cands = np.quantile(np.concatenate([p0, p1]), np.linspace(0.0005, 0.9995, n_thresholds))
    n_p0, n_p1 = len(p0), len(p1)
    # reject "from D" when score > tau; all thresholds at once (one vectorised beta quantile per rate)
    k_fp = n_p0 - np.searchsorted(p0, cands, side="right")
    k_fn = np.searchsorted(p1, cands, side="right")

    def upper(k, n):
        return np.where(k >= n, 1.0, beta.ppf(1.0 - alpha / 2, k + 1, np.maximum(n - k, 1)))

    vals = []
    for a, b in ((upper(k_fp, n_p0), upper(k_fn, n_p1)), (upper(n_p1 - k_fn, n_p1), upper(n_p0 - k_fp, n_p0))):
        vals.append(np.log(np.maximum(1.0 - delta - a, 1e-300) / b))
    inter = np.stack(vals, axis=1).ravel()  # (tau_0, +), (tau_0, −), (tau_1, +), …: the first best wins, as before
    i = int(np.argmax(inter))
    return float(inter[i]), float(cands[i // 2]), (1 if i % 2 == 0 else -1)


def _evaluate(e0: np.ndarray, e1: np.ndarray, tau: float, sign: int, delta: float, alpha: float) -> dict:
    """The held-out test: Clopper–Pearson upper bounds (α/2 each) on its two error rates → ε bound."""
    n0, n1 = len(e0), len(e1)
    k_fp = int(np.sum(e0 > tau))  # D's outputs on D''s side
    k_fn = int(np.sum(e1 <= tau))
    if sign < 0:  # the other orientation: "from D'" when score <= tau
        k_fp, k_fn = n1 - k_fn, n0 - k_fp
        n0, n1 = n1, n0
    fpr_ub = clopper_pearson_upper(k_fp, n0, alpha / 2)
    fnr_ub = clopper_pearson_upper(k_fn, n1, alpha / 2)
    num = 1.0 - delta - fpr_ub
    eps_lb = math.log(num / fnr_ub) if num > 0 else 0.0
    return {"epsilon_lower_bound": max(eps_lb, 0.0), "threshold": float(tau), "fpr_upper": fpr_ub,
            "fnr_upper": fnr_ub, "false_positives": k_fp, "false_negatives": k_fn, "n_eval": [n0, n1]}


def epsilon_lower_bound(scores0: np.ndarray, scores1: np.ndarray, delta: float, *, alpha: float = 0.05,
                        n_thresholds: int = 400) -> dict:
    """Lower bound on ε from scalar statistics of outputs on D (``scores0``) and D' (``scores1``).

    The first half of each sample chooses the threshold and the orientation; the second half gives
    Clopper–Pearson bounds. Returns the bound with the rates behind it.
    """
    h0, h1 = len(scores0) // 2, len(scores1) // 2
    _, tau, sign = _pilot(scores0[:h0], scores1[:h1], delta, alpha, n_thresholds)
    return _evaluate(scores0[h0:], scores1[h1:], tau, sign, delta, alpha)


def best_epsilon_lower_bound(scores0: Mapping[str, np.ndarray], scores1: Mapping[str, np.ndarray], delta: float, *,
                             alpha: float = 0.05, pilot_fraction: float = 0.5, n_thresholds: int = 200) -> dict:
    """ε lower bound from the best of several statistics, still valid at confidence ``1 − alpha``.

    ``scores0[name]`` / ``scores1[name]`` are one statistic's values on the same runs on D / D'.
    The first ``pilot_fraction`` of the runs chooses the statistic, its threshold and orientation
    (by the pilot bound each would give); the rest evaluates only that one test. As the choice never
    sees the evaluation runs, no multiple-comparison correction is needed.
    Returns the evaluation of :func:`epsilon_lower_bound`'s form plus ``statistic`` and the pilot
    bound of every statistic (``pilot``).
    """
    names = list(scores0)
    n0 = len(next(iter(scores0.values())))
    n1 = len(next(iter(scores1.values())))
    h0, h1 = int(n0 * pilot_fraction), int(n1 * pilot_fraction)
    pilots = {name: _pilot(np.asarray(scores0[name])[:h0], np.asarray(scores1[name])[:h1], delta, alpha, n_thresholds)
              for name in names}
    best = max(names, key=lambda k: pilots[k][0])
    _, tau, sign = pilots[best]
    out = _evaluate(np.asarray(scores0[best])[h0:], np.asarray(scores1[best])[h1:], tau, sign, delta, alpha)
    out["statistic"] = best
    out["pilot"] = {k: max(float(v[0]), 0.0) for k, v in pilots.items()}
    return out


@dataclass
class AuditResult:
    """One audited mechanism (the row of ``audit.json``)."""

    name: str
    epsilon_claimed: float
    epsilon_lower_bound: float
    delta: float
    broken: bool
    samples: int
    confidence: float
    caught: bool
    description: str = ""
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def audit_pair(name: str, sample: Callable[[np.random.Generator, int, int], np.ndarray], direction: np.ndarray,
               *, epsilon_claimed: float, delta: float, samples: int, confidence: float = 0.95,
               seed: int = 0, broken: bool = False, description: str = "", chunk: int = 50_000) -> AuditResult:
    """Audit a mechanism from ``sample(rng, which, n) -> (n, dim)`` outputs on input ``which`` ∈ {0, 1}.

    The statistic is the projection of each output on ``direction``.
    """
    root = np.random.SeedSequence(seed)
    scores = []
    for which, ss in enumerate(root.spawn(2)):
        rng = np.random.default_rng(ss)
        parts, left = [], samples
        while left > 0:
            m = min(chunk, left)
            parts.append(sample(rng, which, m) @ direction)
            left -= m
        scores.append(np.concatenate(parts))
    res = epsilon_lower_bound(scores[0], scores[1], delta, alpha=1.0 - confidence)
    lb = res.pop("epsilon_lower_bound")
    return AuditResult(name=name, epsilon_claimed=float(epsilon_claimed), epsilon_lower_bound=float(lb),
                       delta=float(delta), broken=broken, samples=int(samples), confidence=float(confidence),
                       caught=bool(lb > epsilon_claimed), description=description, details=res)
