"""``dpadmm vertical admm --target regression|count``: which target a label column is, and one vertical fit of amounts
(squared loss) or counts (Poisson, log link) with the metrics that fit the target.

The binary target stays :func:`dpadmm.workflows.vertical.run_vertical`'s. With a label budget the labels-only protocol
runs (:class:`~dpadmm.estimators.label_regression.LabelPrivateVerticalRegression`: one release by randomized response
on bins — over clipped counts for ``count`` — then ADMM sharing on the released labels and the label party's refit on
its exact labels); without one, :class:`~dpadmm.estimators.vertical.VerticalLinearRegression` or
:class:`~dpadmm.estimators.vertical.VerticalPoissonRegression`, non-private. Baselines beside it: the mean predictor (the
training mean: the label party's own statistic, local), the label party alone (its own columns, exact labels, the same
λ: local) and pooled non-private (every column, exact labels: the simulation driver's reference, outside the
guarantee)."""

from __future__ import annotations

import time

import numpy as np
from sklearn.linear_model import PoissonRegressor, Ridge
from sklearn.metrics import mean_absolute_error, mean_poisson_deviance, r2_score

from ..estimators.label_regression import LabelPrivateVerticalRegression
from ..estimators.vertical import VerticalLinearRegression, VerticalPoissonRegression
from .._validation import numeric_labels
from ..exceptions import InvalidDataError, InvalidParameterError
from ..privacy.ledger import nonprivate_privacy, render_side

TARGETS = ("binary", "regression", "count")
OVERRIDE = "override with --target binary|regression|count"
#: the loss of each target's fit
LOSS = {"regression": "squared", "count": "poisson"}


def resolve_vertical_target(target: str | None, y) -> tuple[str, str | None]:
    """``(target, line)``: the target, given or inferred from the training labels ``y`` — two distinct values (0/1,
    ±1 or two strings): binary; non-negative integers with more than two values: count; other numbers: regression —
    and the line saying it was inferred (None when given or binary, the command's behaviour before ``--target``). A
    label column the target cannot use: one clear error naming the fix."""
    if target is not None and target not in TARGETS:
        raise InvalidParameterError(f"--target must be binary, regression or count, got {target!r}.")
    if target == "binary":
        return "binary", None  # the binary path's own checks (two classes)
    num = numeric_labels(y)
    values = np.unique(np.asarray(y).ravel() if num is None else num)
    if target is None and values.size == 2:
        return "binary", None
    if num is None:
        raise InvalidParameterError(f"the label column holds {values.size} distinct non-numeric values; vertical "
                                    "runs take two classes (binary), amounts (regression) or counts; give numbers.")
    if not np.all(np.isfinite(num)):
        raise InvalidDataError(f"the label column holds {int(np.sum(~np.isfinite(num)))} missing or infinite "
                               "value(s); drop those rows or fill them in before training.")
    counts = bool(np.all(num >= 0) and np.all(num == np.round(num)))
    if target is None:
        target = "count" if counts else "regression"
        why = (f"{values.size} distinct non-negative integers" if counts else
               f"{values.size} distinct values" + (", some negative" if np.any(num < 0) else ", not all integers"))
        return target, f"target: {target} (inferred from the label column: {why}); {OVERRIDE}."
    if target == "count" and not counts:
        raise InvalidDataError("--target count needs non-negative integer labels, but the label column holds "
                               f"{'negative' if np.any(num < 0) else 'fractional'} values; use --target regression.")
    if values.size < 2:
        raise InvalidDataError(f"--target {target} needs labels of at least two distinct values.")
    return target, None


def _figures(target: str, y, mu) -> dict:
    out = {"rmse": float(np.sqrt(np.mean((y - mu) ** 2))), "mae": float(mean_absolute_error(y, mu)),
           "r2": float(r2_score(y, mu))}
    if target == "count":
        out["poisson_deviance"] = float(mean_poisson_deviance(y, np.maximum(mu, 1e-12)))
    return out


def _baselines(target: str, data, lam: float, fit_intercept: bool) -> dict:
    """Mean predictor, the label party alone and pooled non-private, on the test rows (module docstring)."""
    y, yt = np.asarray(data.y, dtype=np.float64), np.asarray(data.y_test, dtype=np.float64)
    n = y.size

    def fit(blocks, test_blocks):
        X, Xt = np.hstack(blocks), np.hstack(test_blocks)
        if target == "count":
            return PoissonRegressor(alpha=lam, fit_intercept=fit_intercept, max_iter=1000).fit(X, y).predict(Xt)
        return Ridge(alpha=lam * n, fit_intercept=fit_intercept).fit(X, y).predict(Xt)

    return {"mean_predictor": dict(_figures(target, yt, np.full(yt.size, y.mean())), source="training-labels"),
            "label_party_alone": _figures(target, yt, fit(data.train[:1], data.test[:1])),
            "pooled_nonprivate": _figures(target, yt, fit(data.train, data.test))}


def run_vertical_target(*, target: str, data, lam: float, label_epsilon: float | None, iterations, seed,
                        fit_intercept: bool = True) -> dict:
    """One fit of ``target`` on ``data`` (labels as read) and its metrics: ``final`` (the model's test figures,
    ``test_rmse``, ``test_mae``, ``test_r2`` and for counts ``test_poisson_deviance``; the label party's choice),
    ``baselines``, ``privacy``, and ``_model`` (coefficients, for model.npz)."""
    y = np.asarray(data.y, dtype=np.float64)
    if target == "count" and (np.any(y < 0) or np.any(y != np.round(y))):
        raise InvalidDataError("--target count needs non-negative integer labels; use --target regression.")
    max_iter = iterations if iterations is not None else "auto"
    t0 = time.perf_counter()
    if label_epsilon is not None:
        if not fit_intercept:
            raise InvalidParameterError(f"--no-intercept is not available for --target {target} with "
                                        "--label-epsilon (the label party's refit fits an intercept); drop it.")
        est = LabelPrivateVerticalRegression(loss=LOSS[target], label_epsilon=label_epsilon, lam=lam,
                                             max_iter=max_iter, random_state=seed).fit(data.train, y)
        label = dict(est.privacy_["label"], protected=True)
        sides = {"labels": label, "features": {"protected": False, "why": f"labels-only protocol (--target {target} "
                                                                          "protects the labels only)"}}
        privacy = {"private": True, "summary": [render_side(k, v) for k, v in sides.items()], "sides": sides,
                   "epsilon": label["epsilon"], "delta": 0.0, "epsilon_side": "labels",
                   "local": est.privacy_["local"]}
        final = {"label_party_choice": est.label_party_choice_, "passive_weight": float(est.passive_weight_),
                 "label_party_cv": est.label_party_cv_, "iterations": int(est.joint_.n_iter_),
                 "label_release": {"label_range": [float(v) for v in est.release_["label_range"]],
                                   "outputs": [float(v) for v in est.release_["outputs"]],
                                   "epsilons": est.release_["epsilons"]}}
    else:
        cls = VerticalPoissonRegression if target == "count" else VerticalLinearRegression
        est = cls(lam=lam, max_iter=max_iter, fit_intercept=fit_intercept, random_state=seed).fit(data.train, y)
        privacy = nonprivate_privacy({
            "labels": {"protected": False, "why": "no --label-epsilon: every party can read the labels from the "
                                                  "duals it receives"},
            "features": {"protected": False, "why": f"--target {target} runs without a feature-side budget"}})
        final = {"iterations": int(est.n_iter_), "converged": bool(est.converged_)}
    final["fit_seconds"] = time.perf_counter() - t0
    if data.test is not None:
        yt = np.asarray(data.y_test, dtype=np.float64)
        final.update({f"test_{k}": v for k, v in _figures(target, yt, est.predict(data.test)).items()})
        final["n_test"] = int(yt.size)
        baselines = _baselines(target, data, lam, fit_intercept)
    else:
        baselines = {}
    model = {f"coef_party{m}": np.asarray(c) for m, c in enumerate(est.coefs_, start=1)}
    model["intercept"] = np.asarray(est.intercept_)
    return {"final": final, "baselines": baselines, "privacy": privacy, "_model": model,
            "config": {"target": target, "loss": LOSS[target], "lam": lam, "label_epsilon": label_epsilon,
                       "seed": seed, "party_sizes": list(data.party_sizes), "data": data.source}}


__all__ = ["TARGETS", "resolve_vertical_target", "run_vertical_target"]
