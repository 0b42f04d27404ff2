"""The fix a party's refusal of a run names, by its cause (issue 40, item 5): the budget already spent (no run
fits), one round's releases alone over what is left (fewer rounds cannot help: more noise), or the declared rounds
(fewer fit). Pure arithmetic on the ledger's counts; the composition is the caller's (:func:`.party_ledger.compose`)."""

from __future__ import annotations

import math
from typing import Callable

from .ledger_fold import add_counts


def refusal_fix(*, before: float, cap: float, spent_gaussian: dict, spent_pure: float, run_gaussian: dict,
                run_pure: float, rounds: int, compose: Callable[[dict, float], float]) -> str:
    """What to change, for a run whose declared releases (``run_gaussian`` {noise multiplier: count} and
    ``run_pure``, over ``rounds`` rounds) would bring the spend above ``cap``. ``spent_*``: what the ledger holds
    (with what open runs reserve); ``before``: its ε; ``compose(gaussian, pure)``: ε of such counts."""
    if before >= cap:
        return (f"its budget is spent (ε = {before:.4g} of --max-epsilon {cap:g}): no run on this data set can be "
                "served; its operator may raise --max-epsilon or serve other data")
    k = max(int(rounds), 1)
    one = {m: max(1, math.ceil(int(c) / k)) for m, c in run_gaussian.items() if int(c) > 0}  # one round's share
    one_after = compose(add_counts(dict(spent_gaussian), one), spent_pure + run_pure / k)
    if one_after > cap:
        what = "its one release" if k == 1 else "a single round's releases"
        return (f"{what} alone would bring the spend to ε = {one_after:.4g}, above the cap: fewer rounds cannot help; "
                "give more noise (a larger noise multiplier or a smaller per-round ε) or, as its operator, a larger "
                "--max-epsilon")
    return "declare fewer rounds or more noise"


__all__ = ["refusal_fix"]
