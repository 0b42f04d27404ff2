"""Shared CLI plumbing: one-line errors, atomic output directories, progress, warnings, JSON.

Helpers every command can call:

- :func:`progress` — a rich progress bar on a terminal; on a pipe or file, plain periodic lines
  on stderr (``vertical ADMM: 40/100 rounds, 12 s``), so long runs are never silent.
- :func:`heartbeat` — for jobs without a round count (reproductions): a spinner on a terminal,
  on a pipe a plain line every ``interval`` seconds with the elapsed time and the latest
  :func:`dpadmm._progress.status` text the job set.
- :func:`show_warning_once` — installed by :func:`dpadmm.cli.main`: each distinct warning is
  printed once per run as ``warning: …``.
- the baselines and verdicts: :mod:`._baselines`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ..exceptions import InvalidParameterError

#: Seconds between plain progress lines when stderr is not a terminal.
PLAIN_PROGRESS_INTERVAL = 10.0

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


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # pragma: no cover
        return False


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


def phase(text: str) -> None:
    """Name what the command is doing now ("loading party files", "PSI alignment"): a piped heartbeat line shows it."""
    from .. import _progress

    _progress.status(text)


def _plain_line(label: str, phase_text: str, seconds: float) -> str:
    """A piped heartbeat line: ``<label>: <phase>, 40 s elapsed`` (no phase named yet: ``<label>: 40 s elapsed``)."""
    return f"{label}: " + (f"{phase_text}, " if phase_text else "") + f"{seconds:.0f} s elapsed"


@contextmanager
def progress(total: int, description: str, enabled: bool = True, interval: float | None = None):
    """Progress of a run with ``total`` rounds; yields an engine callback ``cb(round, record)``.

    On a terminal: a transient rich bar. Otherwise: a plain line on stderr at most every
    ``interval`` seconds (default :data:`PLAIN_PROGRESS_INTERVAL`) and one when the run ends.
    """
    if not enabled:
        yield lambda t, rec: None
        return
    with _displaying():
        yield from _progress_impl(total, description, interval)


def _progress_impl(total, description, interval):
    if not _stderr_is_terminal():
        every = PLAIN_PROGRESS_INTERVAL if interval is None else interval
        start = time.perf_counter()
        state = {"last": start, "t": 0, "info": ""}

        def plain(t, rec):
            state["t"] = t
            if "objective" in rec:
                state["info"] = f", objective {rec['objective']:.5f}"
            now = time.perf_counter()
            if now - state["last"] >= every:
                state["last"] = now
                left = f", ~{(now - start) / t * (total - t):.0f} s left" if 0 < t < total else ""
                print(f"{description}: training: round {t}/{total}, {now - start:.0f} s elapsed{left}{state['info']}",
                      file=sys.stderr, flush=True)

        yield plain
        if time.perf_counter() - start >= every:
            print(f"{description}: done, {state['t']}/{total} rounds in {time.perf_counter() - start:.0f} s",
                  file=sys.stderr, flush=True)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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


@contextmanager
def heartbeat(label: str, enabled: bool = True, interval: float | None = None):
    """Show that a long job without a round count is alive.

    Terminal: a rich spinner with the elapsed time and the job's latest status text.
    Pipe/file: a plain stderr line when the job starts, one after 5 s, then every ``interval``
    seconds (default :data:`PLAIN_PROGRESS_INTERVAL`): ``<label>: 40 s elapsed — <status>``, and
    one when it ends (``<label>: done in 12 s``). Jobs set the status
    text with :func:`dpadmm._progress.status` (cheap, importable anywhere).
    """
    from .. import _progress

    _progress.status("")
    if not enabled:
        yield
        return
    start = time.perf_counter()
    stop = threading.Event()
    every = PLAIN_PROGRESS_INTERVAL if interval is None else interval
    if _stderr_is_terminal():
        status = err_console.status(f"{label}")

        def tick():
            while not stop.wait(1.0):
                text = _progress.current()
                status.update(f"{label}: {time.perf_counter() - start:.0f} s" + (f" — {text}" if text else ""))

        status.start()
    else:
        print(f"{label}: started", file=sys.stderr, flush=True)

        def tick():
            wait = min(5.0, every)  # the first line early, then every `every` seconds
            while not stop.wait(wait):
                wait = every
                print(_plain_line(label, _progress.current(), time.perf_counter() - start), file=sys.stderr,
                      flush=True)

    thread = threading.Thread(target=tick, name="dpadmm-heartbeat", daemon=True)
    thread.start()
    _ACTIVE[0] += 1
    try:
        yield
    finally:
        _ACTIVE[0] -= 1
        stop.set()
        thread.join(timeout=2.0)
        if _stderr_is_terminal():
            status.stop()
        else:
            print(f"{label}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


_ACTIVE = [0]  # progress bars / heartbeats currently shown (the ambient heartbeat stays quiet meanwhile)


@contextmanager
def _displaying():
    _ACTIVE[0] += 1
    try:
        yield
    finally:
        _ACTIVE[0] -= 1


@contextmanager
def ambient_heartbeat(label: str, interval: float | None = None, enabled: bool = True):
    """Wrapped around every command by :func:`dpadmm.cli.main`: on a pipe, if a command runs for
    more than 20 s without its own progress display, print ``<label>: 40 s elapsed`` lines (then
    every ``interval`` seconds) so that no long run is silent. Quiet on a terminal."""
    if not enabled or _stderr_is_terminal():
        yield
        return
    from .. import _progress

    every = PLAIN_PROGRESS_INTERVAL if interval is None else interval
    start = time.perf_counter()
    stop = threading.Event()

    def tick():
        wait = max(every, 20.0)  # first line only after 20 s: quick commands (and their errors) stay one line
        while not stop.wait(wait):
            wait = every
            if _ACTIVE[0] == 0:
                print(_plain_line(label, _progress.current(), time.perf_counter() - start), file=sys.stderr,
                      flush=True)

    thread = threading.Thread(target=tick, name="dpadmm-ambient-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2.0)


def party_data_refs(info: dict, names, key: str, ids, *, psi: bool, first_index: int, **params) -> list:
    """One :class:`~dpadmm.protocol.PartyData` reference per remote party (``names``, at column-block indices
    ``first_index, first_index + 1, …``) to its own file ``key``, joined on ``ids`` (or PSI-aligned); each party's
    column count comes from its Hello facts (``info``). Extra ``params`` (e.g. ``normalize``) go to every party."""
    import numpy as np

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
