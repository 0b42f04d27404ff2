"""Shared CLI plumbing: one-line errors, atomic output directories, progress, warnings, JSON.

Helpers every command can call:

- progress, heartbeats and phases: :mod:`dpadmm.cli._display`.
- :func:`show_warning_once` — installed by :func:`dpadmm.cli.main`: each distinct warning is
  printed once per run as ``warning: …``.
- the baselines and verdicts: :mod:`dpadmm.workflows.baselines`; JSON files: :mod:`dpadmm._jsonio`.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from rich.console import Console

from ..exceptions import InvalidParameterError

#: When the current command started (set by :func:`dpadmm.cli.main`; import time otherwise).
RUN_START = time.perf_counter()


def elapsed() -> float:
    """Seconds since the command started: ``wall_seconds`` in metrics.json covers the whole run."""
    return time.perf_counter() - RUN_START


def _width(fd: int) -> int | None:
    """Terminal: rich's own width. Pipe/file: COLUMNS or 200, so values never wrap mid-number."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    try:
        return None if os.isatty(fd) else 200
    except (OSError, ValueError):  # pragma: no cover - closed descriptors
        return 200


console = Console(stderr=False, soft_wrap=True, width=_width(1))
err_console = Console(stderr=True, soft_wrap=True, width=_width(2))


def show_warning_once(message, category, filename, lineno, file=None, line=None):
    """``warnings.showwarning`` replacement: ``warning: <message>``, each distinct message once per run."""
    text = " ".join(str(message).split())
    key = (getattr(category, "__name__", str(category)), text)
    if key in show_warning_once.seen:
        return
    show_warning_once.seen.add(key)
    print(f"warning: {text}", file=sys.stderr, flush=True)


show_warning_once.seen = set()


#: the smallest tolerance of a comparison, relative to the larger of the two values: two fits whose losses differ by
#: rounding (a 4e-10 difference between 0.1617 and 0.1617) are the same model, never a verdict
def standard_names(metrics: dict) -> dict:
    """The metric names every command's metrics.json shares (docs/reference/metrics.md, "Names every command
    shares"), added beside a command's own keys (which stay, as aliases): ``final.test_log_loss`` (the handed-over
    model's test log loss; consensus: the mean over runs, ``final.test_loss_mean``) and
    ``baselines.base_rate.test_log_loss`` (consensus: ``final.test_base_rate_loss``). Returns ``metrics``."""
    f = metrics.get("final")
    if not isinstance(f, dict):
        return metrics
    if "test_log_loss" not in f and "test_loss_mean" in f:
        f["test_log_loss"] = f["test_loss_mean"]
    if "test_base_rate_loss" in f:
        base = metrics.setdefault("baselines", {})
        if isinstance(base, dict):
            base.setdefault("base_rate", {}).setdefault("test_log_loss", f["test_base_rate_loss"])
            if "test_base_rate_source" in f:
                base["base_rate"].setdefault("source", f["test_base_rate_source"])
    return metrics


def fmt_prob(x: float) -> str:
    """A probability such as δ for people: 1e-05 -> '1e-5', 0.00031 -> '3.1e-4', 0.05 -> '0.05'."""
    if x == 0 or x >= 1e-2:
        return f"{x:.2g}"
    mant, exp = f"{x:.1e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


@contextmanager
def output_dir(out: str | os.PathLike | None):
    """Yield a staging directory; its files move into ``out`` only if the block succeeds.

    On any error nothing is written to ``out`` (it is not even created).
    """
    if out is None:
        with tempfile.TemporaryDirectory(prefix="dpadmm-") as tmp:
            yield Path(tmp)
        return
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise InvalidParameterError(f"--out {target} exists and is not a directory; give a directory path.")
    stage = Path(tempfile.mkdtemp(prefix=".dpadmm-stage-", dir=_stage_parent(target)))
    try:
        yield stage
        target.mkdir(parents=True, exist_ok=True)
        for item in stage.iterdir():
            dest = target / item.name
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)
            os.replace(item, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _stage_parent(target: Path) -> Path:
    parent = target.parent if target.parent != Path("") else Path(".")
    p = parent
    while not p.exists():
        p = p.parent
    return p


def party_data_refs(info: dict, names, key: str, ids, *, psi: bool, first_index: int, **params) -> list:
    """One :class:`~dpadmm.protocol.PartyData` reference per remote party (``names``, at column-block indices
    ``first_index, first_index + 1, …``) to its own file ``key``, joined on ``ids`` (or PSI-aligned); each party's
    column count comes from its Hello facts (``info``). Extra ``params`` (e.g. ``normalize``) go to every party."""

    from ..protocol import PartyData

    ids = np.asarray(ids)
    ids = ids.astype(str) if ids.dtype.kind == "O" else ids
    out = []
    for m, name in enumerate(names, start=first_index):
        facts = info[name].get("data", {}).get(key)
        if facts is None:
            raise InvalidParameterError(f"party {name!r} was started without --data {key}=FILE; restart it with its "
                                        f"{key} file.")
        cols = int(facts["columns"])
        join = {"psi": True} if psi else {"ids": ids}
        out.append(PartyData(key, {**join, "index": m, "n_features": cols, **params}, (int(len(ids)), cols)))
    return out
