"""What scikit-learn's estimator checks (``sklearn.utils.estimator_checks``) ask of dpadmm's estimators, in one place.

- Tags that say what an estimator supports: the classifiers are binary (``multi_class=False``: the protocols'
  labels are ±1), and sparse input is taken where the estimator keeps it sparse.
- One matrix goes through scikit-learn's own validation (its messages for 1-D, empty, complex or non-numeric
  input) and, once fitted, must have the fitted number of columns. A list is a list of party (or node) blocks
  only when its items are 2-D; a list of rows is one matrix.
- Targets: ``y=None`` refused, a column vector accepted with scikit-learn's ``DataConversionWarning``, continuous
  labels refused by a classifier ("Unknown label type").

Every refusal is an :class:`~dpadmm.exceptions.InvalidDataError` (a ``ValueError``), with a fix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, column_or_1d

from .._validation import as_float_matrix, declared_index
from ..exceptions import InvalidDataError, InvalidParameterError


def checked_classes(classes) -> np.ndarray:
    """A ``classes=`` parameter as a flat array of at least two distinct labels (one line naming it otherwise)."""
    out = np.asarray(classes).ravel()
    if out.size < 2 or np.unique(out).size != out.size:
        raise InvalidParameterError(f"classes={classes!r}: give at least two distinct class labels.")
    return out


def declared_labels(classes: np.ndarray, y: np.ndarray, *, private: bool) -> np.ndarray:
    """Each label's index among the declared ``classes``, K for a label outside them: counted by a private fit
    (refusing it would depend on it), refused by a non-private one with the fix."""
    idx = declared_index(classes, y)
    outside = int(np.count_nonzero(idx == classes.size))
    if outside and not private:
        raise InvalidDataError(f"y holds {outside} label(s) outside classes={classes.tolist()!r}; declare every class "
                               "or drop those rows.")
    return idx


def binary_classifier_tags(tags, *, sparse: bool):
    """A binary classifier's tags (the checks then give it two-class data only)."""
    tags.classifier_tags.multi_class = False
    tags.input_tags.sparse = sparse
    return tags


def is_block(B: Any) -> bool:
    """A 2-D block: anything with a 2-D ``shape`` (array, sparse matrix, DataFrame, a source a party reads itself such
    as ``dpadmm.data.remote.PartyFile``) or a nested list."""
    shape = getattr(B, "shape", None)
    if shape is not None:
        return len(shape) == 2
    return isinstance(B, (list, tuple)) and len(B) > 0 and isinstance(B[0], (list, tuple, np.ndarray))


def is_block_list(X: Any) -> bool:
    """``X`` is a list of blocks (one per party or node), not one matrix given as a list of rows."""
    return isinstance(X, (list, tuple)) and (len(X) == 0 or all(is_block(B) for B in X))


def one_matrix(est, X: Any, name: str = "X", *, sparse: bool = True):
    """One (N, d) matrix: scikit-learn's validation, dpadmm's finiteness check (its message), and — when ``est`` is
    fitted — the fitted column count. ``sparse=False``: sparse input is densified (the estimator needs dense rows)."""
    if not sparse and sp.issparse(X):
        X = X.toarray()
    try:
        A = check_array(X, accept_sparse="csr" if sparse else False, dtype=np.float64, ensure_all_finite=False,
                        input_name=name)
    except TypeError as exc:  # object arrays of non-numbers: a TypeError, as numpy and scikit-learn raise it
        raise TypeError(f"{name} must be a numeric 2-D array; it could not be converted ({exc}).") from None
    except ValueError as exc:
        if "inhomogeneous" in str(exc) or "sequence" in str(exc):
            raise InvalidDataError(f"{name} has ragged rows ({exc}); give rows of equal length.") from None
        raise InvalidDataError(str(exc)) from None
    A = as_float_matrix(name, A, accept_sparse=sparse)
    expected = getattr(est, "n_features_in_", None)
    if expected is not None and A.shape[1] != expected:
        raise InvalidDataError(f"{name} has {A.shape[1]} features, but {type(est).__name__} is expecting {expected} "
                               "features as input; give the columns it was fitted on.")
    return A


def target(y: Any, *, classes: bool) -> np.ndarray:
    """``y`` as a 1-D array (a column vector with a ``DataConversionWarning``); a classifier's must be classes."""
    if y is None:
        raise InvalidDataError("this estimator requires y to be passed, but the target y is None; give the labels.")
    try:
        arr = column_or_1d(y, warn=True)
        if classes:
            check_classification_targets(arr)
    except ValueError as exc:
        raise InvalidDataError(f"{exc} Give y as one label per row{' (two classes)' if classes else ''}.") from None
    return arr
