"""Each protocol's party-side policy hooks: which Setup fields are the party's, and the price of a run.

Every algorithm's ``PROTOCOL`` names one :class:`~dpadmm.protocol.PolicyHooks` from here. A party
(``dpadmm party serve``) calls, in this order, before it releases anything:

- ``prepare(args, policy)``: impose the party's own values on the coordinator's setup arguments
  where the party can (e.g. consensus rows normalised to ‖x‖ ≤ 1 when the party reads its file);
- ``check(cfg, args, policy, party)``: after its own setup, compare every privacy-relevant field of
  the configuration with its :class:`~dpadmm.privacy.policy.PartyPolicy`; raise a refusal naming the
  field. Checks look at *parameters* only (never at the party's data), so a refusal reveals nothing
  about the data;
- ``price(cfg, rounds)``: what ``rounds`` rounds of this configuration release at most
  (:class:`~dpadmm.privacy.policy.RunPrice`), computed by the party from the checked configuration
  with the same formulas its step uses.

The per-protocol tables in docs/algorithms.md ("Who chooses what") are generated from ``party`` and
``coordinator`` below: the first maps each field the party fixes or checks to its rule, the second
each field the coordinator chooses to the reason it cannot weaken the party's guarantee.
"""

from __future__ import annotations

import math

import numpy as np

from ..privacy.policy import PartyPolicy, PolicyRefusal, RunPrice, check_noise_multiplier, refuse
from ..protocol import PolicyHooks, PartyData
from .consensus.policy import CONSENSUS  # noqa: F401  (moved to algorithms/consensus/policy.py; kept for compatibility)
from .vertical.policy import VERTICAL  # noqa: F401  (moved to algorithms/vertical/policy.py; kept for compatibility)


def _finite_positive(party, what, v, allow_zero=False):
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise refuse(party, what, v, "a finite positive number") from None
    if not (math.isfinite(x) and (x >= 0 if allow_zero else x > 0)):
        raise refuse(party, what, v, "a finite " + ("non-negative" if allow_zero else "positive") + " number")
    return x


#: public standardisation scales (functional score_scale, y_scale) a private party accepts: beyond them the
#: standardised values leave the float range in which clipping and noise keep their relative precision
SCALE_RANGE = (1e-100, 1e100)


def _not_private(party, policy: PartyPolicy, how: str):
    if policy.private_work:
        raise refuse(party, "the run's privacy", how, "a private run (its operator started it with a budget or "
                     "--private-only)", "un-noised releases have ε = ∞")


# ----------------------------------------------------------------------------- functional quantile [Zhou]
def _functional_check(cfg, args, policy: PartyPolicy, party: str) -> None:
    nms = np.asarray(cfg.settings.noise_multiplier, dtype=float)
    if not np.any(nms > 0):
        return _not_private(party, policy, "noise_multiplier=0")
    if not policy.private_work:
        return
    for v in nms:
        check_noise_multiplier(party, v, policy, "a setting's noise multiplier σ/Δ")
    clip = args[7] if len(args) > 7 else None
    if clip is None:
        raise refuse(party, "the score clip", None, "a clip radius c1 on the standardised scores [Zhou, Lemma 2]")
    clip = _finite_positive(party, "the score clip", clip)
    if policy.max_score_clip is not None and clip > policy.max_score_clip:
        raise refuse(party, "the score clip", clip, f"≤ {policy.max_score_clip:g} (max_score_clip)")
    if clip < policy.min_clip:  # c1 ≥ clip below: the floor holds for c1 too (REDTEAM_POLICY R5)
        raise refuse(party, "the score clip", clip, f"≥ {policy.min_clip:g} (min_clip)")
    lo, hi = SCALE_RANGE
    scale = np.asarray(args[4], dtype=float)
    if not (scale.size and np.all(np.isfinite(scale)) and np.all((scale >= lo) & (scale <= hi))):
        raise refuse(party, "the score scale", "a value outside [1e-100, 1e100] or non-finite",
                     "finite values in [1e-100, 1e100]", "standardised scores must stay in the float range the clip "
                     "works in")
    if not (math.isfinite(float(args[5])) and lo <= float(args[6]) <= hi):
        raise refuse(party, "the response's location and scale", (args[5], args[6]),
                     "a finite location and a scale in [1e-100, 1e100]")
    need = math.hypot(clip, 1.0) if cfg.fit_intercept else clip
    if not cfg.c1 >= need * (1 - 1e-12):
        raise refuse(party, "c1 of the sensitivity", cfg.c1, f"c1 ≥ {need:.6g}, the norm bound its clipped scores "
                     "have" + (" with the intercept column" if cfg.fit_intercept else ""))
    _finite_positive(party, "rho", cfg.rho)
    tau, lam = np.asarray(cfg.settings.tau, dtype=float), np.asarray(cfg.settings.lam, dtype=float)
    if not np.all((tau > 0) & (tau < 1)):  # |ψ| ≤ max(τ, 1 − τ) ≤ 1 is a premise of Δ = 2c1/(m(ρ + 1/η))
        raise refuse(party, "a quantile level tau", [float(t) for t in tau], "0 < τ < 1",
                     "the check loss's slopes τ and τ − 1 bound each score's influence")
    if not np.all(np.isfinite(lam) & (lam >= 0)):
        raise refuse(party, "the penalty weight lam", [float(v) for v in lam], "finite λ ≥ 0 (a convex local problem)")
    from .functional_quantile import sensitivity_premises

    bad = sensitivity_premises(cfg)  # and a convex penalty with l1_ratio ∈ [0, 1], … (REDTEAM_POLICY R4, R7)
    if bad:
        raise refuse(party, "the settings", "; ".join(bad), "what the sensitivity 2c1/(m(ρ+1/η)) is proved for")
    if not cfg.emit_events:
        raise refuse(party, "emit_events", False, "True (every release is accounted)")
    if cfg.local_step == "exact" and not cfg.newton_tol <= policy.max_newton_tol:
        raise refuse(party, "newton_tol", cfg.newton_tol, f"≤ {policy.max_newton_tol:g}",
                     "the exact step's bound is about the exact minimiser")


def _functional_price(cfg, rounds: int) -> RunPrice:
    price: dict[float, int] = {}
    for v in np.asarray(cfg.settings.noise_multiplier, dtype=float):
        if v > 0:
            price[float(v)] = price.get(float(v), 0) + int(rounds)  # one release per setting and round
    return RunPrice(price, 0.0, "record_replace")


FUNCTIONAL = PolicyHooks(
    party={
        "settings.noise_multiplier": "> 0 and ≥ the floor for every setting",
        "penalty, l1_ratio; settings.shift, eps_iter, delta_iter; step, local_step, c_w, c2, eta0":
            "the bound's other premises: a known convex penalty with l1_ratio ∈ [0, 1], a finite shift, eps_iter > 0, "
            "δ_iter ∈ (0, 1], known step rules, c_w, c2, η₀ finite > 0",
        "clip (score clip)": "required, finite, ≥ min_clip (default 1e-12), ≤ max_score_clip if set; applied with "
                             "underflow-free row norms",
        "score_scale, y_loc, y_scale": "finite; the scales in [1e-100, 1e100] (the float range the clip works in)",
        "c1": "≥ the clipped scores' norm bound (√(clip² + 1) with the intercept)",
        "settings.tau, settings.lam": "0 < τ < 1 (bounds each score's influence); λ ≥ 0",
        "emit_events, newton_tol": "True; ≤ max_newton_tol for the exact step",
        "rounds": "declared at Setup, priced against the budget",
    },
    coordinator={
        "basis, score_scale, y_loc, y_scale (within the party's range)": "public standardisation; the clip bounds "
                                                                         "the scores whatever they are",
        "rho (every round), c_w, c2, eta0, step, smooth": "enter the step and the sensitivity alike (within the "
                                                          "party's checks: ρ finite > 0 with ρ + 1/η > 0 every round)",
        "w (every round)": "public; the bound covers any hub value",
    },
    check=_functional_check, price=_functional_price)


# ----------------------------------------------------------------------------- functional pooled statistics
def _stats_prepare(args, policy: PartyPolicy):
    """The party's own floor on every round's curve clip: ``setup_stats``'s ``min_clip`` (after the name, the data,
    q and the three multipliers), whatever the coordinator sent there."""
    if not policy.private_work or len(args) < 5:
        return args
    head = list(args[:7])
    return head + [0.0] * (7 - len(head)) + [policy.min_clip] + list(args[8:9])  # then the declared one_shot


def _stats_multipliers(cfg) -> list[float]:
    """The worker's positive noise multipliers (statistics, DP-quantile counts, comparison)."""
    return [float(v) for v in (cfg.noise_multiplier, getattr(cfg, "quantile_multiplier", 0.0),
                               getattr(cfg, "compare_multiplier", 0.0)) if float(v) > 0]


def _stats_check(cfg, args, policy: PartyPolicy, party: str) -> None:
    if not cfg.noise_multiplier > 0:
        return _not_private(party, policy, "noise_multiplier=0")
    if policy.private_work:
        for z in _stats_multipliers(cfg):
            check_noise_multiplier(party, z, policy)


def _stats_price(cfg, rounds: int) -> RunPrice:
    """The ``rounds`` costliest releases the worker's stages can make: the comparison (once, at
    ``compare_multiplier``), the declared one-shot stages (``one_shot`` ≤ 3, at ``noise_multiplier``), the
    bisection counts (``QUANTILE_STEPS``, at ``quantile_multiplier``); rounds beyond them at the smallest
    multiplier. An honest run is priced exactly. Whatever the coordinator then asks, the ledger charges each
    release to a priced multiplier no larger than its own and refuses one that does not fit, so the price
    only decides what is refused, never what is undercharged. A stage whose multiplier is 0 is refused by
    the step in a private run."""
    from .functional_statistics import QUANTILE_STEPS

    caps = [(float(m), int(c)) for m, c in ((cfg.compare_multiplier, 1), (cfg.noise_multiplier, cfg.one_shot),
                                            (cfg.quantile_multiplier, QUANTILE_STEPS)) if float(m) > 0 and c > 0]
    caps.sort()  # the smallest multiplier first: the costliest release
    left, price = int(rounds), {}
    for m, c in caps:
        take = min(c, left)
        if take:
            price[m] = price.get(m, 0) + take
        left -= take
    if left > 0:
        m = min(_stats_multipliers(cfg) or [float(cfg.noise_multiplier)])
        price[m] = price.get(m, 0) + left
    return RunPrice(price, 0.0, "record_replace")


STATISTICS = PolicyHooks(
    party={
        "noise_multiplier, quantile_multiplier, compare_multiplier": "> 0 and ≥ the floor (the latter two may be 0: "
                                                                    "their stages are then refused)",
        "sensitivities (√2·parts, √10, (3/√2)c₂², 1 per quantile count)": "fixed by the party's code; enforced by its "
                                                                  "clips",
        "compare sensitivity 2κ·max(hi − p₀, p₀ − lo)/unit": "computed by the party from the model it receives; "
                                                            "enforced by clipping predictions to the band",
        "rounds (stages)": "declared at Setup, priced; a repeated stage is a release beyond the declaration",
        "one_shot": "declared at Setup (0–3 one-shot stages at noise_multiplier); the rounds are priced at the "
                    "costliest releases the stages can make, and a release the price does not cover is refused",
        "every round: curve_clip, y_range, projection, center": "curve_clip finite ≥ min_clip, y_range finite with "
                                                                "lo < hi, projection finite with PᵀP ≈ I, center "
                                                                "finite; a non-finite release is refused",
    },
    coordinator={
        "stage, curve_clip, y_range, projection, center, threshold, model (every round, within the checks)":
            "the party clips to them and scales the noise with the sensitivity they give",
    },
    prepare=_stats_prepare, check=_stats_check, price=_stats_price)


# ----------------------------------------------------------------------------- vertical experts (output perturbation)
#: the data key of a party's training file (``--data train=FILE``): the only file an experts fit reads training rows from
TRAIN_KEY = "train"


def _nested_party_data(obj) -> bool:
    if isinstance(obj, PartyData):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_nested_party_data(v) for v in obj)
    if isinstance(obj, dict):
        return any(_nested_party_data(v) for v in obj.values())
    return False


def _experts_training_rows(args, party: str):
    """Which rows are training rows is the party's, not the coordinator's: a fit reads its training rows from its own
    training file (``--data train=FILE``) only, and a scoring run (its model file, argument 7) checks the new records
    against the ids of that same file, read by the party itself — whatever the coordinator names as ``train``
    (otherwise it could name another file, or nothing, and have the training rows scored as "new" records)."""
    args = list(args)
    if len(args) < 2:
        return args
    # the shapes the checks below read: a reference (or an array) where a block goes, a mapping of them for the scoring
    # files; a reference nested elsewhere (e.g. the scoring files as a list of pairs) would pass around them
    if not isinstance(args[1], PartyData) and _nested_party_data(args[1]):
        raise refuse(party, "the training block", type(args[1]).__name__, "one reference to its training file")
    if len(args) > 2 and args[2] is not None and not (
            isinstance(args[2], dict) and all(isinstance(k, str) and (isinstance(v, PartyData) or not _nested_party_data(v))
                                              for k, v in args[2].items())):
        raise refuse(party, "the scoring argument", type(args[2]).__name__, "a mapping of keys to one reference each")
    if len(args) > 7 and isinstance(args[7], PartyData):  # a scoring run with the party's own model file
        args[1] = PartyData(TRAIN_KEY, {"ids_only": True})
    elif isinstance(args[1], PartyData) and args[1].key != TRAIN_KEY:
        raise refuse(party, "the training rows' file", args[1].key, f"its training file ({TRAIN_KEY!r})",
                     "a model fitted on another file would have its training rows scored later as new records")
    for key, ref in (args[2].items() if len(args) > 2 and isinstance(args[2], dict) else ()):
        # no row of the training file is scored, in the fit's subset or not: the rows outside it (e.g. outside the PSI
        # intersection) are records the party never shared, whose logits no ε covers
        if isinstance(ref, PartyData) and ref.key == TRAIN_KEY:
            raise PolicyRefusal(f"party {party!r} refused to score {key!r}: it is its training file ({TRAIN_KEY!r}), whose "
                                "rows are never scored (a training row's logit is not post-processing of the DP model; "
                                "a row outside the fit was never shared); score new records, in a file of their own "
                                "(--data new=FILE)")
    return args


def _experts_prepare(args, policy: PartyPolicy):
    """The row preparation is the party's (``normalize_vertical_rows``; off: rows only clipped at R), on every block it
    reads, training and new records alike: a coordinator asking for another is refused (both sides then state the
    preparation that was used). The training rows are the party's training file's (:func:`_experts_training_rows`),
    in every run."""
    party = str(args[0]) if args else "?"
    args = _experts_training_rows(args, party)
    if not policy.private_work:
        return args
    own = bool(policy.normalize_vertical_rows)

    def check(obj):
        if isinstance(obj, PartyData) and "n_features" in obj.params:  # a feature block (not ids only, not a model)
            asked = bool(obj.params.get("normalize", False))
            if asked != own:
                raise refuse(party, f"the preparation of {obj.key!r}",
                             "normalize-rows" if asked else "none", "normalize-rows" if own else
                             "none (rows clipped at R; its operator sets normalize_vertical_rows in its policy)",
                             "the party prepares its own rows; pass the matching --prepare")
            return obj
        if isinstance(obj, dict):
            return {k: check(v) for k, v in obj.items()}
        return obj

    return [check(a) for a in args]


def _experts_check(cfg, args, policy: PartyPolicy, party: str) -> None:
    R = _finite_positive(party, "the row clip R", cfg.R)
    if R < policy.min_clip:
        raise refuse(party, "the row clip R", R, f"≥ {policy.min_clip:g} (min_clip)")
    if policy.row_clip is not None and R != float(policy.row_clip):
        raise refuse(party, "the row clip R", R, f"R = {policy.row_clip:g} (its operator's row_clip)",
                     "the party clips its own rows at its own R")
    if cfg.model is not None:  # a scoring run with the party's own model file: nothing is fitted or released
        return
    if policy.scoring_server:  # its operator started it with a model file: its ledger is not the fit's (REDTEAM E7)
        raise PolicyRefusal(f"party {party!r} refused a fit: it was started with a model file (--data model=FILE) "
                            "to score with it; fit on the server whose --out holds the training file's ledger")
    _finite_positive(party, "the ridge lam", cfg.lam)  # raised to the public rule by the party (expert_lambda)
    _finite_positive(party, "the noise-norm rule", cfg.noise_norm)
    if cfg.noise_multiplier is None:
        return _not_private(party, policy, "noise_multiplier=None")
    if policy.private_work:
        z = check_noise_multiplier(party, cfg.noise_multiplier, policy)
    else:
        z = _finite_positive(party, "the noise multiplier σ/Δ", cfg.noise_multiplier)
    from . import vertical_experts as ve

    n, d = cfg.X.shape
    lam = ve.expert_lambda(n, d, R, z, float(cfg.lam), float(cfg.noise_norm))
    if not ve.public_range_ok(R, lam, ve.sensitivity(n, R, lam), z):  # public quantities only
        raise refuse(party, "the fit's public scale (R, λ used, Δ, σ)", (R, lam, ve.sensitivity(n, R, lam)),
                     f"R in [{ve.R_RANGE[0]:g}, {ve.R_RANGE[1]:g}] and λ, Δ, σ finite > 0",
                     "beyond, the solver's sums overflow or the noise underflows to 0")


def _experts_price(cfg, rounds: int) -> RunPrice:
    # one output-perturbed coefficient per run, whatever the rounds: a second fit is refused by the step; a scoring
    # run (its model file) releases nothing new: logits on new records are post-processing of the priced release
    if cfg.model is not None:
        return RunPrice({}, 0.0, "record_replace")
    return RunPrice({float(cfg.noise_multiplier): 1} if rounds >= 1 else {}, 0.0, "record_replace")


EXPERTS = PolicyHooks(
    party={
        "noise_multiplier": "> 0 and ≥ the floor (default 0.5); the run is priced at Setup as ONE Gaussian release "
                            "(record relation) against the party's budget",
        "row clip R": "finite, ≥ min_clip, ≤ 1e100; equal to the operator's row_clip if set; the party clips its rows "
                      "at R",
        "normalize (row preparation)": "the party's (normalize_vertical_rows) for its training and new-records blocks; "
                                       "a coordinator asking for another is refused",
        "ridge λ used": "max(λ sent, expert_lambda rule of public n, d, R, σ/Δ, 1e-10 R²); the sensitivity uses the λ "
                        "used",
        "labels (round 0)": "one ±1 per training row; a flip probability in [0, ½)",
        "fits per run": "one (a second is a second release: refused); none in a scoring run (its model file), which "
                        "is priced at nothing; none at all on a party started with a model file (a scoring server)",
        "scoring rows": "new records only: a scoring file sharing an id (as the files write it) with the training rows "
                        "is refused, and so is its training file itself (--data train=FILE, the only file it fits on); "
                        "a scoring run checks against that file's ids, read by the party",
    },
    coordinator={
        "lam, noise_norm (finite > 0)": "enter λ used and Δ alike (σ/Δ fixed); a tiny λ is raised to the rule; λ used, "
                                        "Δ and σ must be finite > 0",
        "ids (or PSI), the scoring keys": "which rows; training rows are never scored",
        "labels, flip probability": "any ±1 labels: the loss is 1-Lipschitz in the score for every label",
    },
    prepare=_experts_prepare, check=_experts_check, price=_experts_price)
