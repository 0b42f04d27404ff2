"""The accounting of a vertical experts fit: one output-perturbed release per feature party (Gaussian, record relation,
composed by dp-accounting PLD) and, on the label side, the labels sent exactly or once through randomized response.

The estimator (:class:`dpadmm.estimators.vertical_experts.VerticalExpertsClassifier`) collects the events its parties
emit and hands them here; it computes no ε itself.
"""

from __future__ import annotations

import math

from ...privacy.events import RECORD_REPLACE
from ...privacy.ledger import PrivacyReport
from ...privacy.threats import finish
from ..vertical.report import _cached_epsilon, _rr_block

THREAT = ("adversary: the label party and every other party, colluding, and anyone who sees scoring requests; "
          "sees the labels it is sent (if any) and every logit party m sends at scoring time, on new records (party m "
          "refuses to score its training rows: their logits are not post-processing of its DP model); "
          "protects each training record of party m (replace one row, and its label); party m sends nothing "
          "computed from its training rows during training; public: n, d_m, R, lambda, the noise_norm rule")
LABEL_THREAT = ("adversary: any other party (or all of them, colluding); sees the labels the label party sends it "
                "once (exact, or through randomized response); protects each training label; the label party's own "
                "model and the combination stay with the label party")
LABELS_SENT = "the label party sends the exact training labels to every other party (each fits its own model on them)"


def nothing_released(*, effective_rows: float, floor: float, label_epsilon: float, delta: float,
                     noise_source: str) -> PrivacyReport:
    """The report of a fit in which no label was sent and no expert fitted: ε = 0 on both sides."""
    why = (f"nothing left the label party: n (1 - 2q)^2 = {effective_rows:.0f} < {floor:.0f} at label "
           f"epsilon {label_epsilon:g} (too few labels survive randomized response for an expert to "
           "help), so the label party kept its own model")
    label = {"protected": True, "epsilon": 0.0, "delta": 0.0, "relation": "label", "note": why,
             "threat_model": LABEL_THREAT}
    rep = PrivacyReport(epsilon=0.0, delta=delta, accountant="nothing released",
                        relation=RECORD_REPLACE.key, relation_description=RECORD_REPLACE.description,
                        per_party={}, mechanism="none: the label party kept its own model", rounds=0,
                        label=label, notes=[why], side="features")
    return finish(rep, threat_model=THREAT, noise_source=noise_source)


def experts_report(events, pure, *, delta: float, noise_multiplier, noise_source: str,
                   simulation_note: str | None = None, model: str = "ridge-logistic") -> PrivacyReport | None:
    """The report of a fit from its events: each party's one Gaussian release (``events``) and the label party's
    randomized response (``pure``, none when the labels were sent exactly); ``model``: what each party fits (the
    regression target's "ridge-regression (squared loss)"). ``simulation_note``: what an in-process
    fit's driver holds that a deployment never releases (added when some party is protected)."""
    if not events and not pure:
        return None
    mine: dict = {}  # each party's releases: its model's, and its column-range estimate's when it made one
    for e in events:
        mine.setdefault(e.party, []).append(float(e.noise_multiplier))
    per_party = {p: _cached_epsilon(tuple(nms), float(delta), "pld") for p, nms in mine.items()}
    ranges = max((len(v) - 1 for v in mine.values()), default=0)
    eps = max(per_party.values()) if per_party else math.inf
    label = dict(_rr_block(pure), threat_model=LABEL_THREAT) if pure else {
        "protected": False, "epsilon": "inf", "delta": None, "relation": "label", "note": LABELS_SENT,
        "threat_model": LABEL_THREAT}
    notes = [] if per_party else ["epsilon = inf: features are not protected (fit with epsilon=)"]
    if simulation_note is not None and per_party:
        notes.append(simulation_note)
    rep = PrivacyReport(
        epsilon=eps, delta=float(delta) if per_party else float("nan"), accountant="dp-accounting PLD",
        relation=RECORD_REPLACE.key, relation_description=RECORD_REPLACE.description, per_party=per_party,
        mechanism=f"output perturbation: each party's {model} coefficient + N(0, sigma^2 I), once" + (
            f"; before it, {ranges} Gaussian releases of threshold counts (the party's DP column-range estimate, "
            "RANGE_SHARE of its budget)" if ranges else ""),
        noise_multiplier=noise_multiplier, rounds=1 + ranges, label=label, notes=notes,
        releases=[{"party": e.party, "side": "features", "relation": e.relation.key, "sensitivity": e.sensitivity,
                   "sigma": e.sigma, "noise_multiplier": e.noise_multiplier, "rounds": 1, "round": e.round} for e in events],
        assumptions=[{"premise": "rows of norm <= row_clip", "enforced": "each party maps its columns to [-1, 1] by "
                      "its bounds (declared or DP-estimated), scales by row_clip/sqrt(d), and clips its rows at fit and "
                      "scoring time"},
                     {"premise": "the exact minimiser", "enforced": "solver run to a checked gradient norm; the "
                      "residual error is in the sensitivity"}],
        side="features")
    return finish(rep, threat_model=THREAT, noise_source=noise_source)
