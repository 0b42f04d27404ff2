"""P(t) of [Zhang, Thm 4.1]: the pure-DP bound of penalty perturbation, per node and overall.

Each node i emits one :class:`~dpadmm.privacy.events.PureDPRelease` per iteration t with
``epsilon = C(1.4c_1 + α_i(t)) / (η_i(t) V_i B_i)`` (relation: replace one record of one node).
Basic composition of pure DP over the iterations and the maximum over nodes (a neighbouring
dataset changes one record, held by one node) give

    P_i(t) = Σ_{r ≤ t} C(1.4c_1 + α_i(r)) / (η_i(r) V_i B_i),      P(t) = max_i P_i(t),

the curve of [Zhang, Fig. 2–4]; the run of T iterations is P(T)-differentially private (δ = 0),
with every intermediate f_i(t) as output [Zhang, Def. 4.1].
"""

from __future__ import annotations

import math

import numpy as np

from ...privacy.events import RECORD_REPLACE, PureDPRelease
from ...privacy.ledger import PrivacyLedger, PrivacyReport


def zhang_privacy_curve(ledger: PrivacyLedger, rounds: int | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-node cumulative ``P_i(t)`` and overall ``P(t) = max_i P_i(t)`` for t = 1…T (arrays of length T)."""
    per_node: dict[str, np.ndarray] = {}
    T = rounds or 0
    by = {p: [e for e in evs if isinstance(e, PureDPRelease)] for p, evs in ledger.by_party().items()}
    by = {p: evs for p, evs in by.items() if evs}
    if rounds is None:
        T = max((max(e.round for e in evs) for evs in by.values()), default=0)
    for p, evs in by.items():
        terms = np.zeros(T)
        for e in evs:
            if 1 <= e.round <= T:
                terms[e.round - 1] += e.epsilon
        per_node[p] = np.cumsum(terms)
    overall = np.max(np.vstack(list(per_node.values())), axis=0) if per_node else np.full(T, np.inf)
    return per_node, overall


def zhang_report(ledger: PrivacyLedger, *, rounds: int, assumptions=(), notes=(), mechanism: str = "") -> PrivacyReport:
    """:class:`PrivacyReport` of a PP/DVP run: ε = P(T) of [Zhang, Thm 4.1] (pure DP, δ = 0).

    ``per_party`` holds every node's P_i(T); ``paper_bound`` the whole curve (``curve``: P(t) for
    t = 1…T, ``per_node_curve``) and the worst node. With no events (a non-private run, or PVP,
    which Thm 4.1 does not cover) ε = ∞.
    """
    per_node, overall = zhang_privacy_curve(ledger, rounds)
    eps = float(overall[-1]) if per_node and len(overall) else math.inf
    worst = max(per_node, key=lambda p: per_node[p][-1]) if per_node else None
    paper = {
        "name": "[Zhang, Thm 4.1] P(T) = max_i sum_t C(1.4 c1 + alpha_i(t)) / (eta_i(t) V_i B_i)",
        "epsilon": eps,
        "curve": overall.tolist() if per_node else [],
        "per_node_curve": {p: c.tolist() for p, c in per_node.items()},
        "worst_node": worst,
    }
    return PrivacyReport(
        epsilon=eps, delta=0.0, accountant="[Zhang, Thm 4.1] (basic composition of pure DP, max over nodes)",
        relation=RECORD_REPLACE.key, relation_description=RECORD_REPLACE.description,
        per_party={p: float(c[-1]) for p, c in per_node.items()}, paper_bound=paper,
        assumptions=list(assumptions),
        mechanism=mechanism or "penalty perturbation: eps_i(t) with density ~ exp(-alpha_i(t)||eps||) inside node i's "
                               "penalty [Zhang, eq. 24-25]",
        rounds=int(rounds), notes=list(notes),
    )


def with_fallback(report: PrivacyReport, fallback: PrivacyLedger, *, fallback_epsilon: float,
                  handed_over: str | None) -> PrivacyReport:
    """``report`` (a PP/DVP run's, from :func:`zhang_report`) with the DP base-rate fallback added: each node's
    Laplace count (ε_b) and its model-vs-base-rate comparison (ε_c), the events in ``fallback``, composed by basic
    composition of pure DP with P_i(T): ε_i = P_i(T) + ε_b + ε_c, ε = max_i ε_i. Modifies and returns ``report``."""
    extra: dict[str, float] = {}
    for e in fallback.events:
        extra[e.party] = extra.get(e.party, 0.0) + float(e.epsilon)
    report.per_party = {p: v + extra.get(p, 0.0) for p, v in report.per_party.items()}
    report.epsilon = max(report.per_party.values())
    report.notes = list(report.notes) + [
        f"includes the DP base rate (Laplace count, epsilon {0.5 * fallback_epsilon:g}) and the "
        f"model-vs-base-rate comparison (Laplace, epsilon {0.5 * fallback_epsilon:g}) per node, by "
        f"basic composition with P(T) = {float(report.paper_bound['epsilon']):.4g}; handed over: "
        f"{handed_over}"]
    return report


def pp_assumptions(*, normalized: bool, max_row_norm: float) -> list[dict]:
    """The premises of [Zhang, Thm 4.1] for penalty perturbation (pp, dvp) and how a run meets each."""
    return [
        {"name": "||x||_2 <= 1 for every training row [Zhang, Thm 4.1]",
         "status": "normalised" if normalized else "checked",
         "detail": f"max row norm before: {max_row_norm:.6g}"},
        {"name": "logistic loss: |L'| <= 1, 0 < L'' <= c1 = 1/4 [Zhang, Assumption 4]", "status": "by construction"},
        {"name": "R(f) = 1/2 ||f||^2, 1-strongly convex [Zhang, Assumption 5]", "status": "by construction"},
        {"name": "2 c1 < (B_i/C)(rho/N + 2 theta V_i) [Zhang, Alg. 1] and eq. 64 for every eta_i(t)",
         "status": "checked"},
    ]
