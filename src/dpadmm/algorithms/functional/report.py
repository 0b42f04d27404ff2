"""Privacy of FDP-ADMM [Zhou, Thm 1, Lemma 1–2] and of the distributed FPCA step.

Per iteration, worker i releases ``w̃_i^l = w_i^l + N(0, σ_{i,l}² I_K)`` with

    σ_{i,l} = z · Δ_{i,l},   Δ_{i,l} = 2 c_1 / (m_i (ρ + 1/η_i^l)),   z = sqrt(2 ln(1.25/δ)) / ε   [Zhou, Thm 1]

(Δ corrected: [Zhou, Lemma 2] prints m_i², the update moves by at most 2c_1/(m_i(ρ + 1/η)) when one
of the worker's samples is replaced, ‖A_ij‖ ≤ c_1 — docs/algorithms.md §3). The classical Gaussian-mechanism
bound behind Thm 1 holds for ε ≤ 1; the tight accountants below hold for every z.

The run's total: a neighbouring dataset replaces one sample of one worker, so the guarantee is the
worst worker's composition of its own releases — L Gaussian mechanisms (plus one for the private
FPCA moment release, if used) — computed by dp-accounting's PLD (headline) and RDP accountants;
beside it the paper's view, advanced composition [Zhou, Lemma 1] of L (ε, δ)-DP iterations:
``(sqrt(2L ln(1/δ'))ε + Lε(e^ε − 1), Lδ + δ')`` with δ' = δ.
"""

from __future__ import annotations

import math
from typing import Iterable

from ...privacy.accountants.composition import advanced_composition
from ...privacy.accountants.gaussian import calibrate_noise_multiplier, gaussian_epsilon
from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.ledger import PrivacyLedger, PrivacyReport


def zhou_sensitivity(*, c1: float, m: int, rho: float, eta: float = math.inf) -> float:
    """Corrected l2 sensitivity of the local update: 2c_1/(m(ρ + 1/η)) (η = ∞: exact step, 2c_1/(mρ))."""
    return 2.0 * c1 / (m * (rho + (0.0 if math.isinf(eta) else 1.0 / eta)))


def iteration_noise_multiplier(epsilon: float, delta: float) -> float:
    """z = σ/Δ = sqrt(2 ln(1.25/δ))/ε [Zhou, Thm 1] (0 for ε = ∞: no noise)."""
    if math.isinf(epsilon):
        return 0.0
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def zhou_sigma(*, c1: float, m: int, rho: float, eta: float, epsilon: float, delta: float) -> float:
    """σ_{i,l} of [Zhou, Thm 1] with the corrected sensitivity: 2c_1 sqrt(2 ln(1.25/δ)) / (m ε (ρ + 1/η))."""
    return iteration_noise_multiplier(epsilon, delta) * zhou_sensitivity(c1=c1, m=m, rho=rho, eta=eta)


def calibrate_total(total_epsilon: float, delta: float, rounds: int, *, extra_releases: int = 0,
                    accountant: str = "pld") -> float:
    """Noise multiplier z such that ``rounds + extra_releases`` Gaussian releases compose to
    (total_epsilon, delta) (never overspends: checked with the same accountant)."""
    return calibrate_noise_multiplier(total_epsilon, delta, rounds + extra_releases, accountant)


def total_epsilon(noise_multipliers: Iterable[float], delta: float, accountant: str = "pld") -> float:
    """Composed ε at δ of one worker's releases (inf if any multiplier is 0)."""
    return gaussian_epsilon(list(noise_multipliers), delta, accountant)


def paper_bound(eps_iter: float, delta_iter: float, rounds: int, delta_prime: float | None = None) -> dict:
    """[Zhou, Lemma 1] (advanced composition) of ``rounds`` (ε, δ)-DP iterations."""
    dp = delta_iter if delta_prime is None else delta_prime
    if not math.isfinite(eps_iter) or rounds <= 0:
        return {"name": "[Zhou, Lemma 1] advanced composition", "epsilon": math.inf, "delta": 1.0}
    e, d = advanced_composition(eps_iter, delta_iter, rounds, dp)
    return {"name": "[Zhou, Lemma 1] advanced composition", "epsilon": e, "delta": d,
            "epsilon_per_iteration": eps_iter, "delta_per_iteration": delta_iter, "delta_prime": dp,
            "valid": eps_iter <= 1.0,
            "caveat": "" if eps_iter <= 1.0 else "[Zhou, Thm 1] uses the classical Gaussian mechanism, stated for epsilon <= 1"}


def _merge_rounding(mults: list[float]) -> list[float]:
    """σ/Δ of rounds whose Δ differs comes back with rounding differences (~1e-16); multipliers equal
    to 1e-9 relative are replaced by their group's minimum (conservative) so the accountant composes each
    group as one self-composed event (mixed multipliers, e.g. shares of a budget, form several groups)."""
    if not mults:
        return []
    order = sorted(range(len(mults)), key=lambda i: mults[i])
    out = list(mults)
    lo = mults[order[0]]
    for i in order:
        if mults[i] > lo * (1.0 + 1e-9):
            lo = mults[i]
        out[i] = lo
    return out


def zhou_report(ledger: PrivacyLedger, *, delta: float, accountant: str = "pld", eps_iter: float | None = None,
                delta_iter: float | None = None, fpca_noise_multiplier: float | None = None,
                assumptions=(), notes=(), basis_covered: bool = False) -> PrivacyReport:
    """Total privacy of an FDP-ADMM run from its ledger (one party = one worker).

    ``fpca_noise_multiplier``: z of the private-FPCA moment release, composed into every worker's
    total (one extra Gaussian release); ``None`` if the basis did not touch private data
    (fixed basis) or was computed without noise (then the FPCA step is *not* covered: noted).
    ``basis_covered``: the pooled-statistics releases (``algorithms.functional_statistics``, rounds < 0)
    are in the ledger itself and compose with each worker's ADMM releases.
    """
    per = {p: [e for e in evs if isinstance(e, GaussianRelease)] for p, evs in ledger.by_party().items()}
    per = {p: evs for p, evs in per.items() if evs}
    extra = [fpca_noise_multiplier] if fpca_noise_multiplier else []
    mults = {p: _merge_rounding([e.noise_multiplier for e in evs]) + extra for p, evs in per.items()}
    per_party = {p: gaussian_epsilon(v, delta, accountant) for p, v in mults.items()}
    per_rdp = {p: gaussian_epsilon(v, delta, "rdp") for p, v in mults.items()}
    eps = max(per_party.values()) if per_party else math.inf
    rounds = max((sum(e.round >= 0 for e in v) for v in per.values()), default=0)
    n_releases = max((len(v) for v in per.values()), default=0)
    nm = min((e.noise_multiplier for evs in per.values() for e in evs), default=None)
    if eps_iter is None and nm is not None:
        eps_iter = math.sqrt(2.0 * math.log(1.25 / (delta_iter or delta))) / nm
    pb = paper_bound(eps_iter if eps_iter is not None else math.inf, delta_iter or delta, n_releases + len(extra))
    all_notes = list(notes)
    if fpca_noise_multiplier is None and not basis_covered:
        all_notes.append("the FPCA basis is not covered by this epsilon (fixed basis, or FPCA without noise)")
    return PrivacyReport(
        epsilon=eps, delta=delta, accountant=f"dp-accounting {accountant.upper()}",
        relation=RECORD_REPLACE.key, relation_description=RECORD_REPLACE.description,
        per_party=per_party, rdp_epsilon=max(per_rdp.values()) if per_rdp else math.inf,
        paper_bound=pb, assumptions=list(assumptions),
        mechanism="Gaussian on each worker's local model w_i [Zhou, eq. 22, Thm 1]; sensitivity "
                  "2c1/(m_i(rho + 1/eta)) (corrected from [Zhou, Lemma 2]'s m_i^2, docs/algorithms.md §3)",
        noise_multiplier=nm, rounds=rounds, notes=all_notes,
    )
