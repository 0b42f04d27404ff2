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
