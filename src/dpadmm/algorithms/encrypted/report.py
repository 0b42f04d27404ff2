"""The privacy of a run of the encrypted protocol (:mod:`.protocol`): each side's ε from the run's Gaussian events.

Features: every non-label party's releases (the backward D̂ᵀĝ and, with ``forward="encrypted"``, the Aᵀs sums,
two per round) composed by dp-accounting's PLD at δ, the worst party's ε the headline — with the clear forward pass
the label party sees every training row's score sum, so the features are not protected at all (ε = ∞, the
backward ε kept beside it). Labels (``label_mechanism="rr"``, the default): the label party's one randomized response
on its training labels, pure ε (its ``PureDPRelease``; one release, basic composition), against any other party with
no premise; (``"gaussian"``) its Gaussian on every block's gradient, composed by PLD, against non-label parties that
compute D̂ᵀĝ honestly (the premise is named in the note).
"""

from __future__ import annotations

import math

from ...privacy.accountants import gaussian_epsilon
from ...privacy.events import PureDPRelease
from ...privacy.mechanisms import flip_probability
from ...privacy.policy import PREMISES

FORWARD_NOT_PROTECTED = ("features: NOT differentially private against the label party: the forward pass reveals each "
                         "training row's score sum with weights it knows (see dpadmm.algorithms.encrypted.protocol); "
                         "the epsilon given covers the backward releases only")


FORWARD_ENCRYPTED = ("features: record-level DP (two Gaussian releases per round, one more per peer with three or "
                     "more parties, PLD) {against}: {premises}; a party with private work serves the run only if its "
                     "operator accepted {names} (party serve --accept-premise); "
                     "the held-out calibration rows are scored as new records (their logits are not covered); "
                     "the label party's own columns are covered against a non-label party whose Paillier modulus n "
                     "is a product of two large primes (premise: gcd(n, phi(n)) = 1, not verifiable without the key "
                     "holder's proof; checked: >= 2048 bits, odd, no prime factor below 2^16, not a perfect power; "
                     "the key's h_s is never used: every re-randomisation is by the masker's own n-th residue, "
                     "tests/redteam/test_encrypted_key_structure.py)")


def feature_premises(parties: int) -> list[str]:
    """The premises (names of :data:`dpadmm.privacy.policy.PREMISES`) of the feature guarantee with ``parties``
    non-label parties (:func:`dpadmm.algorithms.encrypted.policy.premises`)."""
    return ["honest-label-party"] + (["honest-peers"] if parties > 1 else [])


def against(parties: int) -> str:
    """The adversary the feature ε is stated against, e.g. "against an honest-but-curious label party"."""
    return " and ".join(PREMISES[n].split(" (")[0] for n in feature_premises(parties)).replace(
        " and against ", " and ")


OWN_MODEL = ("the label party's own model (its columns, exact labels) and the final combination stay with the label "
             "party (post-processing there, nothing sent: algorithms.encrypted.combine); predictions it publishes "
             "from them are not covered on the label side")


LABELS_RR = ("labels: randomized response on each training label, once, at the label party (flipped with probability "
             "1/(1 + e^epsilon)); it uses only those labels, so whatever any other party computes on what it receives "
             "is post-processing of that release; adversary: any other party (or all of them, colluding), no premise "
             "on what they compute; neighbouring: one training label changes")

LABELS_GAUSSIAN = ("labels: Gaussian on every block's gradient the label party decrypts, premise: every non-label "
                   "party returns D-hat^T g on its clipped block (a party returning another linear map of the encrypted "
                   "residuals, e.g. a packed one, reads the labels: no guarantee against it); neighbouring: one "
                   "training label changes")


def _labels(pure, lab: dict, d: float, label_sensitivity: float, combination) -> dict:
    """The label side: randomized response (``pure``), the Gaussian (``lab``: ε per party), or neither."""
    own = f"; {OWN_MODEL}" if combination else ""
    if pure and lab:  # both mechanisms in one run: not a combination the protocol makes
        return {"epsilon": math.inf, "delta": d, "relation": "label", "note": "mixed label mechanisms: not accounted"}
    if pure:
        eps = float(sum(e.epsilon for e in pure))
        return {"epsilon": eps, "delta": 0.0, "relation": "label", "mechanism": "randomized response",
                "flip_probability": flip_probability(eps) if len(pure) == 1 else None,
                "accountant": "pure epsilon (basic composition)", "releases": len(pure), "premise": None,
                "note": LABELS_RR + own}
    if lab:
        return {"epsilon": max(lab.values()), "delta": d, "relation": "label", "mechanism": "gaussian",
                "accountant": "dp-accounting PLD", "premise": "every non-label party computes its gradient honestly",
                "note": f"{LABELS_GAUSSIAN}; sensitivity {label_sensitivity:.4g} per round{own}"}
    return {"epsilon": math.inf, "delta": d, "relation": "label", "note": "labels not protected"}


def encrypted_report(events, *, delta: float, forward: str, label_sensitivity: float, rounds: int,
                     combination: str | None = None, parties: int = 1) -> dict:
    """Both sides' guarantee of one run from its events (the parties' and the label party's Gaussian releases).
    ``combination``: what the label party kept at the end (``"stacked"`` or ``"own model"``: its own model enters,
    :data:`OWN_MODEL`; ``None``: the joint model)."""
    d = float(delta)
    by_party: dict[tuple, list] = {}
    pure = [e for e in events if isinstance(e, PureDPRelease)]
    for e in events:
        if not isinstance(e, PureDPRelease):
            by_party.setdefault((e.party, e.relation.key), []).append(e.noise_multiplier)
    feat = {p: gaussian_epsilon(z, d) for (p, rel), z in by_party.items() if rel != "label"}
    lab = {p: gaussian_epsilon(z, d) for (p, rel), z in by_party.items() if rel == "label"}
    if forward == "encrypted":
        names = feature_premises(parties)
        note = FORWARD_ENCRYPTED.format(against=against(parties), names=" and ".join(repr(n) for n in names),
                                        premises="; ".join(PREMISES[n][PREMISES[n].find("(") + 1:-1] for n in names))
        features = {"epsilon": max(feat.values()) if feat else math.inf, "delta": d, "relation": "record_replace",
                    "against": against(parties), "premises": names,
                    "note": note if feat else "features not protected (no epsilon)"}
    else:
        features = {"epsilon": math.inf, "backward_epsilon": feat or None, "delta": d, "note": FORWARD_NOT_PROTECTED}
    return {"features": features, "forward": forward,
            "labels": _labels(pure, lab, d, label_sensitivity, combination),
            "combination": combination or "joint", "accountant": "dp-accounting PLD", "rounds": int(rounds)}


__all__ = ["FORWARD_ENCRYPTED", "FORWARD_NOT_PROTECTED", "LABELS_GAUSSIAN", "LABELS_RR", "OWN_MODEL", "against", "encrypted_report",
           "feature_premises"]
