"""Label inference by a passive party in vertical ADMM sharing, measured with canaries.

Threat (label side): a passive party sees every N-vector the coordinator sends it (in ADMM
[Hu, Alg. 1]: the residual ``s̃ − z`` and the dual ``y``; in the label-private protocol: the noisy
gradient ``g̃``). At an ADMM fixed point ``y_i = ℓ'(z_i, Y_i)``, whose sign is −Y_i for the logistic
loss, so in the published protocol every party reads every label.

Canaries make the measurement about *leakage*, not generalisation: ``n_canaries`` random training
records get labels drawn independently of their features, so nothing but the transcript can
predict them (a model that generalises gets AUC 1/2 on them). Attacks, each on every received
vector of every round (the family label-inference libraries such as VFLAIR implement):

- ``sign``: score ``±v_i`` (both signs: the adversary may pick after the fact — a best-of, which
  only makes the attack stronger);
- ``norm``: score ``±|v_i|``;
- ``classifier``: logistic regression on all received vectors (every round, as features per record),
  trained on ``n_known`` records whose labels the attacker knows (never canaries), scored on the rest.

Per round: AUC and accuracy on the canaries and on all records. Under (ε, δ) label DP no test can
separate a label from its flip much better than ``e^ε / (1 + e^ε)`` (the accuracy of the optimal
test between two ε-indistinguishable hypotheses; δ adds slack), printed beside the results.
Vectorised: one AUC per vector from ranks (no loops over samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import rankdata
from ..estimators import VerticalLogisticRegression


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC AUC of ``scores`` for the boolean ``positive`` (Mann–Whitney from average ranks; ties count ½)."""
    pos = np.asarray(positive, dtype=bool)
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    r = rankdata(scores)
    return float((r[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def best_accuracy(scores: np.ndarray, positive: np.ndarray, threshold: float = 0.0) -> float:
    """Accuracy of ``score > threshold`` predicting ``positive``, or of its flip, whichever is higher."""
    acc = float(np.mean((scores > threshold) == np.asarray(positive, dtype=bool)))
    return max(acc, 1.0 - acc)


def dp_bound(epsilon: float) -> float:
    """``e^ε / (1 + e^ε)``: what ε-label-DP allows a test of one label against its flip."""
    if not math.isfinite(epsilon):
        return 1.0
    return 1.0 / (1.0 + math.exp(-epsilon))


@dataclass
class LabelAttackResult:
    """Per-round results and the best over everything (the number that must stay under the bound)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    best_canary_auc: float = 0.5
    best_canary_accuracy: float = 0.5
    best_all_auc: float = 0.5
    best: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "best_canary_auc": self.best_canary_auc,
                "best_canary_accuracy": self.best_canary_accuracy, "best_all_auc": self.best_all_auc,
                "best": self.best}


class ReceivedRecorder:
    """A transcript callable keeping every protocol N-vector the coordinator sends ``party``."""

    def __init__(self, party: str = "party2"):
        self.party = party
        self.vectors: list[tuple[int, str, np.ndarray]] = []

    def __call__(self, round_, sender, receiver, message, kind):
        if receiver != self.party or kind != "protocol":
            return
        for name in ("residual", "dual"):
            v = getattr(message, name, None)
            if isinstance(v, np.ndarray) and v.ndim == 1 and np.any(v != 0):
                self.vectors.append((int(round_), name, np.asarray(v, dtype=np.float64).copy()))


def attack(vectors, labels: np.ndarray, canaries: np.ndarray, *, n_known: int = 500,
           rng: np.random.Generator) -> LabelAttackResult:
    """Run every attack on ``vectors`` (``(round, name, N-vector)``) against ``labels`` (±1).

    ``canaries``: indices of the canary records. The classifier is trained on ``n_known`` non-canary
    records (labels the attacker knows) using every received vector up to and including the round.
    """
    from sklearn.linear_model import LogisticRegression

    y = np.asarray(labels) > 0
    n = y.shape[0]
    is_canary = np.zeros(n, dtype=bool)
    is_canary[canaries] = True
    pool = np.flatnonzero(~is_canary)
    known = rng.choice(pool, size=min(n_known, pool.size), replace=False)
    unknown = np.setdiff1d(np.arange(n), known)
    res = LabelAttackResult()
    rounds = sorted({r for r, _, _ in vectors})
    stack: list[np.ndarray] = []
    for r in rounds:
        for rr, name, v in vectors:
            if rr != r:
                continue
            stack.append(v)
            for kind, score, thr in (("sign", v, 0.0), ("norm", np.abs(v), float(np.median(np.abs(v))))):
                a_c, a_all = auc(score[canaries], y[canaries]), auc(score, y)
                # either sign: the adversary picks the orientation (max(AUC, 1 − AUC))
                res.rows.append({"round": r, "vector": name, "attack": kind,
                                 "canary_auc": max(a_c, 1.0 - a_c), "all_auc": max(a_all, 1.0 - a_all),
                                 "canary_accuracy": best_accuracy(score[canaries], y[canaries], thr),
                                 "all_accuracy": best_accuracy(score, y, thr)})
        F = np.column_stack(stack)
        F = (F - F[known].mean(axis=0)) / (F[known].std(axis=0) + 1e-12)
        clf = LogisticRegression(C=1.0, max_iter=2000).fit(F[known], y[known])
        p = clf.decision_function(F)
        ev_c = canaries
        a_c, a_all = auc(p[ev_c], y[ev_c]), auc(p[unknown], y[unknown])
        res.rows.append({"round": r, "vector": "all received so far", "attack": "classifier",
                         "canary_auc": a_c, "all_auc": a_all,
                         "canary_accuracy": float(np.mean((p[ev_c] > 0) == y[ev_c])),
                         "all_accuracy": float(np.mean((p[unknown] > 0) == y[unknown]))})
    if res.rows:
        top = max(res.rows, key=lambda row: row["canary_auc"])
        res.best = dict(top)
        res.best_canary_auc = top["canary_auc"]
        res.best_canary_accuracy = max(row["canary_accuracy"] for row in res.rows)
        res.best_all_auc = max(row["all_auc"] for row in res.rows)
    return res


def with_canaries(y: np.ndarray, n_canaries: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A copy of the ±1 labels in which ``n_canaries`` random records carry fair-coin labels, and their indices."""
    y = np.asarray(y, dtype=np.float64).copy()
    idx = rng.choice(y.shape[0], size=min(n_canaries, y.shape[0]), replace=False)
    y[idx] = np.where(rng.random(idx.size) < 0.5, 1.0, -1.0)
    return y, np.sort(idx)


def run_label_attack(blocks, y, *, label_epsilon: float | None, delta: float = 1e-5, n_canaries: int = 2000,
                     n_known: int = 500, seed: int | None = 0, estimator_kwargs=None,
                     party: str = "party2") -> tuple[LabelAttackResult, dict]:
    """Fit with canaries (label-private at ``label_epsilon``, or the published protocol if None), record
    what ``party`` receives, attack it. Returns the result and the fit's facts (ε, rounds)."""
    rng = np.random.default_rng(seed)
    y_c, canaries = with_canaries(y, n_canaries, rng)
    rec = ReceivedRecorder(party)
    kw = dict(estimator_kwargs or {})
    model = VerticalLogisticRegression(label_epsilon=label_epsilon, delta=delta, random_state=seed, **kw)
    model.fit(blocks, y_c, transcript=rec)
    res = attack(rec.vectors, y_c, canaries, n_known=n_known, rng=rng)
    lab = model.privacy_.label if model.privacy_ is not None else None
    eps = lab["epsilon"] if lab and lab.get("protected") else math.inf
    return res, {"label_epsilon": eps, "delta": delta if lab and lab.get("protected") else None,
                 "rounds": model.n_iter_, "vectors_received": len(rec.vectors), "bound": dp_bound(eps),
                 "n_canaries": int(canaries.size), "n_known": n_known}
