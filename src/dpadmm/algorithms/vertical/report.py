"""Turn a run's ledger into a :class:`PrivacyReport`, with the paper's own bound beside it."""

from __future__ import annotations

import functools
import math

from ...privacy.accountants.composition import hu_corollary1
from ...privacy.accountants.gaussian import gaussian_epsilon
from ...privacy.events import FEATURE_COLUMN, LABEL_CHANGE, RECORD_REPLACE, GaussianRelease, PureDPRelease
from ...privacy.ledger import PrivacyLedger, PrivacyReport
from ...privacy.mechanisms import classical_gaussian_epsilon, flip_probability
from ...privacy.threats import THREAT_MODELS, finish


@functools.lru_cache(maxsize=512)
def _cached_epsilon(nms: tuple, delta: float, accountant: str) -> float:
    """``gaussian_epsilon`` memoised (audits and sweeps report the same compositions many times)."""
    return gaussian_epsilon(list(nms), delta, accountant)


PAPER_NOT_DP = ("[Hu, eq. 16] is not differentially private: every released D_m x~_m lies in range(D_m), a "
                "subspace that depends on the private data, so neighbouring blocks with different column spaces give "
                "outputs with disjoint supports (no epsilon for any delta < 1)")
LABELS_READABLE = ("labels are NOT protected: the coordinator sends every party the dual y, whose sign is -Y_i at "
                   "convergence, so every party can read the training labels (use label_epsilon / --label-epsilon)")
FEATURE_THREAT = ("adversary: the coordinator and all other parties, seeing every message party m sends (its shares) "
                  "over the whole run; protected: party m's features under the stated relation; public: N, the "
                  "hyperparameters, the round count")
LABEL_THREAT = ("adversary: any passive party (or all of them together), seeing every message the coordinator sends "
                "over the whole run, and knowing all features; protected: each training label; the label party's "
                "refit model and the intercept never leave the label party")


def _rr_block(pure) -> dict:
    """Randomized response: pure ε per release, composed by addition (one release per run)."""
    eps = float(sum(e.epsilon for e in pure))
    return {"protected": True, "epsilon": eps, "delta": 0.0, "relation": LABEL_CHANGE.key,
            "relation_description": LABEL_CHANGE.description, "threat_model": LABEL_THREAT,
            "accountant": "pure epsilon (basic composition)", "rdp_epsilon": eps,
            "mechanism": "randomized response: the label party releases each label once, flipped with probability "
                         "1/(1 + e^epsilon); everything after is post-processing",
            "flip_probability": flip_probability(eps) if len(pure) == 1 else None,
            "sensitivity": None, "sigma": None, "noise_multiplier": None, "rounds": len(pure)}


def _label_block(label_events, delta, accountant, rounds, pure=()) -> dict:
    if pure:
        if any(e.sigma > 0 for e in label_events):  # both mechanisms in one run: not a combination we make
            return {"protected": True, "epsilon": math.inf, "delta": delta, "relation": LABEL_CHANGE.key,
                    "threat_model": LABEL_THREAT, "note": "mixed label mechanisms: not accounted (epsilon = inf)"}
        return _rr_block(pure)
    if not label_events:
        return {"protected": False, "epsilon": "inf", "delta": None, "relation": LABEL_CHANGE.key,
                "threat_model": LABEL_THREAT, "note": LABELS_READABLE}
    nms = [e.noise_multiplier for e in label_events]
    if any(e.sigma <= 0 for e in label_events):  # the linearised coordinator without label noise
        return {"protected": False, "epsilon": "inf", "delta": None, "relation": LABEL_CHANGE.key,
                "threat_model": LABEL_THREAT, "note": LABELS_READABLE.replace("the dual y", "the gradient")}
    return {"protected": True,
            "epsilon": _cached_epsilon(tuple(nms), delta, accountant), "delta": delta,
            "relation": LABEL_CHANGE.key, "relation_description": LABEL_CHANGE.description,
            "threat_model": LABEL_THREAT, "accountant": f"dp-accounting {accountant.upper()}",
            "rdp_epsilon": _cached_epsilon(tuple(nms), delta, "rdp"),
            "mechanism": "coordinator sends clip(l'(s_i, Y_i)) + N(0, sigma_L^2 I_N) (and uses a noisy sum for the "
                         "intercept); one label changes one coordinate and the sum",
            "sensitivity": label_events[-1].sensitivity, "sigma": label_events[-1].sigma,
            "noise_multiplier": min(nms), "rounds": len(label_events)}


def hu_report(ledger: PrivacyLedger, *, delta: float, accountant: str = "pld", rounds: int,
              paper_delta_iter: float | None = None, assumptions=(), notes=(), mechanism: str | None = "gaussian",
              relation: str = "feature_column", label_delta: float | None = None) -> PrivacyReport:
    """Report for vertical ADMM sharing [Hu, eq. 16].

    Headline: per party, the tight composition (``accountant``) of that party's Gaussian releases
    at ``delta``; the run's ε is the worst party's (a neighbouring dataset changes one column of
    one party). Beside it: [Hu, Cor. 1] — each iteration (ε_it, δ_it)-DP by [Hu, Thm 3] with
    ``ε_it = sqrt(2 ln(1.25/δ_it)) / (σ/C)``, composed by advanced composition with δ' chosen so
    the paper's total δ equals ``delta`` (``δ_it = δ/(2T)``, ``δ' = δ/2`` unless ``paper_delta_iter``
    fixes δ_it, in which case ``δ' = delta − T δ_it``).

    ``mechanism="paper"``: the headline is ε = ∞ with :data:`PAPER_NOT_DP` as the reason (the
    accountant's number, computed as if the noise were isotropic, is kept as ``paper_bound`` context
    only). ``mechanism=None``: the feature side is not protected (a label-only private fit).
    The label side (events of party ``"coordinator"`` under the label relation) is accounted apart at
    ``label_delta`` into ``label``; without such events ``label`` says the labels are readable.
    """
    label_events = [e for e in ledger.events if isinstance(e, GaussianRelease) and e.relation == LABEL_CHANGE]
    pure = [e for e in ledger.events if isinstance(e, PureDPRelease) and e.relation == LABEL_CHANGE]
    label = _label_block(label_events, label_delta if label_delta is not None else delta, accountant, rounds, pure)
    per_party_events = {p: [e for e in evs if isinstance(e, GaussianRelease) and e.relation != LABEL_CHANGE]
                        for p, evs in ledger.by_party().items()}
    per_party_events = {p: evs for p, evs in per_party_events.items() if evs}
    per_party = {p: _cached_epsilon(tuple(e.noise_multiplier for e in evs), delta, accountant)
                 for p, evs in per_party_events.items()}
    per_party_rdp = {p: _cached_epsilon(tuple(e.noise_multiplier for e in evs), delta, "rdp")
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
    releases = []
    for p, evs in per_party_events.items():
        # costly releases only: a share answering an all-zero input has sensitivity 0 (no data in it)
        costly = [e for e in evs if e.sensitivity > 0 and math.isfinite(e.noise_multiplier)] or evs
        worst = max(costly, key=lambda e: e.sensitivity)
        releases.append({"party": p, "side": "features", "relation": evs[-1].relation.key,
                         "sensitivity": worst.sensitivity, "sigma": worst.sigma,
                         "noise_multiplier": min(e.noise_multiplier for e in costly), "rounds": len(costly),
                         "rounds_total": len(evs)})
    label_events = [e for e in label_events if e.sigma > 0]
    if pure:
        releases.append({"party": "coordinator", "side": "labels", "relation": LABEL_CHANGE.key,
                         "mechanism": "randomized response", "epsilon": label["epsilon"],
                         "flip_probability": label.get("flip_probability"), "rounds": len(pure)})
    elif label_events:
        releases.append({"party": "coordinator", "side": "labels", "relation": LABEL_CHANGE.key,
                         "sensitivity": label["sensitivity"], "sigma": label["sigma"],
                         "noise_multiplier": label["noise_multiplier"], "rounds": label["rounds"]})
    notes = list(notes)
    if not label.get("protected"):
        notes.append(label["note"])
    rel = {"feature_column": FEATURE_COLUMN, "record": RECORD_REPLACE}[relation]
    if mechanism == "paper":
        notes.insert(0, "epsilon = inf: " + PAPER_NOT_DP)
        eps = math.inf
        per_party = {p: math.inf for p in per_party}
        paper["note"] = "the paper's claimed bound; it does not hold (the mechanism is not DP)"
        mech = ("[Hu, eq. 16] as published, for reproduction only: correlated noise sigma*U_m g in range(D_m); "
                "sensitivity C = 3/(d_m rho)[lambda c1 + (1 + M rho) b1] [Hu, Lemma 1]; NOT differentially private")
        rel = FEATURE_COLUMN
    elif mechanism is None:
        eps = math.inf
        per_party = {}
        mech = "none on the feature side (shares are sent exactly); labels: see label"
        notes.insert(0, "features are not protected: each party's shares D_m x_m are sent exactly")
    else:
        mech = ("isotropic Gaussian N(0, sigma^2 I_N) on the whole released share D_m x_m; the party clips what it "
                "receives (||v|| <= V) and solves the ridge x-step exactly; sensitivity per relation proved in "
                "dpadmm.privacy.mechanisms (C and sigma per party in releases)")
    rep = PrivacyReport(
        epsilon=eps, delta=delta, accountant=f"dp-accounting {accountant.upper()}",
        relation=rel.key, relation_description=rel.description,
        per_party=per_party, rdp_epsilon=(max(per_party_rdp.values()) if per_party_rdp else math.inf)
        if mechanism == "gaussian" else math.inf,
        paper_bound=paper, assumptions=list(assumptions), mechanism=mech,
        noise_multiplier=nm, rounds=T if T else rounds, notes=notes, label=label, releases=releases,
        side="features",
    )
    return rep


def paper_assumptions(bounds) -> list[dict]:
    """The preconditions of [Hu, eq. 16] (``mechanism="paper"``) and how a run meets each; ``bounds``: the
    projection radii (x, y, z) of [Hu, Assumption 2.1]."""
    return [
        {"name": "unit-norm rows of every party block [Hu, Assumption 2.3]", "status": "checked",
         "detail": "max | ||row|| - 1 | <= 1e-6 over non-zero rows"},
        {"name": f"bounded iterates ||x_m|| <= {bounds.x:.4g}, ||y|| <= {bounds.y:.4g}, ||z|| <= {bounds.z:.4g} "
                  "[Hu, Assumption 2.1]",
         "status": "enforced", "detail": "x_m, z and the dual y are projected onto their balls every iteration"},
        {"name": "|R''| <= c1 = 1 [Hu, Assumption 2.2]", "status": "checked", "detail": "penalty='l2'"},
        {"name": "sensitivity C of [Hu, Lemma 1]", "status": "as published",
         "detail": "the proof's step ||(D_m^T D_m)^-1|| = 1/d_m does not follow from unit-norm rows (docs/algorithms.md §1)"},
    ]


def gaussian_assumptions(V: float, V_inf: float, relation: str, relation_description: str) -> list[dict]:
    """The premises of the Gaussian feature-side mechanism (clipped input, exact ridge x-step) and how a run
    enforces each; ``V``/``V_inf``: the clip on what a party receives (``V_inf`` under the record relation)."""
    return [
        {"name": f"what each party receives is clipped: ||v|| <= V = {V:.4g}"
                 + (f", |v_i| <= {V_inf:.4g}" if relation == "record" else ""),
         "status": "enforced", "detail": "clip_share_input in party_step, every round"},
        {"name": "rows of every party block have norm <= 1", "status": "enforced",
         "detail": "rows clipped at the party (setup_party)"},
        {"name": "ridge x-step, l2 penalty, lambda > 0, no damping, no projection", "status": "checked",
         "detail": "the sensitivity bound covers the map (party data, everything received) -> message"},
        {"name": f"relation: {relation_description}", "status": "stated",
         "detail": "sensitivity proved in dpadmm.privacy.mechanisms; checked against worst-case neighbours "
                   "in tests/unit/test_vertical_privacy.py"},
    ]


def vertical_run_report(ledger: PrivacyLedger, *, feature_private: bool, label_private: bool, mode: str | None,
                        delta: float, accountant: str, rounds: int, assumptions, notes, mechanism: str,
                        relation: str, noise_source: str) -> PrivacyReport:
    """The privacy report of one ADMM-sharing fit (either side private): :func:`hu_report` over its ledger, the
    threat model of the sides it protects and the noise source stamped. ``mode``: the feature side's budget
    (``"iteration_epsilon"`` makes δ per iteration, so the run's δ is (T + 1)·δ)."""
    run_delta = (rounds + 1) * delta if mode == "iteration_epsilon" else delta
    report = hu_report(ledger, delta=run_delta, accountant=accountant, rounds=rounds,
                       paper_delta_iter=delta if mode == "iteration_epsilon" else None,
                       assumptions=assumptions, notes=notes, mechanism=mechanism if feature_private else None,
                       relation=relation, label_delta=delta if label_private else None)
    threat = ("vertical-feature" if feature_private and not label_private else
              "vertical-label" if not feature_private else
              THREAT_MODELS["vertical-feature"] + " || label side: " + THREAT_MODELS["vertical-label"])
    return finish(report, threat_model=threat, noise_source=noise_source)
