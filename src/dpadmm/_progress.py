"""A process-wide status line for long jobs (reproductions), shown by the CLI's heartbeat.

Experiments call :func:`status` ("table 1: cell 3/21 (τ=0.5, ε=0.1)") whenever they move on; the
CLI prints the latest text periodically. Cheap and dependency-free, so any module may import it;
without the CLI nothing is printed.
"""

from __future__ import annotations

_text = ""


def status(text: str) -> None:
    """Set the current status text of the running job."""
    global _text
    _text = str(text)


def current() -> str:
    """The latest status text ("" if none)."""
    return _text


class Task:
    """A counter that keeps :func:`status` up to date: ``"<desc>: 3/10, ETA 40 s"``.

    Has the two methods of ``rich.progress.Progress`` the experiments use (``add_task``,
    ``update(task, advance=…)``), so a loop written against rich needs no change. Drawing is the
    CLI's job (one display per run: a spinner on a terminal, plain lines on a pipe).
    """

    def __init__(self, total: int | None, desc: str):
        import time

        self._time = time.perf_counter
        self.total, self.desc, self.done = total, desc, 0
        self._start = self._time()

    def __enter__(self) -> "Task":
        self._show()
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str = "", total: int | None = None) -> int:
        if total is not None:
            self.total = total
        return 0

    def update(self, task: int = 0, *, advance: int = 0, completed: int | None = None, **_) -> None:
        self.done = completed if completed is not None else self.done + advance
        self._show()

    advance = update

    def _show(self) -> None:
        text = f"{self.desc}: {self.done}" + (f"/{self.total}" if self.total else "")
        if self.total and 0 < self.done < self.total:
            eta = (self._time() - self._start) / self.done * (self.total - self.done)
            text += f", about {eta:.0f} s left"
        status(text)


def task(total: int | None, desc: str) -> Task:
    """``with task(n, "zhou-table1 reps") as t: ... t.update(advance=1)`` — see :class:`Task`."""
    return Task(total, desc)
