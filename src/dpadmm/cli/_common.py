"""Shared CLI plumbing: one-line errors, atomic output directories, progress bars, JSON."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..exceptions import InvalidParameterError

console = Console(stderr=False)
err_console = Console(stderr=True)


def to_jsonable(obj: Any) -> Any:
    """numpy → Python; non-finite floats → None (JSON has no infinity: null means ε = ∞)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(to_jsonable(data), indent=2, allow_nan=False) + "\n")


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


@contextmanager
def progress(total: int, description: str, enabled: bool = True):
    """A rich progress bar; yields an engine callback ``cb(round, record)``."""
    if not enabled:
        yield lambda t, rec: None
        return
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=err_console,
                  transient=True) as bar:
        task = bar.add_task(description, total=total, info="")

        def cb(t, rec):
            info = ""
            if "objective" in rec:
                info = f"objective {rec['objective']:.5f}"
            bar.update(task, completed=t, info=info)

        yield cb
