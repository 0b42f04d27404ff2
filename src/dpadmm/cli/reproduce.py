"""``dpadmm reproduce NAME --out DIR [--quick]``: a paper figure or table with its data."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from ._app import app
from .._jsonio import write_json
from ._common import console, output_dir
from ._display import heartbeat
from ..exceptions import InvalidParameterError

#: Every reproduction, by paper (kept here so that `--help` lists them without importing the
#: experiments; a test checks it against the registry).
NAMES = {
    "Hu (vertical ADMM sharing)": ("hu-fig1", "hu-fig2", "hu-fig3", "vertical-privacy"),
    "Zhang (consensus M-ADMM)": ("zhang-fig1", "zhang-fig2", "zhang-fig3", "zhang-fig4", "zhang-attack"),
    "Zhou (functional quantile regression)": ("zhou-table1", "zhou-table2", "zhou-table3", "zhou-table4",
                                              "zhou-table5", "zhou-table6", "zhou-fig1", "zhou-fig2", "zhou-fig3",
                                              "zhou-fig4", "zhou-fig5", "zhou-fig6"),
}
ALL_NAMES = tuple(n for group in NAMES.values() for n in group)
_NAME_HELP = "; ".join(f"{paper}: {', '.join(names)}" for paper, names in NAMES.items())


@app.command(short_help="Reproduce a figure or table of a paper (hu-fig1 … zhou-table6; see its --help).",
             help=f"Reproduce a figure or table of one of the three papers — {_NAME_HELP}. Each writes a PNG "
                  "and its data; --quick runs a small version.")
def reproduce(
    name: str = typer.Argument(..., metavar="NAME", help=f"Which figure or table: {', '.join(ALL_NAMES)}"),
    out: Path = typer.Option(..., help="Output directory (PNG, CSV/JSON data, reproduce.json)."),
    quick: bool = typer.Option(False, "--quick", help="Smaller, faster version (for smoke tests)."),
    reps: int = typer.Option(0, help="Repetitions, where the reproduction has them (0 = its default)."),
    seed: int = typer.Option(0, help="Root random seed."),
    quiet: bool = typer.Option(False, help="No progress output."),
):
    start = time.perf_counter()
    if name not in ALL_NAMES:
        raise InvalidParameterError(f"unknown reproduction {name!r}; choose one of {', '.join(ALL_NAMES)}.")
    from ..experiments import load_all

    registry = load_all()
    if name not in registry:  # pragma: no cover - NAMES and the registry are tested to agree
        raise InvalidParameterError(f"reproduction {name!r} is not available in this installation.")
    with output_dir(out) as stage:
        with heartbeat(f"reproduce {name}{' --quick' if quick else ''}", enabled=not quiet):
            summary = registry[name](stage, quick=quick, reps=reps, seed=seed)
        wall = time.perf_counter() - start
        write_json(stage / "reproduce.json", {"name": name, "quick": quick, "reps": reps, "seed": seed,
                                              "wall_seconds": wall, "summary": summary or {}})
        files = sorted(p.name for p in stage.iterdir())
    _print_summary(summary or {})
    console.print(f"wrote {', '.join(files)} to {out} ({wall:.0f} s)")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _print_summary(summary: dict) -> None:
    """Scalars as ``key: value``; a flat dict as ``key: a = 1, b = 2``; a dict of dicts as a table
    (rows = outer keys, columns = the inner keys) — never a raw Python dict."""
    from rich.table import Table

    for k, v in summary.items():
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            cols = list(dict.fromkeys(c for row in v.values() for c in row))
            table = Table(title=k.replace("_", " "), title_justify="left")
            table.add_column("")
            for c in cols:
                table.add_column(_fmt(c), justify="right")
            for name, row in v.items():
                table.add_row(str(name), *(_fmt(row[c]) if c in row else "" for c in cols))
            console.print(table)
        elif isinstance(v, dict):
            console.print(f"{k}: " + ", ".join(f"{a} = {_fmt(b)}" for a, b in v.items()))
        elif isinstance(v, (list, tuple)):
            console.print(f"{k}: " + ", ".join(_fmt(b) for b in v))
        else:
            console.print(f"{k}: {_fmt(v)}")
