"""The encrypted vertical protocol's party-side policy hooks (``PROTOCOL.policy``): which Setup fields are the
party's, the check, and the price. Same contract as every folder's ``policy.py``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...privacy.policy import (
    PartyPolicy,
    PolicyRefusal,
    RunPrice,
    check_noise_multiplier,
    premise_refusal,
    refuse,
)
from ...protocol import PartyData, PolicyHooks


def _positive(party: str, what: str, v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise refuse(party, what, v, "a finite positive number") from None
    if not (math.isfinite(x) and x > 0):
        raise refuse(party, what, v, "a finite positive number")
    return x


def _ids(ref) -> pd.Index | None:
    ids = ref.params.get("ids") if isinstance(ref, PartyData) else None
    return None if ids is None else pd.Index(np.asarray(ids).ravel())


def _scored_training_rows(args, party: str) -> None:
    """A private party scores (``logit``) only rows that are not its training rows (a training row's score is a
    function of that protected row, outside every ε): a new-records reference to its training file (the same key)
    must name ids none of which is a training id — compared as values (the file's 1 and 1.0) or as text — and a
    PSI-aligned fit (training ids not known before the intersection) scores no row of its training file. Arrays a
    simulation's coordinator sends are checked by memory (``party._training_rows``)."""
    train, score = (list(args) + [None, None, None])[1:3]
    if not isinstance(train, PartyData) or not isinstance(score, dict):
        return
    tr = _ids(train)
    for key, ref in score.items():
        if not isinstance(ref, PartyData) or ref.key != train.key:
            continue
        ids = _ids(ref)
        if tr is None or ids is None:
            held = "rows of its training file, which its PSI-aligned fit may hold"
        else:
            common = int(np.sum(ids.isin(tr) | ids.astype(str).isin(tr.astype(str))))
            held = f"{common} of its training rows" if common else ""
        if held:
            raise PolicyRefusal(f"party {party!r} refused the run before releasing anything: its new-records block "
                                f"{key!r} names {held} (file {train.key!r}), whose scores no ε covers; score rows "
                                "that are not in the fit (a held-out split of other ids, or a file of their own)")


def prepare(args, policy: PartyPolicy):
    """The row preparation is the party's (``normalize_vertical_rows``), imposed on the block it reads; a private
    party refuses to score its training rows (:func:`_scored_training_rows`)."""
    if not policy.private_work:
        return args
    _scored_training_rows(args, str((list(args) or ["?"])[0]))
    own = bool(policy.normalize_vertical_rows)
    return [PartyData(a.key, dict(a.params, normalize=own), a.shape) if isinstance(a, PartyData) else a for a in args]


def check(cfg, args, policy: PartyPolicy, party: str) -> None:
    R = _positive(party, "the row clip R", cfg.R)
    if R < policy.min_clip:
        raise refuse(party, "the row clip R", R, f"≥ {policy.min_clip:g} (min_clip)")
    if policy.row_clip is not None and R != float(policy.row_clip):
        raise refuse(party, "the row clip R", R, f"R = {policy.row_clip:g} (its operator's row_clip)")
    _positive(party, "the ridge lam", cfg.lam)
    _positive(party, "the step size", cfg.step)
    if policy.max_rounds is not None and cfg.rounds > policy.max_rounds:
        raise refuse(party, "the rounds", cfg.rounds, f"≤ {policy.max_rounds} (max_rounds)")
    if cfg.noise_multiplier is None:
        if policy.private_work:
            raise refuse(party, "the run's privacy", "noise_multiplier=None", "a private run",
                         "un-noised releases have ε = ∞")
        return
    if policy.private_work:
        if cfg.forward != "encrypted":
            raise refuse(party, "the forward pass", cfg.forward, "'encrypted' in private work",
                         "with forward='clear' the label party reads every training row's score: ε = ∞ for the features")
        for what, v in (("the weight bound W", cfg.W), ("the label party's weight bound W0", cfg.label_W),
                        ("the label party's row clip R0", cfg.label_R)):
            _positive(party, what, v)
        check_noise_multiplier(party, cfg.noise_multiplier, policy)
        missing = [n for n in premises(cfg) if n not in policy.accept_premises]
        if missing:
            raise premise_refusal(party, missing)
    else:
        _positive(party, "the noise multiplier σ/Δ", cfg.noise_multiplier)


def premises(cfg) -> list[str]:
    """The trust premises (:data:`dpadmm.privacy.policy.PREMISES`) the party's feature guarantee rests on: an
    honest-but-curious label party (it chooses the residuals and its block under encryption), and with M ≥ 2
    non-label parties honest-but-curious peers (each chooses the linear map it applies to this party's encrypted
    scores). A party with private work serves the run only if its operator accepted every one (``check``)."""
    return ["honest-label-party"] + (["honest-peers"] if getattr(cfg, "peers", None) else [])


def price(cfg, rounds: int) -> RunPrice:
    """Per Backward one Gaussian release (record relation; Δ = 2R·G) — two with forward='encrypted' (D̂ᵀĝ and the
    cross sums A₀ᵀs), plus one per peer with M ≥ 2 parties (the peer's column sums of its scores, opened at Open)
    — for the declared ``cfg.rounds``, and no more than the backend rounds allow (Start, then Forward/Backward
    pairs — Forward/Backward/Open triples with peers — then the final Forward)."""
    if cfg.noise_multiplier is None:
        return RunPrice({}, 0.0, "record_replace")
    k = min(int(cfg.rounds), max((int(rounds) - 1) // cfg.steps_per_round, 0)) * cfg.releases_per_round
    return RunPrice({float(cfg.noise_multiplier): k} if k else {}, 0.0, "record_replace")


ENCRYPTED = PolicyHooks(
    party={
        "noise_multiplier": "> 0 and ≥ the floor (default 0.5); priced at Setup as `rounds` Gaussian releases "
                            "(two per round with forward='encrypted'; record relation) against the party's budget",
        "forward": "'encrypted' in private work (with 'clear' the label party reads every training row's score sum)",
        "peers (R_k, W_k, d_k)": "forward='encrypted' with M ≥ 2 parties: finite > 0; G and each peer's Δ_Z = 2R_k·R·W "
                                 "use them; the party decrypts only d_k values of peer k's column sums",
        "W, label_W, label_R": "finite > 0 (forward='encrypted': the sensitivities 2R·G and 2√2·R0·R·W use them; the "
                               "party projects its own weights on ‖w‖ ≤ W)",
        "row clip R": "finite, ≥ min_clip; equal to the operator's row_clip if set; the party clips its rows at R",
        "rounds": "declared at Setup; a Backward beyond them is refused",
        "normalize (row preparation)": "the party's (normalize_vertical_rows), imposed on the block it reads",
        "the label party's public key": "Okamoto–Uchiyama with a 2048-bit modulus (refused otherwise)",
        "its own key (forward='encrypted')": "Paillier with a 2048-bit public modulus n, made by the party: every mask "
                                             "on what it decrypts is uniform on Z_n, so it hides the value whatever "
                                             "was encrypted (peers' keys: the same, checked)",
        "round order": "Start, Forward/Backward alternating, final Forward; anything else refused",
        "accept_premises": "private work: must name 'honest-label-party' (and 'honest-peers' with M ≥ 2 parties), the "
                           "premises of the feature guarantee; refused otherwise (--accept-premise NAME)",
    },
    coordinator={
        "lam, step, momentum (finite > 0)": "the party's own update of its own weights; no effect on σ/Δ",
        "cross sums (every round, forward='encrypted')": "the party decrypts only the declared label_width values, masked "
                                                         "by the label party; Δ assumes its honest column sums (premise "
                                                         "honest-label-party, accepted by the operator)",
        "residuals (every round)": "encrypted: the party cannot check them; Δ = 2R·G assumes |residual| ≤ G "
                                   "(premise honest-label-party, accepted by the operator; see the threat model)",
        "peers' column sums of its scores (M ≥ 2)": "Δ_Z assumes each peer uses its clipped block (premise "
                                                   "honest-peers, accepted by the operator)",
        "peers' mask keys": "only decide the masks; substituted keys let the coordinator unmask (threat model)",
    },
    prepare=prepare, check=check, price=price)


__all__ = ["ENCRYPTED", "PolicyRefusal", "premises"]
