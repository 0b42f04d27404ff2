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
from .threat_models import THREAT_MODELS  # noqa: F401  (re-exported: its home is .threat_models)

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
