"""The trivial baselines a command prints beside its model, and the one-line verdict when the model is worse.

- :func:`verdict` — the one-line verdict printed when a fitted model is worse than the trivial
  baseline (predicting the base rate / the τ-quantile of the training responses).
- :func:`base_rate_baseline` — ``baselines.base_rate`` of metrics.json: the training base rate in a non-private
  run; in a private run the test set's own (no exact training count in a private run's outputs, issue 35).
- :func:`classifier_metrics` — log loss, accuracy and AUC of probabilities against ±1 labels.
- :func:`vertical_baselines` — what a vertical user has without the joint model (the base rate, the label party
  alone); :func:`sklearn_baseline` — the centralised scikit-learn fit of the same objective.
"""

from __future__ import annotations

import math
import time

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, roc_auc_score

from ..algorithms.experts.alone import label_party_alone_proba
from ..data.vertical import VerticalData

RELATIVE_TOLERANCE = 1e-6


def per_row_log_loss(p, y) -> np.ndarray:
    """Each row's log loss of the probabilities ``p`` of the positive class (labels ±1 or 0/1)."""
    p = np.clip(np.asarray(p, dtype=np.float64).ravel(), 1e-15, 1 - 1e-15)
    pos = np.asarray(y, dtype=np.float64).ravel() > 0
    return -np.where(pos, np.log(p), np.log1p(-p))


def loss_tolerance(loss_a, loss_b) -> float:
    """How much worse the mean of ``loss_a`` must be than the mean of ``loss_b`` (per-row losses on the same test
    rows) before a verdict says so: two standard errors of the mean paired difference (the test set's sampling
    noise: a difference inside it is not evidence that one model is worse), and never below
    :data:`RELATIVE_TOLERANCE` of the larger mean (rounding). Identical predictions give the rounding floor."""
    a, b = np.asarray(loss_a, dtype=np.float64).ravel(), np.asarray(loss_b, dtype=np.float64).ravel()
    d = a - b
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
    floor = RELATIVE_TOLERANCE * max(abs(float(a.mean())), abs(float(b.mean())), 1e-12)
    return max(2.0 * se if math.isfinite(se) else 0.0, floor)


def verdict(quantity: str, value: float | None, trivial: float | None, trivial_name: str, fix: str,
            tolerance: float | None = None) -> str | None:
    """``"verdict: …"`` if ``value`` (lower is better) is worse than the trivial model's by more than ``tolerance``
    (default: :data:`RELATIVE_TOLERANCE` of the larger value, so rounding never fires it), else None."""
    if value is None or trivial is None or not (math.isfinite(value) and math.isfinite(trivial)):
        return None
    tol = RELATIVE_TOLERANCE * max(abs(value), abs(trivial), 1e-12) if tolerance is None else float(tolerance)
    if value <= trivial + tol:
        return None
    return (f"verdict: WORSE THAN A TRIVIAL MODEL — {quantity} {value:.4g} > {trivial:.4g} of {trivial_name}; "
            f"{fix}")


def base_rate_log_loss(y_train, y_eval) -> float:
    """Log loss on ``y_eval`` (labels ±1 or 0/1) of predicting the training base rate for everyone."""
    yt = np.asarray(y_train, dtype=float).ravel() > 0
    ye = np.asarray(y_eval, dtype=float).ravel() > 0
    p = float(np.clip(yt.mean(), 1e-12, 1 - 1e-12))
    return float(-np.mean(np.where(ye, np.log(p), np.log1p(-p))))


#: what ``baselines.base_rate`` predicts (its ``source``), in the words of a verdict
BASE_RATE_NAMES = {"training-labels": "predicting the training base rate", "dp": "predicting the DP base rate",
                   "test-set": "predicting the test set's own base rate"}


def base_rate_baseline(y_train, y_test, *, private: bool) -> dict:
    """``baselines.base_rate``: the test log loss of predicting a base rate, and which (``source``). A non-private run:
    the training base rate. A private run keeps no exact training count (issue 35): the test set's own base rate,
    local evaluation on the evaluator's own rows."""
    if private:
        return {"test_log_loss": base_rate_log_loss(y_test, y_test), "source": "test-set"}
    return {"test_log_loss": base_rate_log_loss(y_train, y_test), "source": "training-labels"}


def base_rate_name(baseline: dict) -> str:
    return BASE_RATE_NAMES[baseline.get("source", "training-labels")]


def classifier_metrics(p_pos, y_pm) -> dict:
    y01 = (np.asarray(y_pm) > 0).astype(int)
    p = np.clip(p_pos, 1e-15, 1 - 1e-15)
    return {"log_loss": float(log_loss(y01, p, labels=[0, 1])),
            "accuracy": float(np.mean((p >= 0.5) == y01)),
            "auc": float(roc_auc_score(y01, p)) if 0 < y01.sum() < len(y01) else None}


def sklearn_baseline(blocks, y, test_blocks, y_test, *, lam: float, fit_intercept: bool = True) -> dict:
    """Centralised scikit-learn logistic regression (lbfgs) on the given blocks, same objective."""
    X = np.hstack(blocks)
    t0 = time.perf_counter()
    model = LogisticRegression(C=1.0 / (lam * X.shape[0]), fit_intercept=fit_intercept, max_iter=5000, tol=1e-8)
    model.fit(X, y)
    secs = time.perf_counter() - t0
    s = X @ model.coef_.ravel() + model.intercept_[0]
    obj = float(np.mean(np.logaddexp(0.0, -np.where(y > 0, 1.0, -1.0) * s)) + lam / 2 * np.sum(model.coef_ ** 2))
    out = {"train_objective": obj, "fit_seconds": secs}
    if test_blocks is not None:
        out.update({f"test_{k}": v for k, v in
                    classifier_metrics(model.predict_proba(np.hstack(test_blocks))[:, 1], y_test).items()})
    return out


def vertical_baselines(data: VerticalData, *, lam: float, fit_intercept: bool = True, raw: VerticalData | None = None,
              private: bool = False) -> dict:
    """What the user has without the joint model, on the test set (empty without one): predicting the
    training base rate, and the label party alone. Given ``raw`` (the data as read, before any ``--prepare``), the
    label party alone is ONE fit per data set (:func:`dpadmm.algorithms.experts.alone.label_party_alone_proba`: its
    raw columns, its own standardisation, λ = ``BASELINE_LAM``), whatever the options; without it, a logistic
    regression on its own (prepared) block with ``lam`` (older callers). With data locality (party files read by
    the parties' workers) the driver reads no party file, so only the base rate is reported (the label party's own
    choice still guards the model)."""
    if data.test is None:
        return {}
    out = {"base_rate": base_rate_baseline(data.y, data.y_test, private=private)}  # private: no training count
    if hasattr(data.train[0], "load"):  # data locality: the driver reads no party file, not even the label party's
        return out
    if raw is not None and raw.test is not None and not hasattr(raw.train[0], "load"):
        p = label_party_alone_proba(raw.train[0], raw.y, raw.test[0], BASELINE_LAM)
        out["label_party_alone"] = {f"test_{k}": v for k, v in classifier_metrics(p, raw.y_test).items()}
        return out
    alone = sklearn_baseline(data.train[:1], data.y, data.test[:1], data.y_test, lam=lam, fit_intercept=fit_intercept)
    out["label_party_alone"] = {k: v for k, v in alone.items() if k.startswith("test_")}
    return out


#: λ of the one "label party alone" baseline per data set (the library's default λ)
BASELINE_LAM = 1e-3
