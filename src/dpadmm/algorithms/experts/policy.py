"""Vertical experts' party-side policy hooks (``PROTOCOL.policy``): which Setup fields are the feature party's (its
training file, its row preparation, its row clip), how it checks them from public quantities, and the price of a
run (one output-perturbed release).
"""

from __future__ import annotations

from ...privacy.policy import (
    PartyPolicy, PolicyRefusal, RunPrice, check_noise_multiplier, finite_positive, not_private, refuse,
)
from ...protocol.spec import PartyData, PolicyHooks, setup_view
from . import regression as xr
from .messages import Setup
from .model import R_RANGE, expert_lambda, public_range_ok, sensitivity


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
    training file (``--data train=FILE``) only, and a scoring run (its model file) checks the new records against the
    ids of that same file, read by the party itself — whatever the coordinator names as ``train`` (otherwise it could
    name another file, or nothing, and have the training rows scored as "new" records)."""
    if len(args) < 2:
        return list(args)
    setup = setup_view(Setup, args)
    # the shapes the checks below read: a reference (or an array) where a block goes, a mapping of them for the scoring
    # files; a reference nested elsewhere (e.g. the scoring files as a list of pairs) would pass around them
    if not isinstance(setup.train, PartyData) and _nested_party_data(setup.train):
        raise refuse(party, "the training block", type(setup.train).__name__, "one reference to its training file")
    if setup.score is not None and not (
            isinstance(setup.score, dict) and all(isinstance(k, str) and (isinstance(v, PartyData) or not _nested_party_data(v))
                                                  for k, v in setup.score.items())):
        raise refuse(party, "the scoring argument", type(setup.score).__name__, "a mapping of keys to one reference each")
    if isinstance(setup.model, PartyData):  # a scoring run with the party's own model file
        setup = setup._replace(train=PartyData(TRAIN_KEY, {"ids_only": True}))
    elif isinstance(setup.train, PartyData) and setup.train.key != TRAIN_KEY:
        raise refuse(party, "the training rows' file", setup.train.key, f"its training file ({TRAIN_KEY!r})",
                     "a model fitted on another file would have its training rows scored later as new records")
    for key, ref in (setup.score.items() if isinstance(setup.score, dict) else ()):
        # no row of the training file is scored, in the fit's subset or not: the rows outside it (e.g. outside the PSI
        # intersection) are records the party never shared, whose logits no ε covers
        if isinstance(ref, PartyData) and ref.key == TRAIN_KEY:
            raise PolicyRefusal(f"party {party!r} refused to score {key!r}: it is its training file ({TRAIN_KEY!r}), whose "
                                "rows are never scored (a training row's logit is not post-processing of the DP model; "
                                "a row outside the fit was never shared); score new records, in a file of their own "
                                "(--data new=FILE)")
    return list(setup)


def _experts_prepare(args, policy: PartyPolicy):
    """The row preparation is the party's (``normalize_vertical_rows``; off: rows only clipped at R), on every block it
    reads, training and new records alike: a coordinator asking for another is refused (both sides then state the
    preparation that was used). The training rows are the party's training file's (:func:`_experts_training_rows`),
    in every run."""
    party = str(dict(zip(Setup._fields, args)).get("name", "?"))  # the name even in a list too short for a Setup
    args = _experts_training_rows(args, party)
    args = _declared_bounds(args, policy)
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


def _declared_bounds(args, policy: PartyPolicy):
    """The party's column bounds are its operator's (``column_bounds``; ``party serve --bounds FILE``): set on every
    feature block it reads, with the row clip R of the Setup as the radius; bounds a coordinator put in a reference
    are dropped (the party's preparation is never the coordinator's)."""
    try:
        R = float(dict(zip(Setup._fields, args)).get("R", 1.0))
    except (TypeError, ValueError):
        R = 1.0  # refused by the check (a finite positive R) before anything is read with it
    own = policy.column_bounds

    def fix(obj):
        if isinstance(obj, PartyData) and "n_features" in obj.params:
            params = {k: v for k, v in obj.params.items() if k not in ("bounds", "bounds_radius")}
            if own is not None:
                params.update(bounds=[list(own[0]), list(own[1])], bounds_radius=R)
            return PartyData(obj.key, params, obj.shape)
        if isinstance(obj, dict):
            return {k: fix(v) for k, v in obj.items()}
        return obj

    return [fix(a) for a in args]


def _experts_check(cfg, args, policy: PartyPolicy, party: str) -> None:
    R = finite_positive(party, "the row clip R", cfg.R)
    if R < policy.min_clip:
        raise refuse(party, "the row clip R", R, f"≥ {policy.min_clip:g} (min_clip)")
    if policy.row_clip is not None and R != float(policy.row_clip):
        raise refuse(party, "the row clip R", R, f"R = {policy.row_clip:g} (its operator's row_clip)",
                     "the party clips its own rows at its own R")
    if cfg.model is not None:  # a scoring run with the party's own model file: nothing is fitted or released
        return
    if cfg.bounds is not None or cfg.range_noise_multiplier is not None:  # a simulation's preparation, not priced here
        raise refuse(party, "column bounds sent by the coordinator", cfg.bounds, "none (its operator's: --bounds FILE)",
                     "the party's preparation is never the coordinator's")
    if policy.scoring_server:  # its operator started it with a model file: its ledger is not the fit's (REDTEAM E7)
        raise PolicyRefusal(f"party {party!r} refused a fit: it was started with a model file (--data model=FILE) "
                            "to score with it; fit on the server whose --out holds the training file's ledger")
    finite_positive(party, "the ridge lam", cfg.lam)  # raised to the public rule by the party (expert_lambda)
    finite_positive(party, "the noise-norm rule", cfg.noise_norm)
    if cfg.noise_multiplier is None:
        return not_private(party, policy, "noise_multiplier=None")
    if policy.private_work:
        z = check_noise_multiplier(party, cfg.noise_multiplier, policy)
    else:
        z = finite_positive(party, "the noise multiplier σ/Δ", cfg.noise_multiplier)
    n, d = cfg.X.shape
    if cfg.loss == "logistic":
        lam = expert_lambda(n, d, R, z, float(cfg.lam), float(cfg.noise_norm))
        Delta = sensitivity(n, R, lam)
    else:  # the regression target (setup_party checked the loss and κ)
        lam = xr.expert_lambda(n, d, R, z, float(cfg.lam), float(cfg.noise_norm), cfg.loss, float(cfg.huber_kappa))
        Delta = xr.sensitivity(n, R, lam, cfg.loss, float(cfg.huber_kappa)) if 0 < lam < float("inf") else 0.0
    ok = (public_range_ok(R, lam, Delta, z) if cfg.loss == "logistic" else  # public quantities only
          xr.scale_ok(n, R, lam, Delta, z, cfg.loss, float(cfg.huber_kappa)))
    if not ok:
        raise refuse(party, "the fit's public scale (R, λ used, Δ, σ)", (R, lam, Delta),
                     f"R in [{R_RANGE[0]:g}, {R_RANGE[1]:g}] , λ finite > 0, Δ, σ and the solver's tolerance finite "
                     "≥ 1e-280",
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
        "column bounds": "the operator's (column_bounds, party serve --bounds FILE): every block it reads is mapped "
                         "to [-1, 1] by them and scaled by R/sqrt(d); bounds a coordinator sends are dropped",
        "ridge λ used": "max(λ sent, expert_lambda rule of public n, d, R, σ/Δ, 1e-10 R²; 1e-5 R² for the Huber "
                        "loss); the sensitivity uses the λ used",
        "labels (round 0)": "one ±1 per training row; a flip probability in [0, ½); the regression target (loss "
                            "squared or huber): one finite number per row, clipped by the party to [-1, 1], no flip "
                            "probability; the multiclass target: one row of K >= 2 targets per row, projected by the "
                            "party onto the unit ball",
        "loss": "logistic (binary), squared or huber (regression; κ finite > 0), multiclass (one multi-output "
                "squared-loss release, .multiclass): the sensitivity is the loss's (.regression), computed by the party",
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
