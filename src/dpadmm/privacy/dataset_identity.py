"""What a "data set" is for a party's budget: the rows it holds, not the bytes or the name of a file.

A party's ledger (:mod:`dpadmm.privacy.ledger_store`) keeps one budget per data set and per organisation. The data
set's identity is a canonical digest of the *parsed* table (:func:`table_digest`):

- the file is decoded whatever its encoding (a UTF-8 or UTF-16 byte-order mark, else UTF-8, else Latin-1) and read
  as CSV, so line ends (LF, CRLF), a trailing newline, quoting and the spelling of a number (``1``, ``1.0``,
  ``1e0``) do not matter;
- every column is a column of numbers (float64, ``-0.0`` as ``0.0``) or of strings (the ids); the column *names*
  are left out (a renamed column is the same data), and the columns are put in a canonical order — by a digest of
  each column's sorted values, ties by name — so their order in the file does not matter;
- the rows are then sorted (lexicographically over those columns), so the row order does not matter.

Two files are the same data set exactly when they hold the same multiset of rows (up to column order and names).
Anything else is *another* data set with a budget of its own: a row added, removed or changed, a value rounded, a
column added or dropped. An operator whose files are versions of one data set (a refreshed extract, a sample)
declares it by name (``party serve --data-set NAME``, the policy's ``data_set``): the budget is then keyed by that
name, and the digests of the files served under it are recorded beside it.

A file that does not parse as CSV (e.g. LIBSVM) is identified by its bytes with line ends normalised (CRLF and CR
to LF) and trailing white space removed. A party serving several files without a ``train`` file is identified by
all of them but its ``model`` file (a model is derived from a data set, not a data set of its own).
"""

from __future__ import annotations

import codecs
import hashlib
import io
from pathlib import Path
from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from ..exceptions import DataFileError

_NOT_THE_DATA = ("model",)


class DataSetId(NamedTuple):
    """The key of a data set's budget in the store, the content digest(s) behind it and the names it was seen as."""

    key: str  # "sha256:<digest>" or "name:<operator's name>"
    digest: str
    seen_as: tuple


def _decode(raw: bytes) -> str:
    for bom, enc in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                     (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"), (codecs.BOM_UTF8, "utf-8-sig")):
        if raw.startswith(bom):
            return raw.decode(enc)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _text_digest(text: str) -> str:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return hashlib.sha256("\n".join(line.rstrip() for line in lines).strip("\n").encode()).hexdigest()


def table_digest(path) -> str:
    """The canonical digest of the table in ``path`` (see the module's docstring)."""
    raw = Path(path).read_bytes()
    text = _decode(raw)
    try:
        df = pd.read_csv(io.StringIO(text), skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError):
        return "text:" + _text_digest(text)
    if df.shape[1] < 1 or df.shape[0] < 1:
        return "text:" + _text_digest(text)
    cols = []
    for name in df.columns:
        col = df[name]
        if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            v = col.to_numpy(dtype=np.float64) + 0.0  # 1 and 1.0 alike; -0.0 + 0.0 is 0.0
            cols.append(("n", v, hashlib.sha256(b"n" + np.sort(v).tobytes()).hexdigest(), str(name)))
        else:
            v = col.astype(str).str.strip().to_numpy(dtype=object).astype(str)
            cols.append(("s", v, hashlib.sha256(b"s" + "\x1f".join(np.sort(v)).encode()).hexdigest(), str(name)))
    cols.sort(key=lambda c: (c[2], c[3]))
    codes = [np.unique(c[1], return_inverse=True)[1] for c in cols]
    order = np.lexsort(codes[::-1])  # rows sorted by the first canonical column, then the next, …
    h = hashlib.sha256(f"table/1:{df.shape[0]}x{df.shape[1]}".encode())
    for kind, v, _, _ in cols:
        h.update(kind.encode())
        h.update(v[order].tobytes() if kind == "n" else "\x1f".join(v[order]).encode())
    return "table:" + h.hexdigest()


def data_set_id(party: str, data: Mapping[str, object], declared: str | None = None) -> DataSetId:
    """The identity of the data set a party serves (``data``: its ``{key: file}``): the digest of its ``train`` file
    (without one: of every file but the model, by key), keyed by the operator's ``declared`` name if given. A party
    without files (its data comes from the coordinator in a simulation) is keyed by its own name."""
    files = {k: Path(v) for k, v in data.items() if k not in _NOT_THE_DATA}
    if "train" in files:
        files = {"train": files["train"]}
    for key, path in files.items():
        if not path.is_file():
            raise DataFileError(f"party {party!r}: data file {key}={path} not found; check --data.")
    if not files:
        digest = "party:" + party
    elif len(files) == 1:
        digest = table_digest(next(iter(files.values())))
    else:
        joined = "\n".join(f"{k}={table_digest(p)}" for k, p in sorted(files.items()))
        digest = "files:" + hashlib.sha256(joined.encode()).hexdigest()
    key = f"name:{declared}" if declared else digest
    return DataSetId(key, digest, tuple(f"{k}={p.name}" for k, p in sorted(files.items())))
