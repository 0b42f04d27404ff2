"""The reproductions the CLI can run, by name: ``REPRODUCTIONS`` filled by :func:`register` (each reproduction
module registers its functions; :func:`dpadmm.experiments.load_all` imports those modules on demand).
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
