"""The privacy ledger: the engine's record of every release, composed into a report.

The ledger groups events by party (a neighbouring dataset changes one party's data only, so the
guarantee of the run is the worst party's) and asks an accountant for the total.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from .accountants.gaussian import gaussian_epsilon
from .events import GaussianRelease, PureDPRelease, Relation


@dataclass
class PrivacyReport:
    """Total privacy of a run.

    ``epsilon`` at ``delta`` is the headline, from ``accountant``; ``per_party`` gives each party's
    own total; ``paper_bound`` is the paper's own bound for comparison (may be looser or carry
    caveats); ``assumptions`` lists each precondition of the theorem and how it is enforced.
    ``threat_model`` says who the adversary is and what it sees (see :mod:`dpadmm.privacy.threats`);
    ``noise_source`` is ``"party-local"`` (each party's own OS entropy) or ``"seeded"`` (a reproducible
    simulation: whoever knows the seed can remove the noise); ``label`` is the label-side guarantee
    where an algorithm has one; ``releases`` lists every release that enters the total.
    """

    epsilon: float
    delta: float
    accountant: str
    relation: str
    relation_description: str
    per_party: dict[str, float] = field(default_factory=dict)
    rdp_epsilon: float | None = None
    paper_bound: dict[str, Any] = field(default_factory=dict)
    assumptions: list[dict[str, Any]] = field(default_factory=list)
    mechanism: str = ""
    noise_multiplier: float | None = None
    rounds: int = 0
    notes: list[str] = field(default_factory=list)
    threat_model: str = ""
    noise_source: str = ""
    label: dict[str, Any] | None = None
    releases: list[dict[str, Any]] = field(default_factory=list)

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()} | {
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else "inf"
        }

    def summary(self) -> str:
        """One human line: ε, δ, accountant, relation, and the paper's bound beside it."""
        eps = f"{self.epsilon:.4g}" if math.isfinite(self.epsilon) else "inf (not private)"
        line = f"(ε={eps}, δ={self.delta:.3g}) by {self.accountant} over {self.rounds} rounds; relation: {self.relation}"
        if self.noise_source:
            line += f"; noise: {self.noise_source}"
        pb = self.paper_bound.get("epsilon")
        if pb is not None:
            pbs = f"{pb:.4g}" if isinstance(pb, (int, float)) and math.isfinite(pb) else str(pb)
            line += f"; paper's bound {self.paper_bound.get('name', '')}: ε={pbs}"
        return line


class PrivacyLedger:
    """Append-only record of privacy events of one run."""

    def __init__(self) -> None:
        self.events: list[GaussianRelease | PureDPRelease] = []

    def record(self, events) -> None:
        self.events.extend(events)

    def __len__(self) -> int:
        return len(self.events)

    def by_party(self) -> dict[str, list]:
        out: dict[str, list] = defaultdict(list)
        for e in self.events:
            out[e.party].append(e)
        return dict(out)

    def relations(self) -> set[Relation]:
        return {e.relation for e in self.events}

    def gaussian_epsilons(self, delta: float, method: str = "pld") -> dict[str, float]:
        """Per-party total ε at ``delta`` of that party's Gaussian releases."""
        return {
            p: gaussian_epsilon([e.noise_multiplier for e in evs if isinstance(e, GaussianRelease)], delta, method)
            for p, evs in self.by_party().items()
        }

    def pure_epsilons(self) -> dict[str, float]:
        """Per-party sum of pure-DP epsilons (basic composition of pure DP)."""
        return {
            p: float(sum(e.epsilon for e in evs if isinstance(e, PureDPRelease)))
            for p, evs in self.by_party().items()
        }

    def state(self) -> list:
        return list(self.events)

    def restore(self, events) -> None:
        self.events = list(events)
