"""Vertical data sets as the parties hold them: training and test blocks per party, labels coded ±1, and their
party-local preparation (the loaders behind ``dpadmm vertical`` and the vertical reproductions).

Labels are checked first (two classes, or a private run's declared binary domain; the test labels use the training
classes): :func:`encode_labels`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .._validation import binary_labels
from ..exceptions import InvalidDataError, InvalidParameterError
from . import load_a9a, load_libsvm, normalize_rows, partition_columns, read_party_files, row_norms
from .datasets import A9A_PARTIES
from .prepare import default_row_clip, prepare_block
from .remote import party_sources


@dataclass
class VerticalData:
    """Training and (optional) test party blocks, labels in {−1, +1}, and where they came from."""

    train: list[np.ndarray]
    y: np.ndarray
    test: list[np.ndarray] | None = None
    y_test: np.ndarray | None = None
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def party_sizes(self) -> tuple[int, ...]:
        return tuple(b.shape[1] for b in self.train)


def encode_labels(y, y_test, where: str, *, private: bool = False, classes=None):
    """Labels → {−1, +1}; test labels must use the training classes. Two classes read off the labels (non-private);
    a private run (``private``) or declared ``classes`` (negative, positive) maps every label against its declared
    domain and counts no class (:func:`dpadmm._validation.binary_labels`; red team 2026-11-29, T3)."""
    y_pm, found = binary_labels(f"labels of {where}", y, private=private, classes=classes, declarable=True)
    yt = None
    if y_test is not None and (private or classes is not None):  # the same declared domain, its own coding
        return y_pm, binary_labels(f"test labels of {where}", y_test, private=True, classes=classes,
                                   declarable=True)[0]
    classes = found
    if y_test is not None:
        arr = np.asarray(y_test).ravel()
        unknown = ~np.isin(arr, classes)
        if unknown.any():
            raise InvalidDataError(f"test labels contain {arr[unknown][0]!r}, not one of the training classes "
                                   f"{list(classes)}; use the same label coding.")
        yt = np.where(arr == classes[1], 1.0, -1.0)
    return y_pm, yt


def _parse_sizes(parties) -> list[int]:
    if isinstance(parties, str):
        try:
            return [int(p) for p in parties.split(",") if p.strip()]
        except ValueError:
            raise InvalidParameterError(f"--parties must be comma-separated integers like 66,57, got {parties!r}.") from None
    return [int(p) for p in parties]


def load_vertical_data(*, train=None, test=None, parties=None, party_files: Sequence = (),
                       test_party_files: Sequence = (), id_column: str = "id", label_column: str = "y",
                       bundled: bool = False, encode: bool = True, private: bool = False,
                       classes=None) -> VerticalData:
    """Load a vertical dataset from LIBSVM files + party sizes, party CSVs, or the bundled a9a; ``encode=False``
    keeps the labels as read (amounts, counts) instead of coding two classes ±1; ``private``, ``classes``: as
    :func:`encode_labels` codes them."""
    if bundled:
        X, y = load_a9a("train")
        Xt, yt = load_a9a("test")
        sizes = _parse_sizes(parties) if parties else list(A9A_PARTIES)
        return VerticalData(partition_columns(X, sizes), y, partition_columns(Xt, sizes), yt,
                            {"data": "a9a (bundled)", "parties": sizes})
    if party_files:
        if train is not None:
            raise InvalidParameterError("give either --train (LIBSVM) or --party files, not both.")
        blocks, labels, _, _ = read_party_files(party_files, id_column=id_column, label_column=label_column)
        tb, tl = None, None
        if test_party_files:
            if len(test_party_files) != len(party_files):
                raise InvalidParameterError(f"give one --test-party file per --party file "
                                            f"({len(party_files)}), got {len(test_party_files)}.")
            tb, tl, _, _ = read_party_files(test_party_files, id_column=id_column, label_column=label_column)
            for m, (a, b) in enumerate(zip(blocks, tb), start=1):
                if a.shape[1] != b.shape[1]:
                    raise InvalidDataError(f"test party {m} has {b.shape[1]} feature columns but training party {m} "
                                           f"has {a.shape[1]}; they must match.")
        if encode:
            labels, tl = encode_labels(labels, tl, "the first party file", private=private, classes=classes)
        return VerticalData(blocks, labels, tb, tl, {"party_files": [str(p) for p in party_files],
                                                     "test_party_files": [str(p) for p in test_party_files]})
    if train is None:
        raise InvalidParameterError("no data given: pass --data a9a (bundled), --train FILE --parties SIZES (LIBSVM) or one --party "
                                     "FILE per party (see docs/formats.md).")
    if not parties:
        raise InvalidParameterError("--train needs --parties, e.g. --parties 66,57 (column counts per party).")
    sizes = _parse_sizes(parties)
    X, y = load_libsvm(train)
    width = sum(sizes)
    if X.shape[1] > width:
        raise InvalidParameterError(f"party sizes {','.join(map(str, sizes))} sum to {width} but {train} uses "
                                    f"{X.shape[1]} features; give sizes that sum to the feature count.")
    # LIBSVM files need not use the last features (a9a.t never uses 123): the declared width rules
    X = np.pad(X, ((0, 0), (0, width - X.shape[1])))
    Xt = yt = None
    if test is not None:
        Xt, yt = load_libsvm(test)
        if Xt.shape[1] > width:
            raise InvalidParameterError(f"party sizes sum to {width} but {test} uses {Xt.shape[1]} features; "
                                        "give matching train and test files and sizes.")
        Xt = np.pad(Xt, ((0, 0), (0, width - Xt.shape[1])))
    blocks = partition_columns(X, sizes)
    tblocks = partition_columns(Xt, sizes) if Xt is not None else None
    if encode:
        y, yt = encode_labels(y, yt, str(train), private=private, classes=classes)
    return VerticalData(blocks, y, tblocks, yt, {"train": str(train), "test": str(test) if test else None,
                                                  "parties": sizes})


def normalized(data: VerticalData) -> VerticalData:
    """Per-party unit-norm rows ([Hu, Assumption 2.3]) for train and test."""
    return VerticalData([normalize_rows(b) for b in data.train], data.y,
                        [normalize_rows(b) for b in data.test] if data.test is not None else None,
                        data.y_test, dict(data.source, normalized_rows=True))


def row_clips(data: VerticalData, row_clip) -> list[float]:
    """R per party: ``"auto"`` = sqrt(d_m) (the RMS norm of a standardised row), or the given number."""
    return [default_row_clip(d) if row_clip in (None, "auto") else float(row_clip) for d in data.party_sizes]


def prepared(data: VerticalData, how: str, *, row_clip=None) -> VerticalData:
    """Party-local preparation (:func:`dpadmm.data.prepare.prepare_block`) of every block:
    statistics from the party's own training rows, reused for its test rows; ``row_clip``: a list of
    R per party (feature-private runs) or None."""
    if how == "none":
        return data
    if how == "normalize-rows":
        return normalized(data)
    clips = row_clip if row_clip is not None else [None] * len(data.train)
    train, test = [], [] if data.test is not None else None
    for m, B in enumerate(data.train):
        P, scaling = prepare_block(B, how, row_clip=clips[m])
        train.append(P)
        if test is not None:
            test.append(prepare_block(data.test[m], how, scaling=scaling, row_clip=clips[m])[0])
    return VerticalData(train, data.y, test, data.y_test,
                        dict(data.source, prepared=how, row_clip=row_clip))


def rows_are_normalized(blocks) -> bool:
    return all(np.all(np.abs(n[n > 0] - 1.0) <= 1e-6) for n in (row_norms(b) for b in blocks))


def load_vertical_sources(party_files, test_party_files=(), *, id_column: str = "id", label_column: str = "y",
                          normalize: bool = False, prepare: str = "none", row_clip=None, private: bool = False,
                          classes=None) -> VerticalData:
    """Party CSVs as :class:`~dpadmm.data.remote.PartyFile` sources: each party's worker reads its own
    file; the driver reads only the first file's ids and labels (data locality)."""
    kw = dict(prepare=prepare, row_clip=row_clip)
    train, labels, _ = party_sources(party_files, id_column=id_column, label_column=label_column, normalize=normalize,
                                     **kw)
    test = test_labels = None
    if test_party_files:
        if len(test_party_files) != len(party_files):
            raise InvalidParameterError(f"give one --test-party file per --party file "
                                        f"({len(party_files)}), got {len(test_party_files)}.")
        test, test_labels, _ = party_sources(test_party_files, id_column=id_column, label_column=label_column,
                                             normalize=normalize, scaling_from=list(party_files), **kw)
        for m, (a, b) in enumerate(zip(train, test), start=1):
            if a.shape[1] != b.shape[1]:
                raise InvalidDataError(f"test party {m} has {b.shape[1]} feature columns but training party {m} "
                                       f"has {a.shape[1]}; they must match.")
    labels, test_labels = encode_labels(labels, test_labels, "the first party file", private=private, classes=classes)
    return VerticalData(train, labels, test, test_labels,
                        {"party_files": [str(p) for p in party_files],
                         "test_party_files": [str(p) for p in test_party_files],
                         "data_locality": "each party's worker reads its own file", "normalized_rows": normalize,
                         "prepared": prepare})


__all__ = ["VerticalData", "encode_labels", "load_vertical_data", "load_vertical_sources", "normalized", "prepared",
           "row_clips", "rows_are_normalized"]
