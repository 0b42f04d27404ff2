"""Where a run is, on a terminal and on a pipe: the phase, round k/T and the time left, at a steady cadence.

- :func:`progress` — a run with a round count. Terminal: a transient rich bar naming the phase. Pipe or file: a
  plain stderr line every interval, whether or not a round has ended since the last one
  (``vertical ADMM: training: round 12/100, 8 s elapsed, ~20 s left``), and a last line that never counts more
  rounds than the run declared (``done, 100/100 rounds in 27 s`` or ``stopped early at round 64 of 100 …``).
- :func:`heartbeat` — a job without a round count (reproductions, audits): a spinner on a terminal, plain lines
  on a pipe with the job's latest :func:`dpadmm._progress.status` text.
- :func:`ambient_heartbeat` — around every command (:func:`dpadmm.cli.main`): on a pipe, while no display of its
  own runs, ``<label>: <phase>, 40 s elapsed`` lines, so that loading, PSI, calibration or scoring are never
  silent either.
- :func:`phase` — name what the command is doing now; every display shows it.

The interval is :data:`PLAIN_PROGRESS_INTERVAL` (10 s), or ``DPADMM_PROGRESS_INTERVAL`` seconds when that
environment variable is set (tests set it small).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from contextlib import contextmanager

from .. import _progress
from ..exceptions import InvalidParameterError

#: Seconds between plain progress lines when stderr is not a terminal (``DPADMM_PROGRESS_INTERVAL`` overrides it).
PLAIN_PROGRESS_INTERVAL = 10.0
INTERVAL_ENV = "DPADMM_PROGRESS_INTERVAL"
MIN_WAIT = 0.05  # the display threads wake at most this often (a tiny interval: a line at every round's end)

_ACTIVE = [0]  # progress bars / heartbeats currently shown (the ambient heartbeat stays quiet meanwhile)


def interval_seconds(interval: float | None = None) -> float:
    """``interval`` if given, else ``DPADMM_PROGRESS_INTERVAL`` (checked: a positive number), else 10 s."""
    if interval is not None:
        return float(interval)
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return PLAIN_PROGRESS_INTERVAL
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InvalidParameterError(f"{INTERVAL_ENV}={raw!r} is not a positive number of seconds; unset it (a "
                                    f"progress line every {PLAIN_PROGRESS_INTERVAL:g} s) or give e.g. "
                                    f"{INTERVAL_ENV}=5.")
    return value


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # pragma: no cover
        return False


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def phase(text: str) -> None:
    """Name what the command is doing now ("loading party files", "PSI alignment"): every display shows it."""
    _progress.status(text)


def _plain_line(label: str, phase_text: str, seconds: float) -> str:
    """A piped heartbeat line: ``<label>: <phase>, 40 s elapsed`` (no phase named yet: ``<label>: 40 s elapsed``)."""
    return f"{label}: " + (f"{phase_text}, " if phase_text else "") + f"{seconds:.0f} s elapsed"


def _left(done: int, total: int, seconds: float) -> str:
    return f", ~{seconds / done * (total - done):.0f} s left" if 0 < done < total else ""


def final_line(description: str, done: int, total: int, seconds: float) -> str:
    """The last line of a run: never more rounds than declared; fewer said as an early stop."""
    if done == total:
        return f"{description}: done, {done}/{total} rounds in {seconds:.0f} s"
    if done < total:
        return f"{description}: stopped early at round {done} of {total}, after {seconds:.0f} s"
    return f"{description}: done, {done} rounds in {seconds:.0f} s"  # a caller that under-declared: no k/T > 1


@contextmanager
def progress(total: int, description: str, enabled: bool = True, interval: float | None = None):
    """Progress of a run with ``total`` rounds; yields an engine callback ``cb(round, record)``.

    The phase is "training" unless the run names another with :func:`phase` (e.g. "range estimate").
    """
    if not enabled:
        yield lambda t, rec: None
        return
    phase("training")
    _ACTIVE[0] += 1
    try:
        if _stderr_is_terminal():
            yield from _bar(total, description)
        else:
            yield from _plain(total, description, interval_seconds(interval))
    finally:
        _ACTIVE[0] -= 1
        phase("evaluating and writing outputs")  # until the command names its next phase


def _plain(total: int, description: str, every: float):
    start = time.perf_counter()
    state = {"last": start, "t": 0, "info": "", "printed": False}
    lock = threading.Lock()

    def emit(now):
        t, seconds = state["t"], now - start
        where = (f"{_progress.current() or 'training'}: round {t}/{total}" if t < total else
                 f"rounds done ({t}/{total}), evaluating")
        _say(f"{description}: {where}, {seconds:.0f} s elapsed{_left(t, total, seconds)}{state['info']}")
        state["last"], state["printed"] = now, True

    def cb(t, rec):
        with lock:
            state["t"] = int(t)
            if "objective" in rec:
                state["info"] = f", objective {rec['objective']:.5f}"
            now = time.perf_counter()
            if now - state["last"] >= every:
                emit(now)

    stop = threading.Event()

    def tick():  # a line every interval even when no round ends in it (a slow round, a silent backend)
        while not stop.wait(max(MIN_WAIT, state["last"] + every - time.perf_counter())):
            with lock:
                now = time.perf_counter()
                if now - state["last"] >= every:
                    emit(now)

    thread = threading.Thread(target=tick, name="dpadmm-progress", daemon=True)
    thread.start()
    try:
        yield cb
    finally:
        stop.set()
        thread.join(timeout=2.0)
        seconds = time.perf_counter() - start
        if state["printed"] or seconds >= every:
            _say(final_line(description, state["t"], total, seconds))


def _bar(total: int, description: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from ._common import err_console

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=err_console,
                  transient=True) as bar:
        task = bar.add_task(f"{description}: training", total=total, info="")

        def cb(t, rec):
            info = f"objective {rec['objective']:.5f}" if "objective" in rec else ""
            bar.update(task, completed=min(int(t), total), info=info,
                       description=f"{description}: {_progress.current() or 'training'}")

        yield cb


@contextmanager
def heartbeat(label: str, enabled: bool = True, interval: float | None = None):
    """Show that a long job without a round count is alive.

    Terminal: a rich spinner with the elapsed time and the job's latest status text.
    Pipe/file: a plain stderr line when the job starts, one after 5 s (or the interval, if shorter), then every
    interval: ``<label>: <status>, 40 s elapsed``, and one when it ends (``<label>: done in 12 s``). Jobs set the
    status text with :func:`dpadmm._progress.status` (cheap, importable anywhere).
    """
    _progress.status("")
    if not enabled:
        yield
        return
    start = time.perf_counter()
    stop = threading.Event()
    every = interval_seconds(interval)
    terminal = _stderr_is_terminal()
    if terminal:
        from ._common import err_console

        status = err_console.status(f"{label}")

        def tick():
            while not stop.wait(1.0):
                text = _progress.current()
                status.update(f"{label}: {time.perf_counter() - start:.0f} s" + (f" — {text}" if text else ""))

        status.start()
    else:
        _say(f"{label}: started")

        def tick():
            wait = max(MIN_WAIT, min(5.0, every))  # the first line early, then every `every` seconds
            while not stop.wait(wait):
                wait = max(MIN_WAIT, every)
                _say(_plain_line(label, _progress.current(), time.perf_counter() - start))

    thread = threading.Thread(target=tick, name="dpadmm-heartbeat", daemon=True)
    thread.start()
    _ACTIVE[0] += 1
    try:
        yield
    finally:
        _ACTIVE[0] -= 1
        stop.set()
        thread.join(timeout=2.0)
        if terminal:
            status.stop()
        else:
            _say(f"{label}: done in {time.perf_counter() - start:.0f} s")


@contextmanager
def ambient_heartbeat(label: str, interval: float | None = None, enabled: bool = True):
    """Wrapped around every command by :func:`dpadmm.cli.main`: on a pipe, once a command has run for two
    intervals (20 s by default) without a progress display of its own, print ``<label>: <phase>, 40 s elapsed``
    every interval, so that no long run is silent. Quiet on a terminal."""
    if not enabled or _stderr_is_terminal():
        yield
        return
    every = interval_seconds(interval)
    start = time.perf_counter()
    stop = threading.Event()
    phase("starting")  # until the command names its first phase (loading data, …)

    def tick():
        wait = max(MIN_WAIT, 2 * every)  # the first line after two intervals: quick commands stay one line
        while not stop.wait(wait):
            wait = max(MIN_WAIT, every)
            if _ACTIVE[0] == 0:
                _say(_plain_line(label, _progress.current(), time.perf_counter() - start))

    thread = threading.Thread(target=tick, name="dpadmm-ambient-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2.0)
