"""Threat models: who the adversary is, what it sees, what is protected, what is public.

Every privacy report carries one of these strings (``PrivacyReport.threat_model``) and its
``noise_source``; :func:`finish` stamps both on a report and adds what they imply.

Common to all: noise is drawn by the party that adds it from its own OS entropy (party-local);
a seeded run is a reproducible simulation whose noise anyone with the seed can remove. Nothing
un-noised that depends on a party's data leaves the party in a private run unless the user opted
in to monitoring (then the report names what left).
"""

from __future__ import annotations

from .ledger import PrivacyReport

#: algorithm/side → (short threat model, what is protected, what is public)
THREAT_MODELS: dict[str, str] = {
    "vertical-feature": (
        "adversary: the coordinator (label holder) and every other party, colluding; sees every message "
        "party m sends (its N-vector shares, every round) and the public hyperparameters; protects party m's "
        "features under the stated relation; public: sample alignment (ids), N, d_m, rho, lambda, T, the bounds"),
    "vertical-label": (
        "adversary: any passive party (or all of them, colluding); sees every message the coordinator sends "
        "(N-vectors every round); protects the training labels (one label changes); public: the sample "
        "alignment, the hyperparameters and the passive parties' own features. Not covered: the label party's "
        "own final model (its refit on its exact labels, and its choice between that and its own model) stays "
        "with the label party; predictions it publishes from it are its own release"),
    "consensus": (
        "adversary: any node or an eavesdropper on any link; sees every broadcast model f_i(t) of every node "
        "and the graph; protects each node's records (replace one record of one node); public: the graph, "
        "node sample counts, C, rho, theta and T. The penalty schedules eta_i(t) are set by whoever launches the "
        "run and are known to it (and to the router in this implementation); keeping eta private defeats the KKT "
        "attack [Zhang, App. E] only against other nodes and eavesdroppers, and the epsilon does not rely on it"),
    "functional": (
        "adversary: the central machine or an eavesdropper; sees every noisy local model w~_i of every worker "
        "every round and every pooled statistic (mean curve, basis moments, response scaling); protects each "
        "worker's (curve, response) pairs (replace one pair); public: the grid, K, tau, lambda, rho, L, the "
        "clipping bound c1 and any user-given range"),
}

#: threat model -> the side its headline epsilon protects (``PrivacyReport.sides``)
SIDES = {"vertical-feature": "features", "consensus": "records", "functional": "curves"}

SEEDED_NOTE = ("seeded simulation: the noise was drawn from a seed given by the user; whoever knows the seed "
               "(it is in metrics.json) can regenerate the noise and remove it, so this run is not a private "
               "release — run without a seed for party-local noise")


def finish(report: PrivacyReport | None, *, threat_model: str, noise_source: str) -> PrivacyReport | None:
    """Stamp ``threat_model`` (a key of :data:`THREAT_MODELS` or a full string) and ``noise_source``
    on ``report``; a seeded run gets :data:`SEEDED_NOTE` among its notes."""
    if report is None:
        return None
    report.threat_model = THREAT_MODELS.get(threat_model, threat_model)
    report.side = report.side or SIDES.get(threat_model, "data")
    report.noise_source = noise_source
    if noise_source == "seeded" and SEEDED_NOTE not in report.notes:
        report.notes.append(SEEDED_NOTE)
    return report
