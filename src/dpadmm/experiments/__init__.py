"""Jobs behind the CLI: single runs (with metrics.json) and paper reproductions.

``REPRODUCTIONS`` maps a name (``hu-fig1`` …) to ``fn(out_dir: Path, quick: bool, **options) -> dict``;
each writes its PNG and data files into ``out_dir`` and returns a summary.
"""

from __future__ import annotations

from typing import Callable

REPRODUCTIONS: dict[str, Callable] = {}


def register(name: str):
    """Decorator adding a reproduction to ``REPRODUCTIONS``."""
    def deco(fn):
        REPRODUCTIONS[name] = fn
        return fn
    return deco


def load_all() -> dict[str, Callable]:
    """Import every reproduction module (they register themselves) and return the registry."""
    from . import hu  # noqa: F401

    for mod in ("zhang", "zhou"):
        try:
            __import__(f"{__name__}.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{mod}":
                raise
    return REPRODUCTIONS
