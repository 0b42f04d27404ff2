"""LIBSVM / svmlight reader that honours ``n_features``."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
from sklearn.datasets import load_svmlight_file

from ..exceptions import DataFileError


def load_libsvm(path, n_features: int | None = None, *, dense: bool = True):
    """Read a LIBSVM file (optionally .gz) into ``(X, y)``.

    ``n_features`` fixes the column count: a9a.t never uses feature 123, so inferring the width
    from the file would give 122 columns; pass ``n_features=123`` to align with the training set.
    A file using an index beyond ``n_features`` is an error.
    """
    p = Path(os.fspath(path))
    if not p.is_file():
        raise DataFileError(f"LIBSVM file not found: {p}; check the path.")
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as fh:
                X, y = load_svmlight_file(fh, n_features=n_features)
        else:
            X, y = load_svmlight_file(str(p), n_features=n_features)
    except ValueError as exc:
        raise DataFileError(f"{p} is not a valid LIBSVM file ({str(exc).splitlines()[0]}); "
                            "expected lines like '<label> <index>:<value> ...'.") from None
    except OSError as exc:
        raise DataFileError(f"cannot read {p} ({exc.strerror or exc}); check the path and permissions.") from None
    if X.shape[0] == 0:
        raise DataFileError(f"{p} holds no samples; give a non-empty LIBSVM file.")
    if dense:
        X = X.toarray()
    return X, np.asarray(y, dtype=np.float64)
