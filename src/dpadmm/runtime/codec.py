"""The message encoding of the party runtime and the gRPC backend: named arrays and scalars, never pickles,
never code (a party's checkpoints, its audit summaries and every wire message; ``backends.grpc_codec`` is its
old path).

A message is a tree of ``None``, ``bool``, ``int``, ``float``, ``str``, lists, tuples, string-keyed
dicts, numpy arrays of numeric / boolean / unicode dtype (``object`` dtype is refused), and
instances of *allow-listed* NamedTuple or dataclass types (the protocol's declared message and
option types). It is encoded as::

    b"DPADMM1\\n" | uint32 header length (big-endian) | header (JSON, UTF-8) | array buffers

The header describes the tree; an array is ``{"A": index, "dt": "<f8", "sh": [n]}`` pointing at
its raw bytes after the header; an allow-listed object is ``{"O": "module.Class", "F": {fields}}``
and is rebuilt by calling the class with those fields — only classes on the receiver's allow
list, so a message can never name code to run. Anything else (a pickle, another encoding, an
unknown type, a truncated buffer) raises :class:`DecodeError` with a one-line reason.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from typing import Any, Iterable

import numpy as np

from ..kernels.regularizers import L1, L2, ElasticNet
from ..privacy.events import GaussianRelease, PureDPRelease, Relation
from ..protocol import PartyData
from .messages import describe, flatten

MAGIC = b"DPADMM1\n"
_ALLOWED_KINDS = set("biufcU")
_HEADER = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # one encoder, not one per message
_DTYPES: dict = {}  # wire dtype string -> np.dtype (a round's few dtypes are parsed once, not once per array)
_DTYPE_NAMES: dict = {}  # np.dtype -> str(dtype) for the audit summary (numpy's __str__ is Python code)


def _dtype(text) -> np.dtype:
    dt = _DTYPES.get(text) if isinstance(text, str) else None
    if dt is None:
        dt = np.dtype(text)
        if isinstance(text, str) and len(_DTYPES) < 256:
            _DTYPES[text] = dt
    return dt


def _dtype_name(dt: np.dtype) -> str:
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = str(dt)
        if len(_DTYPE_NAMES) < 256:
            _DTYPE_NAMES[dt] = name
    return name


class DecodeError(ValueError):
    """The bytes are not a well-formed dpadmm message (or name a type that is not allowed)."""


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _core_types() -> list[type]:
    return [GaussianRelease, PureDPRelease, Relation, L1, L2, ElasticNet, PartyData]


def allow_list(types: Iterable[type] = ()) -> dict[str, type]:
    """``{wire name: class}`` for the core types (privacy events, regularisers, PartyData) plus ``types``."""
    return {type_name(c): c for c in [*_core_types(), *types]}


_TYPE_NAMES: dict = {}


def _type_name_cached(cls: type) -> str:
    name = type_name(cls)
    if len(_TYPE_NAMES) < 1024:
        _TYPE_NAMES[cls] = name
    return name


_OBJECT_FIELDS: dict = {}  # NamedTuple / dataclass type -> (wire name, field names sent, is a NamedTuple)


def _is_namedtuple(obj) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


class _Encoder:
    def __init__(self, allowed: dict[str, type]):
        self.allowed = allowed
        self.buffers: list[bytes] = []

    def array(self, arr: np.ndarray) -> dict:
        if arr.dtype.kind not in _ALLOWED_KINDS:
            raise TypeError(f"arrays of dtype {arr.dtype} cannot be sent (numeric, boolean or unicode only)")
        # the array's own memory (C order): joined into the message once, with no intermediate bytes copy
        buf = np.ascontiguousarray(arr)
        self.buffers.append(memoryview(buf).cast("B") if buf.nbytes else b"")
        return {"A": len(self.buffers) - 1, "dt": arr.dtype.str, "sh": list(arr.shape)}

    def declared(self, spec: tuple, obj: Any):
        """A NamedTuple / dataclass of a declared type, from its ``(wire name, fields, is a NamedTuple)``."""
        name, fields, named_tuple = spec
        if name not in self.allowed:
            raise TypeError(f"type {name} is not declared by the protocol")
        if named_tuple:
            return {"O": name, "F": {k: self.enc(v) for k, v in zip(fields, obj)}}
        return {"O": name, "F": {k: self.enc(getattr(obj, k)) for k in fields}}

    def enc(self, obj: Any):
        t = type(obj)  # the common exact types first (a round's message is a few of these)
        if t is np.ndarray:
            return self.array(obj)
        if t is dict and all(type(k) is str for k in obj):
            return {"D": {k: self.enc(v) for k, v in obj.items()}}
        if t is list:
            return [self.enc(v) for v in obj]
        if t is float:
            return obj if math.isfinite(obj) else {"f": repr(obj)}
        if t is int or t is bool or t is str or obj is None:
            return obj
        if t in _NUMPY_SCALARS:  # e.g. a float64 in a privacy event
            return {"N": self.array(np.asarray(obj))}
        spec = _OBJECT_FIELDS.get(t)  # a NamedTuple or dataclass type met before: its wire name and fields
        if spec is not None:
            return self.declared(spec, obj)
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int) and not isinstance(obj, np.generic):
            return obj
        if isinstance(obj, float) and not isinstance(obj, np.generic):
            return obj if np.isfinite(obj) else {"f": repr(obj)}
        if isinstance(obj, np.ndarray):
            return self.array(obj)
        if isinstance(obj, np.generic):
            return {"N": self.array(np.asarray(obj))}
        name = _TYPE_NAMES.get(t) or _type_name_cached(t)
        if _is_namedtuple(obj):
            spec = (name, tuple(obj._fields), True)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            spec = (name, tuple(f.name for f in dataclasses.fields(obj) if f.init), False)
        if spec is not None:
            if len(_OBJECT_FIELDS) < 1024:
                _OBJECT_FIELDS[t] = spec
            return self.declared(spec, obj)
        if isinstance(obj, tuple):
            return {"T": [self.enc(v) for v in obj]}
        if isinstance(obj, list):
            return [self.enc(v) for v in obj]
        if isinstance(obj, dict):
            if not all(isinstance(k, str) for k in obj):
                raise TypeError("dict keys must be strings")
            return {"D": {k: self.enc(v) for k, v in obj.items()}}
        raise TypeError(f"values of type {name} cannot be sent (arrays, scalars and declared types only)")


def encode(obj: Any, types: Iterable[type] = (), *, allowed: dict[str, type] | None = None) -> bytes:
    """Encode ``obj`` (see the module docstring); ``TypeError`` names what cannot be sent."""
    enc = _Encoder(allowed if allowed is not None else allow_list(types))
    tree = enc.enc(obj)
    offsets, pos = [], 0
    for b in enc.buffers:
        offsets.append([pos, len(b)])
        pos += len(b)
    header = _HEADER({"t": tree, "b": offsets}).encode()
    return b"".join([MAGIC, struct.pack(">I", len(header)), header, *enc.buffers])


def decode(data: bytes, types: Iterable[type] = (), *, allowed: dict[str, type] | None = None) -> Any:
    """Decode bytes made by :func:`encode`; anything else raises :class:`DecodeError`."""
    allowed = allowed if allowed is not None else allow_list(types)
    if type(data) is not bytes:
        data = bytes(data)
    if not data.startswith(MAGIC):
        what = "a pickle" if data[:1] == b"\x80" else "not a dpadmm message"
        raise DecodeError(f"refused: {what} (only dpadmm's array/scalar encoding is accepted; pickles and code "
                          "are never run)")
    try:
        (hlen,) = struct.unpack(">I", data[len(MAGIC):len(MAGIC) + 4])
        start = len(MAGIC) + 4
        header = json.loads(data[start:start + hlen].decode("utf-8"))
        body = memoryview(data)[start + hlen:]
        offsets = header["b"]
    except Exception as exc:
        raise DecodeError(f"refused: malformed dpadmm message header ({type(exc).__name__})") from None

    def arr(node):
        try:
            off, n = offsets[node["A"]]
            dt = _dtype(node["dt"])
            shape = tuple(map(int, node["sh"]))
        except Exception:
            raise DecodeError("refused: malformed array descriptor") from None
        if dt.kind not in _ALLOWED_KINDS:
            raise DecodeError(f"refused: array dtype {dt} is not allowed")
        # exact integer product (no int64 wrap-around); a negative extent is malformed
        if (off < 0 or off + n > len(body) or (shape and min(shape) < 0)
                or n != math.prod(shape) * dt.itemsize):
            raise DecodeError("refused: array buffer out of bounds or of the wrong size")
        return np.frombuffer(body[off:off + n], dtype=dt).reshape(shape).copy()

    def dec(node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [dec(v) for v in node]
        if not isinstance(node, dict) or len(node) == 0:
            raise DecodeError("refused: malformed node")
        if "A" in node:
            return arr(node)
        if "N" in node:
            return arr(node["N"])[()]
        if "f" in node:
            return float(node["f"])
        if "T" in node:
            return tuple(dec(v) for v in node["T"])
        if "D" in node:
            return {str(k): dec(v) for k, v in node["D"].items()}
        if "O" in node:
            cls = allowed.get(node["O"])
            if cls is None:
                raise DecodeError(f"refused: type {node['O']!r} is not declared by this party's protocol")
            try:
                return cls(**{k: dec(v) for k, v in node["F"].items()})
            except DecodeError:
                raise
            except Exception as exc:
                raise DecodeError(f"refused: cannot build {node['O']} ({type(exc).__name__}: {exc})") from None
        raise DecodeError("refused: malformed node")

    return dec(header["t"])


_SCALARS = {bool: ("bool", 1), int: ("int64", 8), float: ("float64", 8)}


def _summarize_fast(obj: Any, prefix: str, out: list) -> bool:
    """The common case of :func:`summarize` without the generic flattening (arrays, scalars, strings,
    NamedTuples, dicts, lists); False when something else is inside (then the generic path runs)."""
    leaves: list = []
    if not _leaves(obj, prefix, leaves):
        return False
    out.extend({"name": n, "shape": list(shape), "dtype": dt, "bytes": int(nb)} for n, shape, dt, nb in leaves)
    return True


def summarize(obj: Any) -> list[dict]:
    """``[{name, shape, dtype, bytes}]`` of every leaf — what an audit log records (never values)."""
    out: list = []
    if _summarize_fast(obj, "", out):
        return out
    return _summarize_generic(obj)


def _summarize_generic(obj: Any) -> list[dict]:
    """:func:`summarize` by the transcript's flattening (any message; the reference for the fast path)."""
    out = []
    for name, leaf in flatten(obj):
        if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            leaf = type_name(type(leaf))
        shape, dtype, nbytes = describe(leaf) if not isinstance(leaf, str) else ([len(leaf)], "str", len(leaf))
        out.append({"name": name, "shape": shape, "dtype": dtype, "bytes": nbytes})
    return out


def _leaves(obj: Any, prefix: str, out: list) -> bool:
    """The leaves of a message in the common case (arrays, scalars, strings, NamedTuples, declared dataclasses, dicts,
    lists) as tuples (name, shape, dtype, bytes); False when something else is inside."""
    t = type(obj)
    if t is np.ndarray:
        out.append((prefix or "value", obj.shape, _dtype_name(obj.dtype), obj.nbytes))
    elif t in _SCALARS:
        dt, nb = _SCALARS[t]
        out.append((prefix or "value", (), dt, nb))
    elif t is str:
        out.append((prefix or "value", (len(obj),), "str", len(obj)))
    elif obj is None:
        pass
    elif t is dict:
        for k, v in obj.items():
            if not _leaves(v, f"{prefix}.{k}" if prefix else str(k), out):
                return False
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for k, v in zip(obj._fields, obj):
            if not _leaves(v, f"{prefix}.{k}" if prefix else k, out):
                return False
    elif t is list or t is tuple:
        for i, v in enumerate(obj):
            if not _leaves(v, f"{prefix}.{i}" if prefix else str(i), out):
                return False
    elif t in _NUMPY_SCALARS:  # e.g. a float64 sensitivity in a privacy event: as numpy describes it
        out.append((prefix or "value", (), _dtype_name(obj.dtype), obj.nbytes))
    elif dataclasses.is_dataclass(t):  # a declared dataclass (e.g. the step's privacy events): its fields
        for k in _field_names(t):
            if not _leaves(getattr(obj, k), f"{prefix}.{k}" if prefix else k, out):
                return False
    else:
        return False
    return True


_NUMPY_SCALARS = frozenset({np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint64,
                            np.uint32, np.uint16, np.uint8, np.bool_, np.complex128, np.complex64})
_FIELD_NAMES: dict = {}  # dataclass type -> its field names (dataclasses.fields is Python code)


def _field_names(t: type) -> tuple:
    names = _FIELD_NAMES.get(t)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(t))
        if len(_FIELD_NAMES) < 1024:
            _FIELD_NAMES[t] = names
    return names


_SUMMARY_TEXT: dict = {}  # leaves -> their JSON text (a protocol's rounds repeat a few message structures)


def summary_json(obj: Any) -> str:
    """``json.dumps(summarize(obj))``, the same text, from a cache of the few message structures a run repeats."""
    leaves: list = []
    if not _leaves(obj, "", leaves):
        return json.dumps(summarize(obj))
    key = tuple(leaves)
    text = _SUMMARY_TEXT.get(key)
    if text is None:
        text = json.dumps([{"name": n, "shape": list(sh), "dtype": dt, "bytes": int(nb)} for n, sh, dt, nb in leaves])
        if len(_SUMMARY_TEXT) < 4096:
            _SUMMARY_TEXT[key] = text
    return text
