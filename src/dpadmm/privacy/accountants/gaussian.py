"""Tight accounting of composed Gaussian mechanisms with Google's ``dp-accounting``.

Each release is a Gaussian mechanism with l2 sensitivity Δ and noise σ, i.e. a
``GaussianDpEvent(noise_multiplier = σ/Δ)``; no subsampling is involved, so the add/remove vs
replace-one distinction of the library's ``NeighboringRelation`` does not enter — the
sensitivity Δ already encodes the relation (stated by the caller).

- ``pld``: privacy-loss-distribution accountant (numerically tight; the headline).
- ``rdp``: Rényi-DP accountant (an upper bound, slightly looser).
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from collections import Counter
from typing import Iterable

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution, privacy_loss_mechanism
from dp_accounting.rdp import rdp_privacy_accountant

ACCOUNTANTS = ("pld", "rdp")


def _fresh(method: str, min_noise_multiplier: float = 1.0):
    if method == "pld":
        # The PLD grid spans privacy losses of order 1/nm²: scale the grid step with it so the
        # cost stays bounded for small nm. A coarser grid is still a valid upper bound
        # (dp-accounting discretises pessimistically); the relative change in ε is < 1e-4 here.
        interval = 1e-3 * max(1.0, 1.0 / max(min_noise_multiplier, 1e-12) ** 2)
        return pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    if method == "rdp":
        return rdp_privacy_accountant.RdpAccountant()
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {method!r}.")


def _event(noise_multipliers: Iterable[float]) -> dp_accounting.DpEvent:
    counts = Counter(float(m) for m in noise_multipliers)
    parts = [
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(m), c) if c > 1
        else dp_accounting.GaussianDpEvent(m)
        for m, c in sorted(counts.items())
    ]
    return parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts)


def gaussian_epsilon(noise_multipliers: Iterable[float], delta: float, method: str = "pld") -> float:
    """ε at ``delta`` of the composition of Gaussian mechanisms with the given noise multipliers.

    Returns 0.0 for an empty composition and ``inf`` if any multiplier is 0 or the accountant
    fails (never an optimistic number).
    """
    nms = [float(m) for m in noise_multipliers]
    if not nms:
        return 0.0
    if any(not (m > 0) or math.isnan(m) for m in nms):
        return math.inf
    if all(math.isinf(m) for m in nms):
        return 0.0
    nms = [m for m in nms if not math.isinf(m)]
    try:
        eps = _composed_epsilon(tuple(sorted(nms)), float(delta), method)
    except Exception as exc:  # noqa: BLE001 - any accountant failure must be conservative
        warnings.warn(f"{method} accountant failed ({exc}); reporting epsilon = inf.", RuntimeWarning, stacklevel=2)
        return math.inf
    if math.isnan(eps) or eps < 0:
        return math.inf
    return eps


@functools.lru_cache(maxsize=64)
def _composed_epsilon(noise_multipliers: tuple, delta: float, method: str) -> float:
    """The accountant's ε of one composition (finite positive multipliers, sorted). The answer depends only on the
    multiset (:func:`_event` composes it in sorted order) and is a pure function of it, so it is computed once per
    process: a run's calibration checks the very composition its report then asks for (the PLD is ~10 ms). A
    failure raises, and is not remembered. The PLD's answer is :func:`_pld_epsilon`'s (the accountant's own
    steps, its Gaussian loss evaluated in one pass)."""
    if method == "pld" and _FAST_PLD:
        return float(_pld_epsilon(noise_multipliers, delta))
    return _accountant_epsilon(noise_multipliers, delta, method)


def _accountant_epsilon(noise_multipliers: tuple, delta: float, method: str) -> float:
    """dp-accounting's accountant, as it is: compose the event, ask for ε at ``delta``."""
    acc = _fresh(method, min(noise_multipliers))
    acc.compose(_event(noise_multipliers))
    return float(acc.get_epsilon(delta))


class _GaussianLoss(privacy_loss_mechanism.GaussianPrivacyLoss):
    """dp-accounting's Gaussian privacy loss whose hockey-stick divergence at an array of ε (no subsampling, REMOVE:
    what the PLD of a Gaussian event asks for, ~5,000 values) is computed in one pass instead of a Python call per ε.
    The same arithmetic on the same numbers: the library's inverse privacy loss ``−Δ/2 − ε·σ²/Δ`` elementwise
    (``_inverse_privacy_loss_without_subsampling_remove``, in its order), then its own vectorised formula; anything
    else is the library's own method."""

    def get_delta_for_epsilon(self, epsilon):
        if (isinstance(epsilon, numbers.Number) or self.sampling_prob != 1.0
                or self.adjacency_type != privacy_loss_mechanism.AdjacencyType.REMOVE):
            return super().get_delta_for_epsilon(epsilon)
        epsilons = np.asarray(epsilon)
        x_cutoffs = -0.5 * self.sensitivity - epsilons * (self._standard_deviation**2) / self.sensitivity
        deltas = self.mu_upper_cdf(x_cutoffs) - np.exp(epsilons + self.mu_lower_log_cdf(x_cutoffs))
        return np.clip(deltas, 0, 1)


def _pld_epsilon(noise_multipliers: tuple, delta: float) -> float:
    """The PLD accountant's ε (``_accountant_epsilon(..., "pld")``) by its own steps: from the identity PLD of
    :func:`_fresh`'s grid, compose, in sorted order, each distinct multiplier m (count c) as the accountant does — a
    Gaussian PLD with σ = m/√c, sensitivity 1, pessimistic connect-the-dots, mass truncation e⁻⁵⁰, no subsampling
    (``PLDAccountant._maybe_compose`` → ``from_gaussian_mechanism`` defaults) — with :class:`_GaussianLoss`; then
    ε at ``delta``. ``tests/unit/test_privacy_accountant_fast.py`` checks it equals the accountant's bit for bit."""
    interval = _fresh("pld", min(noise_multipliers))._value_discretization_interval
    pld = privacy_loss_distribution.identity(value_discretization_interval=interval)
    for m, c in sorted(Counter(float(m) for m in noise_multipliers).items()):
        loss = _GaussianLoss(m / math.sqrt(c), sensitivity=1, pessimistic_estimate=True, log_mass_truncation_bound=-50,
                             sampling_prob=1.0, adjacency_type=privacy_loss_mechanism.AdjacencyType.REMOVE)
        pmf = privacy_loss_distribution._create_pld_pmf_from_monotone_privacy_loss(
            loss, pessimistic_estimate=True, value_discretization_interval=interval, use_connect_dots=True)
        pld = pld.compose(privacy_loss_distribution.PrivacyLossDistribution(pmf))
    return pld.get_epsilon_for_delta(delta)


#: the library's pieces :func:`_pld_epsilon` uses (private to dp-accounting: without them, the accountant itself)
_FAST_PLD = all(hasattr(mod, name) for mod, name in (
    (privacy_loss_distribution, "_create_pld_pmf_from_monotone_privacy_loss"),
    (privacy_loss_distribution, "identity"), (privacy_loss_distribution, "PrivacyLossDistribution"),
    (privacy_loss_mechanism, "AdjacencyType"))) and hasattr(pld_privacy_accountant.PLDAccountant(),
                                                             "_value_discretization_interval")


@functools.lru_cache(maxsize=256)
def calibrate_noise_multiplier(target_epsilon: float, delta: float, rounds: int, method: str = "pld") -> float:
    """Smallest noise multiplier whose ``rounds``-fold composition is (target_epsilon, delta)-DP.

    Uses ``dp_accounting.calibrate_dp_mechanism`` and then checks the answer with the same
    accountant, nudging it up until the check passes, so calibration never overspends.
    Results are cached (repetitions and sweeps reuse one calibration).
    """
    def make_event(nm: float):
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(nm), rounds)

    # RDP is cheap and never below the PLD epsilon, so its answer brackets the PLD one from above.
    hi = float(dp_accounting.calibrate_dp_mechanism(
        rdp_privacy_accountant.RdpAccountant, make_event, target_epsilon, delta,
        dp_accounting.LowerEndpointAndGuess(1e-6, 1.0), tol=1e-9,
    ))
    nm = hi
    if method == "pld":
        lo = hi / 2.0
        while gaussian_epsilon([lo] * rounds, delta, "pld") <= target_epsilon and lo > 1e-9:
            lo /= 2.0
        try:
            nm = float(dp_accounting.calibrate_dp_mechanism(
                lambda: _fresh("pld", lo), make_event, target_epsilon, delta,
                dp_accounting.ExplicitBracketInterval(lo, hi), tol=1e-4 * hi,
            ))
        except (OverflowError, ValueError, FloatingPointError):  # PLD fails at extreme ε: RDP's answer is
            return hi                                               # valid and never below PLD's (more noise)
    for _ in range(50):
        if gaussian_epsilon([nm] * rounds, delta, method) <= target_epsilon:
            return nm
        nm *= 1.0 + 1e-6
    return nm * 1.01
