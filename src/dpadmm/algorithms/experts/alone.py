"""The label party alone: its own model on its own raw columns, standardised by its own statistics.

One function for the label party's own model in the experts protocol and for the "label party alone" baseline
every vertical command reports: the same fit on the label party's raw columns whatever the options (``--prepare``,
``--row-clip``, the privacy flags), so a data set has one baseline. Standardising is a local step of the label
party: nothing about its columns is released (its block, its model and the combination never leave it).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression, Ridge

from ...data.prepare import column_scaling
from .model import augment


def standardise(X, scaling):
    """``(X − centre)/scale`` with the label party's own statistics (``None``: as given; a sparse block keeps its
    zeros: scaled only)."""
    if scaling is None:
        return X
    centre, scale = scaling
    if sp.issparse(X):
        return sp.csr_matrix(X, dtype=np.float64) @ sp.diags(1.0 / scale)
    return (np.asarray(X, dtype=np.float64) - centre) / scale


def fit_label_party_alone(X, y_pm, lam: float):
    """The label party's own model: its columns standardised with its own training statistics (a local step:
    nothing about them is released), then ridge-logistic regression with an unpenalised intercept (scikit-learn's
    ``LogisticRegression(C=1/(lam n))``). The same fit whatever the other parties do or the options are: the one
    "label party alone" baseline of a data set. Returns ``([w, b], scaling)``. Labels of one class (inside a private
    run's binary domain, red team T3): no slope, the intercept the smoothed log-odds log((n₊ + ½)/(n₋ + ½)) — a local
    model, as the fit is."""
    scaling = column_scaling(X)
    Z = standardise(X, scaling)
    y_pm = np.asarray(y_pm)
    if np.all(y_pm == y_pm[0]):
        pos = float(np.sum(y_pm > 0))
        return np.append(np.zeros(Z.shape[1]), np.log((pos + 0.5) / (y_pm.size - pos + 0.5))), scaling
    lr = LogisticRegression(C=1.0 / (float(lam) * X.shape[0]), tol=1e-10, max_iter=10_000).fit(Z, y_pm)
    return np.append(lr.coef_.ravel(), lr.intercept_[0]), scaling


def label_party_alone_proba(X_train, y_train, X_test, lam: float) -> np.ndarray:
    """P(y = +1) on ``X_test`` of :func:`fit_label_party_alone` fitted on ``(X_train, y_train)`` (labels ±1 or 0/1)."""
    y_pm = np.where(np.asarray(y_train, dtype=np.float64).ravel() > 0, 1.0, -1.0)
    coef, scaling = fit_label_party_alone(X_train, y_pm, lam)
    s = np.asarray(augment(standardise(X_test, scaling), 1.0) @ coef).ravel()
    return 1.0 / (1.0 + np.exp(-np.clip(s, -50, 50)))


def fit_label_party_alone_regression(X, y, lam: float):
    """The regression target's own model (and "label party alone" baseline): its columns standardised with its own
    training statistics (local), then ridge regression ``Ridge(alpha=lam·n)`` with an unpenalised intercept, on its
    exact labels in raw units. Returns ``([w, b], scaling)``; predict with ``augment(standardise(X), 1) @ coef``."""
    scaling = column_scaling(X)
    Z = standardise(X, scaling)
    r = Ridge(alpha=float(lam) * X.shape[0]).fit(Z, np.asarray(y, dtype=np.float64))
    return np.append(np.ravel(r.coef_), float(r.intercept_)), scaling


def label_party_alone_prediction(X_train, y_train, X_test, lam: float) -> np.ndarray:
    """The prediction on ``X_test`` of :func:`fit_label_party_alone_regression` fitted on ``(X_train, y_train)``."""
    coef, scaling = fit_label_party_alone_regression(X_train, y_train, lam)
    return np.asarray(augment(standardise(X_test, scaling), 1.0) @ coef).ravel()


def fit_label_party_alone_multiclass(X, index, k: int, lam: float):
    """The multiclass target's own model (and "label party alone" baseline): its columns standardised with its own
    statistics (local), then multinomial ridge-logistic regression ``LogisticRegression(C=1/(lam n))`` on the class
    indices ``0 ≤ index < k`` of its exact labels. Returns ``(model or None, scaling, class frequencies)``: ``None``
    when its rows hold one class (then :func:`label_party_alone_multiclass_proba` gives the smoothed frequencies)."""
    scaling = column_scaling(X)
    index = np.asarray(index, dtype=np.int64)
    freq = (np.bincount(index, minlength=int(k)) + 0.5) / (index.size + 0.5 * int(k))
    if np.unique(index).size < 2:
        return None, scaling, freq
    lr = LogisticRegression(C=1.0 / (float(lam) * X.shape[0]), tol=1e-8, max_iter=10_000)
    return lr.fit(standardise(X, scaling), index), scaling, freq


def label_party_alone_multiclass_proba(fitted, X, k: int) -> np.ndarray:
    """The (rows, k) probabilities of :func:`fit_label_party_alone_multiclass`'s model on ``X`` (a class absent from
    its training rows gets probability 0)."""
    model, scaling, freq = fitted
    if model is None:
        return np.tile(freq, (X.shape[0], 1))
    out = np.zeros((X.shape[0], int(k)))
    out[:, model.classes_] = model.predict_proba(standardise(X, scaling))
    return out
