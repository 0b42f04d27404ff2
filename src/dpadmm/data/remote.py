"""Party data that stays where it lives: a file path the party's own worker reads.

:class:`PartyFile` stands in for a party's feature block wherever an estimator takes one. The
driver knows only metadata — the path, the row ids of the label party (the join key), the shape
(from the file's header) — and sends that to the party's worker, whose ``setup`` calls
:meth:`PartyFile.load`. So with the process or Ray backend the driver never holds another party's
features: ``dpadmm vertical admm --party a.csv --party b.csv --backend process`` reads ``b.csv`` only in
party 2's process.

:func:`party_sources` builds the sources from FATE-style party CSVs (one per party, an id column,
the label column in the first file), reading in the driver only the first file's id and label
columns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..exceptions import DataFileError, InvalidDataError, InvalidParameterError
from .parties import _read_csv, normalize_rows, separator_hint
from .prepare import column_scaling, prepare_block


def _header(path: Path, what: str) -> list[str]:
    if not path.is_file():
        raise DataFileError(f"{what} not found: {path}; check the path.")
    try:
        return list(pd.read_csv(path, nrows=0).columns)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError):
        raise DataFileError(f"{what} {path} has no readable CSV header; every party file needs one.") from None


@dataclass(frozen=True, eq=False)
class PartyFile:
    """Party ``index``'s (1-based) block, to be read by the party itself.

    ``ids``: the label party's row ids, in training order (rows are joined on them);
    ``normalize``: scale rows to unit norm after loading ([Hu, Assumption 2.3]).
    ``prepare``: ``"standardize"`` scales every column by the party's own training statistics (read from
    ``scaling_from``, the party's training file, for a test file; from this file otherwise) and, with
    ``row_clip`` R, clips rows at R and divides by R (:func:`dpadmm.data.prepare.prepare_block`).
    """

    path: str
    index: int
    ids: np.ndarray
    n_features: int
    id_column: str = "id"
    label_column: str = "y"
    normalize: bool = False
    prepare: str = "none"
    scaling_from: str | None = None
    row_clip: float | None = None
    subset: bool = False  # ``ids`` are a subset of the file's (a PSI intersection): the party's other rows are left out

    @property
    def shape(self) -> tuple[int, int]:
        return (int(len(self.ids)), int(self.n_features))

    def load(self) -> np.ndarray:
        """Read, validate, align to ``ids`` and (optionally) normalise — inside the party's worker."""
        m, path = self.index, self.path
        df = _read_csv(path, f"party {m} file")
        if self.id_column not in df.columns:
            raise DataFileError(f"party {m} file {path} has no id column {self.id_column!r}; "
                                f"its columns are {list(df.columns)[:6]}; " + separator_hint(df.columns, "pass --id-column."))
        if df[self.id_column].duplicated().any():
            dup = df[self.id_column][df[self.id_column].duplicated()].iloc[0]
            raise InvalidDataError(f"party {m} file {path} repeats id '{dup}'; ids must be unique per party.")
        df = df.set_index(self.id_column)
        ids = pd.Index(self.ids)
        if ids.has_duplicates:  # a row joined twice enters every sum twice: the record relation's bounds would not hold
            raise InvalidDataError(f"party {m}: the ids it was sent repeat id '{ids[ids.duplicated()][0]}'; each of "
                                   "its rows joins once (send every id once).")
        if self.subset and not ids.isin(df.index).all():
            raise InvalidDataError(f"party {m} file {path} lacks an id of its PSI alignment; the file changed since "
                                   "PSI — run it again.")
        if not self.subset and (len(df.index) != len(ids) or not df.index.isin(ids).all()
                                or not ids.isin(df.index).all()):
            missing = ids[~ids.isin(df.index)]
            eg = (f"id {missing[0]!r} is missing from party {m}" if len(missing)
                  else f"an id of party {m} is not in party 1")
            raise InvalidDataError(f"ids do not match across party files ({eg}); all parties must hold the same samples.")
        if m > 1 and self.label_column in df.columns:
            raise InvalidDataError(f"party {m} file {path} also has the label column {self.label_column!r}; "
                                   "only the first party may hold labels.")
        every = df.drop(columns=[c for c in (self.label_column,) if c in df.columns]) if m == 1 else df
        non_numeric = [c for c in every.columns if not pd.api.types.is_numeric_dtype(every[c])]
        if non_numeric:
            raise InvalidDataError(f"party {m} column {non_numeric[0]!r} is not numeric; encode it first.")
        if every.shape[1] != self.n_features:
            raise InvalidDataError(f"party {m} file {path} has {every.shape[1]} feature columns, expected "
                                   f"{self.n_features}; the file changed since the run was set up.")
        # checked on EVERY row of the file, and the message names no row: a party reads this file for a coordinator
        # that chooses the rows (ids, PSI subsets), so a check of the chosen rows naming the first bad one would tell
        # it, row by row, which records have a missing value
        full = every.to_numpy(dtype=np.float64)
        bad = ~np.isfinite(full).all(axis=0)
        if bad.any():
            raise InvalidDataError(f"party {m} file {path} has a missing or non-finite value in column "
                                   f"{every.columns[np.argmax(bad)]!r}; impute or drop it.")
        pos = every.index.get_indexer(ids)  # the rows asked for (every id is in the file: checked above)
        if (pos < 0).any():
            raise InvalidDataError(f"party {m} file {path} lacks an id it was sent; send ids as the files write them.")
        arr = full[pos]
        if self.prepare == "standardize":
            scaling = None
            if self.scaling_from is not None:  # the party's own training file: its statistics, all its rows
                ref = _read_csv(self.scaling_from, f"party {m} training file")
                drop = [c for c in (self.id_column, self.label_column) if c in ref.columns]
                scaling = column_scaling(ref.drop(columns=drop).to_numpy(dtype=np.float64))
            return prepare_block(arr, "standardize", scaling=scaling, row_clip=self.row_clip)[0]
        return normalize_rows(arr) if (self.normalize or self.prepare == "normalize-rows") else arr


def party_sources(party_files: Sequence, *, id_column: str = "id", label_column: str = "y",
                  normalize: bool = False, ids=None, prepare: str = "none", scaling_from: Sequence | None = None,
                  row_clip: Sequence | None = None):
    """``(sources, labels, ids)`` for FATE-style party CSVs, reading only ids and labels in the driver.

    With ``ids`` given (e.g. test files aligned to their own first file), those are used; labels are
    read from the first file in any case.
    """
    if len(party_files) < 1:
        raise InvalidParameterError("give at least one --party file.")
    first = Path(os.fspath(party_files[0]))
    cols = _header(first, "party 1 file")
    if id_column not in cols:
        raise DataFileError(f"party 1 file {first} has no id column {id_column!r}; its columns are {cols[:6]}; "
                            + separator_hint(cols, "pass --id-column."))
    if label_column not in cols:
        raise DataFileError(f"party 1 file {first} has no label column {label_column!r}; "
                            "the first party holds the labels (pass --label-column).")
    head = pd.read_csv(first, usecols=[id_column, label_column])
    if head[id_column].duplicated().any():
        dup = head[id_column][head[id_column].duplicated()].iloc[0]
        raise InvalidDataError(f"party 1 file {first} repeats id '{dup}'; ids must be unique per party.")
    if head[label_column].isna().any():
        raise InvalidDataError(f"label column {label_column!r} has missing values; drop those rows.")
    order = head[id_column].to_numpy() if ids is None else np.asarray(ids)
    labels = head.set_index(id_column)[label_column].loc[order].to_numpy()
    sources = []
    for m, path in enumerate(party_files, start=1):
        p = Path(os.fspath(path))
        names = _header(p, f"party {m} file")
        width = len([c for c in names if c not in (id_column, label_column)])
        if width == 0:
            raise InvalidDataError(f"party {m} has no feature columns; each party needs at least one.")
        sources.append(PartyFile(str(p), m, order, width, id_column, label_column, normalize, prepare,
                                 str(scaling_from[m - 1]) if scaling_from is not None else None,
                                 row_clip[m - 1] if row_clip is not None else None))
    return sources, labels, order
