"""The vertical job: fit DP/non-private ADMM sharing on a :class:`~dpadmm.data.vertical.VerticalData` and collect
its metrics (the metrics.json layout of ``dpadmm vertical admm``)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..algorithms.vertical.report import LABELS_READABLE
from ..data.vertical import VerticalData
from ..estimators import VerticalLogisticRegression
from ..kernels.losses import get_loss
from ..privacy.ledger import render_side
from .baselines import classifier_metrics


def _test_probability(model, test_blocks) -> np.ndarray:
    """P(y = +1) on the test set; party files (read by the parties) are scored at the parties."""
    if any(hasattr(b, "load") for b in test_blocks):
        return 1.0 / (1.0 + np.exp(-np.clip(model.eval_scores_["test"], -500, 500)))
    return model.predict_proba(test_blocks)[:, 1]


def model_loss(model):
    return get_loss(model._loss_name)


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
    config = {"lam": lam, "rho": model._rho(len(data.train), model_loss(model)), "iterations": model._max_iter(),
              "fit_intercept": fit_intercept, "mechanism": mechanism, "relation": relation, "clip": clip,
              "label_epsilon": label_epsilon, "label_noise_scale": label_noise_scale,
              "label_mechanism": label_mechanism if (label_epsilon is not None and label_noise_scale is None) else None,
              "epsilon": epsilon, "delta": delta, "iteration_epsilon": iteration_epsilon,
              "noise_scale": noise_scale, "bound": bound, "accountant": accountant, "adaptive_rho": adaptive_rho,
              "seed": seed, "noise_source": model.noise_source_, "monitor": monitor, "tol": tol, "party_sizes": list(data.party_sizes), "n_train": int(len(data.y)),
              "n_test": int(len(data.y_test)) if data.y_test is not None else 0,
              "noise_multiplier": model.noise_multiplier_, "backend": getattr(backend, "name", str(backend)), **data.source}
    return model, {"history": history, "final": final, "privacy": privacy, "wall_seconds": wall, "config": config}
