"""``dpadmm reproduce NAME --out DIR [--quick]``: a paper figure or table with its data."""

from __future__ import annotations

from pathlib import Path

import typer

from . import app
from ._common import console, output_dir
from ..exceptions import InvalidParameterError


@app.command()
def reproduce(
    name: str = typer.Argument(..., help="hu-fig1|hu-fig2|hu-fig3 (and the other papers' figures/tables)."),
    out: Path = typer.Option(..., help="Output directory."),
    quick: bool = typer.Option(False, "--quick", help="Smaller, faster version (for smoke tests)."),
    reps: int = typer.Option(0, help="Repetitions, where the reproduction has them (0 = its default)."),
    seed: int = typer.Option(0, help="Root random seed."),
):
    """Reproduce a figure or table of one of the three papers."""
    from ..experiments import load_all

    registry = load_all()
    if name not in registry:
        raise InvalidParameterError(f"unknown reproduction {name!r}; choose one of {', '.join(sorted(registry))}.")
    with output_dir(out) as stage:
        summary = registry[name](stage, quick=quick, reps=reps, seed=seed)
        files = sorted(p.name for p in stage.iterdir())
    for k, v in (summary or {}).items():
        console.print(f"{k}: {v}")
    console.print(f"wrote {', '.join(files)} to {out}")
