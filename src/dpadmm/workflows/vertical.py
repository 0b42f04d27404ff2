"""The vertical job: fit DP/non-private ADMM sharing on a :class:`~dpadmm.data.vertical.VerticalData` and collect
its metrics (the metrics.json layout of ``dpadmm vertical admm``), and the vertical baselines every vertical command
reports: :func:`classifier_metrics`, :func:`vertical_baselines` (the base rate, the label party alone) and
:func:`sklearn_baseline` (the centralised scikit-learn fit of the same objective)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, roc_auc_score

from ..algorithms.experts.alone import label_party_alone_proba
from ..algorithms.vertical.params import VerticalParams
from ..algorithms.vertical.report import LABELS_READABLE
from ..data.vertical import VerticalData
from ..estimators import VerticalLogisticRegression
from ..kernels.losses import get_loss
from ..privacy.ledger import render_side
from .baselines import base_rate_baseline


def _test_probability(model, test_blocks) -> np.ndarray:
    """P(y = +1) on the test set; party files (read by the parties) are scored at the parties."""
    if any(hasattr(b, "load") for b in test_blocks):
        return 1.0 / (1.0 + np.exp(-np.clip(model.eval_scores_["test"], -500, 500)))
    return model.predict_proba(test_blocks)[:, 1]


def run_vertical(data: VerticalData, *, lam: float = 1e-3, rho="auto", iterations="auto",
                 fit_intercept: bool = True, epsilon=None, delta: float = 1e-5, iteration_epsilon=None,
                 noise_scale=None, bound="auto", accountant: str = "pld", adaptive_rho: bool = False,
                 seed: int | None = None, tol: float = 1e-6, callbacks=(), backend="inprocess",
                 fit_kwargs=None, monitor: bool | None = None, mechanism: str = "gaussian",
                 relation: str = "feature_column", clip="auto", label_epsilon=None,
                 label_noise_scale=None, label_mechanism: str = "rr",
                 label_block_scale: float = 1.0) -> tuple[VerticalLogisticRegression, dict]:
    """Fit one vertical model and return it with its metrics dict (the metrics.json layout).

    ``seed=None`` (private default): party-local noise. ``monitor=None``: per-round monitoring only
    for non-private fits. Final metrics of a private fit come from the collected models when the
    driver holds them (in-process simulation, or ``monitor=True``) and are absent otherwise.
    ``fit_kwargs`` go to ``fit`` (checkpoint_dir/checkpoint_every/resume_from/transcript).
    """
    t0 = time.perf_counter()
    model = VerticalLogisticRegression(
        lam=lam, rho=rho, max_iter=iterations, tol=tol, fit_intercept=fit_intercept, epsilon=epsilon, delta=delta,
        iteration_epsilon=iteration_epsilon, noise_scale=noise_scale, bound=bound, accountant=accountant,
        adaptive_rho=adaptive_rho, random_state=seed, backend=backend, monitor=monitor, mechanism=mechanism,
        relation=relation, clip=clip, label_epsilon=label_epsilon, label_noise_scale=label_noise_scale,
        label_mechanism=label_mechanism, label_block_scale=label_block_scale)
    eval_set = {"test": (data.test, data.y_test)} if data.test is not None else None
    model.fit(data.train, data.y, eval_set=eval_set, callbacks=callbacks, **(fit_kwargs or {}))
    wall = time.perf_counter() - t0
    h = model.history_
    history = {k: h[k] for k in ("objective", "seconds", "train_loss", "primal_residual", "dual_residual", "rho")
               if k in h}
    final: dict[str, Any] = {"iterations": model.n_iter_, "converged": model.converged_,
                             "label_party_choice": getattr(model, "label_party_choice_", None),
                             # the label party's 5-fold cross-validated losses behind that choice (joint vs alone)
                             "label_party_cv": getattr(model, "label_party_cv_", None),
                             "passive_weight": getattr(model, "passive_weight_", None)}
    has_models = model.coefs_ is not None
    if has_models and not any(hasattr(b, "load") for b in data.train):
        # the released model's (after the label party's refit, which can differ from the last iterate);
        # evaluated by the driver, which holds the models only in the simulation (or with monitor=True)
        p = _test_probability(model, data.train)
        reg = 0.5 * float(model.coef_ @ model.coef_)
        final["train_objective"] = classifier_metrics(p, data.y)["log_loss"] + lam * reg
    elif "objective" in h:
        final["train_objective"] = h["objective"][-1]
    if data.test is not None:
        for k in ("test_log_loss", "test_accuracy"):
            if k in h:
                history[k] = h[k]
        if has_models or "test" in getattr(model, "eval_scores_", {}):
            final.update({f"test_{k}": v for k, v in
                          classifier_metrics(_test_probability(model, data.test), data.y_test).items()})
    if not has_models:
        final["note"] = ("private run on an out-of-process backend: the local models stayed at the parties, so the "
                         "driver reports no model quality (opt in with --monitor, outside the guarantee)"
                         if model.privacy_ is not None else
                         "the local models stayed at the parties (each wrote its own model file); the driver has "
                         "only the objective and the test scores the parties sent")
    if model.privacy_ is not None:
        privacy = model.privacy_.to_dict()
        privacy["private"] = model.privacy_.private
    else:
        privacy = {"private": False, "summary": None, "sides": {
                       "features": {"protected": False, "epsilon": "inf", "why": "non-private run: each party's "
                                    "shares D_m x_m are sent exactly"},
                       "labels": {"protected": False, "epsilon": "inf", "why": LABELS_READABLE.replace(
                           "labels are NOT protected: ", "").replace(" (use label_epsilon / --label-epsilon)", "")}},
                   "epsilon": "inf", "epsilon_side": "features", "delta": None, "accountant": None,
                   "paper_bound": {"epsilon": None}, "note": "non-private run: epsilon is infinite",
                   "label": {"protected": False, "epsilon": "inf", "note": LABELS_READABLE}}

        privacy["summary"] = [render_side(k, v) for k, v in privacy["sides"].items()]
    params = VerticalParams.of(model.get_params(deep=False), loss="logistic")  # the run's defaults, resolved
    config = {"lam": lam, "rho": params.run_rho(len(data.train), get_loss(params.loss)), "iterations": params.rounds(),
              "fit_intercept": fit_intercept, "mechanism": mechanism, "relation": relation, "clip": clip,
              "label_epsilon": label_epsilon, "label_noise_scale": label_noise_scale,
              "label_mechanism": label_mechanism if (label_epsilon is not None and label_noise_scale is None) else None,
              "epsilon": epsilon, "delta": delta, "iteration_epsilon": iteration_epsilon,
              "noise_scale": noise_scale, "bound": bound, "accountant": accountant, "adaptive_rho": adaptive_rho,
              "seed": seed, "noise_source": model.noise_source_, "monitor": monitor, "tol": tol, "party_sizes": list(data.party_sizes), "n_train": int(len(data.y)),
              "n_test": int(len(data.y_test)) if data.y_test is not None else 0,
              "noise_multiplier": model.noise_multiplier_, "backend": getattr(backend, "name", str(backend)), **data.source}
    return model, {"history": history, "final": final, "privacy": privacy, "wall_seconds": wall, "config": config}


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
