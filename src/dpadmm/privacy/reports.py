"""Turn a run's ledger into a :class:`PrivacyReport`, with the paper's own bound beside it."""

from __future__ import annotations

import math

from .accountants.composition import hu_corollary1
from .accountants.gaussian import gaussian_epsilon
from .events import FEATURE_COLUMN, GaussianRelease
from .ledger import PrivacyLedger, PrivacyReport
from .mechanisms import classical_gaussian_epsilon


def hu_report(ledger: PrivacyLedger, *, delta: float, accountant: str = "pld", rounds: int,
              paper_delta_iter: float | None = None, assumptions=(), notes=()) -> PrivacyReport:
    """Report for vertical ADMM sharing [Hu, eq. 16].

    Headline: per party, the tight composition (``accountant``) of that party's Gaussian releases
    at ``delta``; the run's ε is the worst party's (a neighbouring dataset changes one column of
    one party). Beside it: [Hu, Cor. 1] — each iteration (ε_it, δ_it)-DP by [Hu, Thm 3] with
    ``ε_it = sqrt(2 ln(1.25/δ_it)) / (σ/C)``, composed by advanced composition with δ' chosen so
    the paper's total δ equals ``delta`` (``δ_it = δ/(2T)``, ``δ' = δ/2`` unless ``paper_delta_iter``
    fixes δ_it, in which case ``δ' = delta − T δ_it``).
    """
    per_party_events = {p: [e for e in evs if isinstance(e, GaussianRelease)] for p, evs in ledger.by_party().items()}
    per_party_events = {p: evs for p, evs in per_party_events.items() if evs}
    per_party = {p: gaussian_epsilon([e.noise_multiplier for e in evs], delta, accountant)
                 for p, evs in per_party_events.items()}
    per_party_rdp = {p: gaussian_epsilon([e.noise_multiplier for e in evs], delta, "rdp")
                     for p, evs in per_party_events.items()}
    eps = max(per_party.values()) if per_party else math.inf
    T = max((len(v) for v in per_party_events.values()), default=0)
    nm = min((e.noise_multiplier for evs in per_party_events.values() for e in evs), default=None)
    paper = {"name": "[Hu, Cor. 1] advanced composition of [Hu, Thm 3]", "epsilon": math.inf, "delta": delta}
    if nm is not None and T > 0:
        d_it = paper_delta_iter if paper_delta_iter is not None else delta / (2 * T)
        d_prime = delta - T * d_it
        if d_prime > 0:
            eps_it = classical_gaussian_epsilon(nm, d_it)
            e_total, d_total = hu_corollary1(eps_it, d_it, T, d_prime)
            paper.update({
                "epsilon": e_total, "delta": d_total, "epsilon_per_iteration": eps_it,
                "delta_per_iteration": d_it, "delta_prime": d_prime,
                "valid": eps_it <= 1.0,
                "caveat": ("[Hu, Thm 3] is stated for per-iteration epsilon <= 1; "
                           "above that the classical Gaussian-mechanism bound does not hold")
                if eps_it > 1.0 else "",
            })
    rep = PrivacyReport(
        epsilon=eps, delta=delta, accountant=f"dp-accounting {accountant.upper()}",
        relation=FEATURE_COLUMN.key, relation_description=FEATURE_COLUMN.description,
        per_party=per_party, rdp_epsilon=max(per_party_rdp.values()) if per_party_rdp else math.inf,
        paper_bound=paper, assumptions=list(assumptions),
        mechanism="Gaussian on the shared partial score D_m x_m, correlated noise sigma*U_m g [Hu, eq. 16]; "
                  "sensitivity C = 3/(d_m rho)[lambda c1 + (1 + M rho) b1] as published [Hu, Lemma 1]",
        noise_multiplier=nm, rounds=T, notes=list(notes),
    )
    return rep
