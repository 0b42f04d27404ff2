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
from .threat_models import THREAT_MODELS


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
    side: str = ""  # what the headline epsilon protects: "features", "records", "curves" (see sides())

    @property
    def private(self) -> bool:
        """The main side (features / records / curves) has a finite ε; see :meth:`sides` for all sides."""
        return math.isfinite(self.epsilon)

    def sides(self) -> dict[str, dict[str, Any]]:
        """Every protected (or unprotected) side of the run, each with the same fields: ``protected``,
        ``epsilon`` (``"inf"`` when not protected), ``delta``, ``accountant``, ``relation``,
        ``threat_model``, ``per_party`` and, when not protected, ``why``. Vertical fits have two sides,
        ``features`` (per party) and ``labels``; consensus ``records``; functional ``curves``."""
        main_name = self.side or "data"
        protected = math.isfinite(self.epsilon)
        main: dict[str, Any] = {
            "protected": protected, "epsilon": self.epsilon if protected else "inf",
            "delta": self.delta if protected else None, "accountant": self.accountant if protected else None,
            "relation": self.relation, "threat_model": self.threat_model,
            "per_party": {p: (e if math.isfinite(e) else "inf") for p, e in self.per_party.items()},
        }
        if not protected:
            why = next((n.split(": ", 1)[-1] for n in self.notes if n.startswith(("epsilon = inf", f"{main_name} are not"))),
                       None) or "no accounted noise on this side"
            main["why"] = why
        out = {main_name: main}
        if self.label is not None:
            lab = self.label
            lp = bool(lab.get("protected"))
            out["labels"] = {
                "protected": lp, "epsilon": lab.get("epsilon") if lp else "inf",
                "delta": lab.get("delta") if lp else None, "accountant": lab.get("accountant") if lp else None,
                "relation": lab.get("relation", "label"), "threat_model": lab.get("threat_model", ""),
                "per_party": {"coordinator": lab.get("epsilon")} if lp else {},
            }
            if not lp:
                why = lab.get("note", "the labels are sent without noise")
                why = why.replace("labels are NOT protected: ", "").replace(" (use label_epsilon / --label-epsilon)", "")
                out["labels"]["why"] = why
            if main_name == "features" and self.threat_model in (THREAT_MODELS["vertical-feature"],
                                                                  THREAT_MODELS["vertical-label"]):
                # ADMM sharing: the report's top-level threat model may be the label side's; each side gets its own
                main["threat_model"] = THREAT_MODELS["vertical-feature"]
                out["labels"]["threat_model"] = THREAT_MODELS["vertical-label"]
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        out = {"summary": self.summary().splitlines(), "sides": self.sides()}
        out |= {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()}
        out["epsilon"] = self.epsilon if math.isfinite(self.epsilon) else "inf"
        out["epsilon_side"] = self.side or "data"  # which side the top-level epsilon is; all sides: "sides"
        return out

    def summary(self) -> str:
        """One line per side (ε and δ, accountant, relation, who the adversary is, or "not protected" and
        why), then where the noise came from and the paper's own bound."""
        remedy = (self.label or {}).get("remedy", " (fit with label_epsilon=)")  # how to protect unprotected labels
        lines = [render_side(name, side) + (remedy if name == "labels" and not side["protected"] else "")
                 for name, side in self.sides().items()]
        tail = f"noise: {self.noise_source}" if self.noise_source else ""
        pb = self.paper_bound.get("epsilon")
        if pb is not None and (math.isfinite(self.epsilon) or (isinstance(pb, (int, float)) and math.isfinite(pb))):
            pbs = f"{pb:.4g}" if isinstance(pb, (int, float)) and math.isfinite(pb) else str(pb)
            tail += ("; " if tail else "") + f"paper's bound {self.paper_bound.get('name', '')}: ε={pbs}"
        if tail:
            lines.append(tail)
        return "\n".join(lines)


#: who the adversary is, in a few words, per side (the full text is ``threat_model``)
SHORT_THREATS = {
    "features": "against the coordinator and all other parties",
    "labels": "against every passive party",
    "records": "against any node or eavesdropper",
    "curves": "against the central machine or an eavesdropper",
}


def _num(e) -> str:
    return f"{e:.4g}" if isinstance(e, (int, float)) and math.isfinite(e) else "inf"


def not_protected(name: str, why: str) -> dict[str, Any]:
    """A side without protection (e.g. the only side of a non-private run), in the shape of :meth:`sides`."""
    return {"protected": False, "epsilon": "inf", "delta": None, "accountant": None, "why": why}


def nonprivate_privacy(sides: dict[str, dict[str, Any]], **extra) -> dict[str, Any]:
    """metrics.json's ``privacy`` block of a run with no privacy report: the same ``summary`` and ``sides``."""
    main = next(iter(sides))
    return {"private": False, "summary": [render_side(k, v) for k, v in sides.items()], "sides": sides,
            "epsilon": "inf", "epsilon_side": main, "delta": None, **extra}


def render_side(name: str, side: dict[str, Any]) -> str:
    """One side of a report as one line; the CLI, ``summary()`` and metrics.json all use it."""
    if not side.get("protected"):
        return f"{name}: NOT protected (ε = inf) -- {side.get('why', '')}".rstrip(" -")
    per = side.get("per_party") or {}
    if len(per) > 4:
        per_txt = f" (the worst of {len(per)} parties; each in per_party)"
    else:
        per_txt = (" per party (" + ", ".join(f"{p} {_num(e)}" for p, e in per.items()) + ")") if len(per) > 1 else ""
    delta = side.get("delta")
    d_txt = f"{delta:.3g}" if isinstance(delta, (int, float)) else str(delta)
    acc = f"; {side['accountant']}" if side.get("accountant") else ""
    return (f"{name}: ε = {_num(side['epsilon'])} at δ = {d_txt}{per_txt}{acc}; relation: "
            f"{side.get('relation')}; {SHORT_THREATS.get(name, side.get('threat_model', ''))}")


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
