"""Column-block partitioning, per-party row normalisation, and FATE-style party files.

Party files: one CSV per party, each with a header and an id column; rows are joined on the id
(the first party's order is kept); the label column lives in the first party's file only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..exceptions import DataFileError, InvalidDataError, InvalidParameterError


def partition_columns(X: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Split the columns of ``X`` into consecutive blocks of the given sizes (must sum to X.shape[1])."""
    sizes = [int(s) for s in sizes]
    if not sizes or any(s <= 0 for s in sizes):
        raise InvalidParameterError(f"party sizes must be positive integers, got {sizes}.")
    if sum(sizes) != X.shape[1]:
        raise InvalidParameterError(
            f"party sizes {','.join(map(str, sizes))} sum to {sum(sizes)} but the data has {X.shape[1]} "
            "features; give sizes that sum to the feature count."
        )
    edges = np.cumsum([0] + sizes)
    if sp.issparse(X):  # sparse stays sparse: CSR column slices, O(nnz)
        X = sp.csr_matrix(X)
        return [X[:, a:b] for a, b in zip(edges[:-1], edges[1:])]
    return [np.ascontiguousarray(X[:, a:b]) for a, b in zip(edges[:-1], edges[1:])]


def row_norms(block: np.ndarray) -> np.ndarray:
    """l2 norm of every row (dense or sparse, without densifying)."""
    if sp.issparse(block):
        B = sp.csr_matrix(block)
        return np.sqrt(np.asarray(B.multiply(B).sum(axis=1), dtype=np.float64).ravel())
    return np.sqrt(np.einsum("ij,ij->i", block, block))


def normalize_rows(block: np.ndarray) -> np.ndarray:
    """Scale every non-zero row to unit l2 norm ([Hu, Assumption 2.3]); all-zero rows stay zero."""
    norms = row_norms(block)
    scale = 1.0 / np.where(norms > 0, norms, 1.0)
    if sp.issparse(block):
        return sp.csr_matrix(sp.diags(scale) @ block)
    return block * scale[:, None]


def separator_hint(columns, fix: str) -> str:
    """``fix``, or — when the header is one column holding ';', tab or '|' — that the file is not
    comma-separated (the usual cause of "no id column")."""
    cols = [str(c) for c in columns]
    if len(cols) == 1:
        for sep, name in ((";", "';'"), ("\t", "tab"), ("|", "'|'")):
            if sep in cols[0]:
                return (f"the file looks {name}-separated; party files are comma-separated CSV "
                        "(re-save it with ',' as the separator).")
    return fix


def _read_csv(path, what: str) -> pd.DataFrame:
    p = Path(os.fspath(path))
    if not p.is_file():
        raise DataFileError(f"{what} not found: {p}; check the path.")
    try:
        df = pd.read_csv(p)
    except pd.errors.EmptyDataError:
        raise DataFileError(f"{what} {p} is empty; every party file needs a header and at least one row.") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataFileError(f"{what} {p} is not a readable CSV ({str(exc).splitlines()[0]}).") from None
    except OSError as exc:
        raise DataFileError(f"cannot read {what} {p} ({exc.strerror or exc}); check permissions.") from None
    if df.shape[0] == 0:
        raise DataFileError(f"{what} {p} has a header but no rows; every party needs the shared samples.")
    return df


def read_party_files(paths: Sequence, *, id_column: str = "id", label_column: str = "y"):
    """Read FATE-style party CSVs and join them on ``id_column``.

    Returns ``(blocks, labels, ids, feature_names)`` where ``blocks[m]`` is party m's feature matrix
    with rows in the first party's id order.
    """
    if len(paths) < 1:
        raise InvalidParameterError("give at least one --party file.")
    frames = []
    for m, path in enumerate(paths, start=1):
        df = _read_csv(path, f"party {m} file")
        if id_column not in df.columns:
            raise DataFileError(f"party {m} file {path} has no id column {id_column!r}; "
                                f"its columns are {list(df.columns)[:6]}; " + separator_hint(df.columns, "pass --id-column."))
        if df[id_column].duplicated().any():
            dup = df[id_column][df[id_column].duplicated()].iloc[0]
            raise InvalidDataError(f"party {m} file {path} repeats id '{dup}'; ids must be unique per party.")
        if m == 1 and label_column not in df.columns:
            raise DataFileError(f"party 1 file {path} has no label column {label_column!r}; "
                                "the first party holds the labels (pass --label-column).")
        if m > 1 and label_column in df.columns:
            raise InvalidDataError(f"party {m} file {path} also has the label column {label_column!r}; "
                                   "only the first party may hold labels.")
        frames.append(df.set_index(id_column))
    ids = frames[0].index
    for m, df in enumerate(frames[1:], start=2):
        if len(df.index) != len(ids) or not df.index.isin(ids).all() or not ids.isin(df.index).all():
            missing = ids[~ids.isin(df.index)]
            extra = df.index[~df.index.isin(ids)]
            eg = (f"id {missing[0]!r} is missing from party {m}" if len(missing)
                  else f"id {extra[0]!r} of party {m} is not in party 1")
            raise InvalidDataError(f"ids do not match across party files ({eg}); "
                                   "all parties must hold the same samples.")
    labels = frames[0][label_column].to_numpy()
    blocks, names = [], []
    for m, df in enumerate(frames, start=1):
        feats = df.drop(columns=[label_column]) if m == 1 else df
        feats = feats.loc[ids]
        if feats.shape[1] == 0:
            raise InvalidDataError(f"party {m} has no feature columns; each party needs at least one.")
        non_numeric = [c for c in feats.columns if not pd.api.types.is_numeric_dtype(feats[c])]
        if non_numeric:
            raise InvalidDataError(f"party {m} column {non_numeric[0]!r} is not numeric; encode it first.")
        arr = feats.to_numpy(dtype=np.float64)
        if not np.isfinite(arr).all():
            r, c = np.argwhere(~np.isfinite(arr))[0]
            raise InvalidDataError(f"party {m} has a missing or non-finite value (id {ids[r]!r}, column "
                                   f"{feats.columns[c]!r}); impute or drop it.")
        blocks.append(arr)
        names.append([str(c) for c in feats.columns])
    if pd.isna(labels).any():
        raise InvalidDataError(f"label column {label_column!r} has missing values; drop those rows.")
    return blocks, labels, np.asarray(ids), names


def write_party_files(blocks: Sequence[np.ndarray], labels, out_dir, *, prefix: str = "party",
                      id_column: str = "id", label_column: str = "y", ids=None) -> list[Path]:
    """Write one CSV per party (the label column in the first), joined by ``id_column``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = blocks[0].shape[0]
    ids = np.arange(n) if ids is None else np.asarray(ids)
    paths, col = [], 0
    for m, B in enumerate(blocks, start=1):
        df = pd.DataFrame(B, columns=[f"f{col + j}" for j in range(B.shape[1])])
        col += B.shape[1]
        df.insert(0, id_column, ids)
        if m == 1:
            df.insert(1, label_column, labels)
        p = out / f"{prefix}{m}.csv"
        df.to_csv(p, index=False)
        paths.append(p)
    return paths
