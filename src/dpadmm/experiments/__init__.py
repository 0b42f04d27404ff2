"""The paper reproductions ([Hu], [Zhang], [Zhou]) and the empirical privacy audit games (``dpadmm reproduce``,
``dpadmm audit``); the single runs behind the other commands live in :mod:`dpadmm.workflows`.

``REPRODUCTIONS`` maps a name (``hu-fig1`` …) to ``fn(out_dir: Path, quick: bool, **options) -> dict``;
each writes its PNG and data files into ``out_dir`` and returns a summary.
"""

from __future__ import annotations

import importlib
from typing import Callable

from .registry import REPRODUCTIONS, register  # noqa: F401  (the registry's home is .registry)

#: reproduction modules (they register themselves; imported on demand so that the CLI starts without them)
REPRODUCTION_MODULES = ("hu", "zhang", "zhang_attack", "zhou")


def load_all() -> dict[str, Callable]:
    """Import every reproduction module (they register themselves) and return the registry."""
    for mod in REPRODUCTION_MODULES:
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as exc:
            if mod == "hu" or exc.name != f"{__name__}.{mod}":
                raise
    return REPRODUCTIONS
