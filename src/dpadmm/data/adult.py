"""UCI Adult with the preprocessing of [Zhang, §5] (docs/algorithms.md §2), bundled gzipped in the package.

Steps, in the paper's order:

1. drop every individual with a missing value (``?``), train and test files pooled;
2. one-hot encode each categorical attribute (m categories → m binary columns);
3. scale every column so that its maximum is 1 (all Adult columns are non-negative);
4. scale every row so that ``‖x‖₂ ≤ 1`` (``x ← x / max(1, ‖x‖₂)``; after step 3 every row has norm
   > 1, so in practice every row ends with norm exactly 1);
5. labels ``>50K`` → +1, ``<=50K`` → −1 (the test file's trailing dot is stripped).

**What you get vs the paper.** ``load_adult()`` returns **45,222 × 104** (30,162 train + 15,060
test rows). The paper reports 45,223 × 105.

- Rows: 45,222 is the number of complete records in ``adult.data`` + ``adult.test`` (the UCI
  originals, verified by checksum); no further row exists to keep, so the paper's 45,223 is an
  off-by-one (most likely a header / the ``|1x3 Cross validator`` junk line counted as a row).
- Columns: 6 numeric attributes (age, fnlwgt, education-num, capital-gain, capital-loss,
  hours-per-week) + 98 one-hot columns (workclass 7, education 16, marital-status 7,
  occupation 14, relationship 6, race 5, sex 2, native-country 41 — levels seen in complete rows)
  = 104. The paper's model has no intercept; a 105th constant column (a bias feature) is the
  plausible difference: ``load_adult(bias=True)`` appends a constant-1 column *before* the
  column/row scaling, giving 45,222 × 105.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np
import pandas as pd

from ..exceptions import InvalidParameterError

COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
           "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
           "income")
NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")
CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship", "race", "sex",
               "native-country")
PAPER_SHAPE = (45223, 105)  # [Zhang, §5]


def _read(name: str, skiprows: int) -> pd.DataFrame:
    path = resources.files("dpadmm.data") / "_bundled" / name
    with resources.as_file(path) as p:
        return pd.read_csv(p, compression="gzip", header=None, names=list(COLUMNS), skipinitialspace=True,
                           skiprows=skiprows, na_values=["?"], keep_default_na=False, dtype=str)


def load_adult_frame() -> pd.DataFrame:
    """The raw pooled Adult table (train + test, 48,842 rows, strings; ``?`` as NaN) plus a ``split`` column."""
    train = _read("adult.data.gz", 0).assign(split="train")
    test = _read("adult.test.gz", 1).assign(split="test")
    df = pd.concat([train, test], ignore_index=True)
    return df.dropna(how="all", subset=list(COLUMNS))


def load_adult(*, bias: bool = False, return_names: bool = False):
    """Return the preprocessed Adult ``(X, y)`` of [Zhang, §5]: X (45,222 × 104, float64, every
    row ‖x‖₂ ≤ 1), y ∈ {−1, +1} (+1 = income >50K). See the module docstring for the
    difference to the paper's 45,223 × 105.

    Parameters
    ----------
    bias : append a constant-1 column before scaling (→ 105 columns, the paper's width).
    return_names : also return the list of column names.
    """
    if not isinstance(bias, bool):
        raise InvalidParameterError(f"bias must be True or False, got bias={bias!r}.")
    X, y, names = _preprocessed(bias)
    X, y = X.copy(), y.copy()
    return (X, y, list(names)) if return_names else (X, y)


@functools.lru_cache(maxsize=2)
def _preprocessed(bias: bool):
    df = load_adult_frame()
    df = df.dropna().reset_index(drop=True)  # [Zhang, §5] step (1)
    parts = [df[list(NUMERIC)].astype(np.float64).to_numpy()]
    names = list(NUMERIC)
    for col in CATEGORICAL:  # step (2)
        levels = sorted(df[col].unique())
        parts.append((df[col].to_numpy()[:, None] == np.asarray(levels)[None, :]).astype(np.float64))
        names += [f"{col}={lv}" for lv in levels]
    if bias:
        parts.append(np.ones((len(df), 1)))
        names.append("bias")
    X = np.hstack(parts)
    colmax = X.max(axis=0)
    X = X / np.where(colmax > 0, colmax, 1.0)  # step (3): max of every column = 1
    norms = np.linalg.norm(X, axis=1)
    X = X / np.maximum(norms, 1.0)[:, None]  # step (4): ‖x‖ ≤ 1
    label = df["income"].str.rstrip(".")
    y = np.where(label == ">50K", 1.0, -1.0)  # step (5)
    return X, y, tuple(names)
