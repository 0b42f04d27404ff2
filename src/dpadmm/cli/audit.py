"""``dpadmm audit``: empirical lower bounds on ε for every private mechanism, and a planted bug."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from . import app
from ._common import console, output_dir, write_json


@app.command()
def audit(
    out: Path = typer.Option(..., help="Output directory (audit.json)."),
    samples: int = typer.Option(400_000, help="Releases sampled per neighbouring input."),
    confidence: float = typer.Option(0.95, help="Confidence of the lower bounds."),
    seed: int = typer.Option(0, help="Root random seed."),
):
    """Run each private mechanism on neighbouring inputs many times and bound ε from below."""
    from .._validation import check_int, check_open_unit
    from ..experiments.audit import run_audit

    check_int("samples", samples, minimum=1000)
    check_open_unit("confidence", confidence)
    with output_dir(out) as stage:
        results = run_audit(samples=samples, seed=seed, confidence=confidence)
        table = Table(title=f"privacy audit: {samples:,} releases per input, {confidence:.0%} confidence")
        for col in ("mechanism", "claimed ε", "lower bound ε", "verdict"):
            table.add_column(col)
        for r in results:
            if r.broken:
                verdict = "CAUGHT (as it must be)" if r.caught else "NOT caught: audit too weak"
            else:
                verdict = "consistent with the claim" if not r.caught else "VIOLATION"
            table.add_row(r.name, f"{r.epsilon_claimed:.3f}", f"{r.epsilon_lower_bound:.3f}", verdict)
        console.print(table)
        write_json(stage / "audit.json", {
            "mechanisms": [r.to_dict() for r in results], "samples": samples, "confidence": confidence, "seed": seed,
            "method": "threshold test on the projection onto the neighbours' difference; threshold chosen on half "
                      "the samples, Clopper-Pearson bounds on the other half (Jagielski et al. 2020)",
        })
    console.print(f"wrote {out}/audit.json")
