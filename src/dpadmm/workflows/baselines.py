"""The trivial baselines a command prints beside its model, and the one-line verdict when the model is worse.

- :func:`verdict` — the one-line verdict printed when a fitted model is worse than the trivial
  baseline (predicting the base rate / the τ-quantile of the training responses).
- :func:`base_rate_baseline` — ``baselines.base_rate`` of metrics.json: the training base rate in a non-private
  run; in a private run the test set's own (no exact training count in a private run's outputs, issue 35).

The vertical job's own baselines (the label party alone, the centralised fit) are in :mod:`dpadmm.workflows.vertical`.
Light on purpose (numpy only): the CLI imports it at start-up.
"""

from __future__ import annotations

import math

import numpy as np

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
