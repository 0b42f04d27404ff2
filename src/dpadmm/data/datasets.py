"""Bundled datasets and synthetic stand-ins.

a9a (LIBSVM binary classification derived from UCI Adult, 123 one-hot features) ships gzipped
inside the package; provenance in ``_bundled/A9A_PROVENANCE.md``.
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from .libsvm import load_libsvm
from ..exceptions import InvalidParameterError

A9A_N_FEATURES = 123
A9A_PARTIES = (66, 57)  # [Hu, §5]: first 66 features = the label-holding party


def _bundled(name: str):
    return resources.files("dpadmm.data") / "_bundled" / name


def load_a9a(split: str = "train"):
    """Return ``(X, y)`` of a9a's ``train`` (32,561 × 123) or ``test`` (16,281 × 123) split, y ∈ {−1, +1}."""
    if split not in ("train", "test"):
        raise InvalidParameterError(f"split must be 'train' or 'test', got split={split!r}.")
    fname = "a9a.gz" if split == "train" else "a9a.t.gz"
    with resources.as_file(_bundled(fname)) as path:
        return load_libsvm(path, n_features=A9A_N_FEATURES)


def make_highdim_classification(n_train: int = 6000, n_test: int = 1000, n_features: int = 5000,
                                n_informative: int = 2500, *, density: float = 0.13, random_state: int = 0):
    """Synthetic stand-in for gisette [Hu, §5] (6,000 / 1,000 samples, 5,000 features).

    gisette (4 vs 9 digits; 2,500 real features + 2,500 random "probes", sparse non-negative,
    ~13% non-zeros) is not redistributable here. This generator keeps that structure: balanced
    classes; each informative feature is active with a class-dependent probability (weak
    individually, strong jointly), probes with a class-independent one; active values are
    uniform in (0, 1]; columns are shuffled so every party holds both kinds.
    Returns ``(X_train, y_train, X_test, y_test)`` with y ∈ {−1, +1}.
    """
    rng = np.random.default_rng(random_state)
    n = n_train + n_test
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    shift = rng.normal(0.0, 0.018, n_informative)
    p_pos = np.clip(density + shift, 0.01, 0.6)
    p_neg = np.clip(density - shift, 0.01, 0.6)
    p_inf = np.where(y[:, None] > 0, p_pos[None, :], p_neg[None, :])
    X_inf = (rng.random((n, n_informative)) < p_inf) * rng.random((n, n_informative))
    X_probe = (rng.random((n, n_features - n_informative)) < density) * rng.random((n, n_features - n_informative))
    X = np.concatenate([X_inf, X_probe], axis=1)[:, rng.permutation(n_features)]
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]
