"""``dpadmm audit``: empirical lower bounds on ε — per mechanism, or end to end over whole fits.

Exit status: 0 when every honest row is consistent with its claim and every planted row is caught; 1 (after
audit.json is written and the table printed) when an honest row's lower bound exceeds its claim (VIOLATION) or a
planted row is not caught (the audit too weak); 2 for bad input, nothing written.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from ._app import app
from .._jsonio import write_json
from ._common import console, err_console, output_dir
from ._display import heartbeat

E2E_RUNS, E2E_QUICK_RUNS = 2000, 300
EXIT_FAILED = 1  # an honest row above its claim, or a planted row not caught


def _verdict(r) -> str:
    if r.broken:
        return "CAUGHT (as it must be)" if r.caught else "NOT caught: audit too weak"
    return "consistent with the claim" if not r.caught else "VIOLATION"


def _bound(eps: float) -> str:
    return f"{eps:.3f}" if eps < 100 else "> 100 (no overlap)"


def _planted(plant: str, end_to_end: bool):
    """The context that plants the worst-case games' noise (``--plant``), or a null context."""
    if not plant:
        return contextlib.nullcontext()
    from ..exceptions import InvalidParameterError
    from ..experiments.audit_games import planted_generators
    from ..experiments.audit_plants import parse_plant

    if not end_to_end:
        raise InvalidParameterError("--plant needs --end-to-end (it plants the worst-case games' generators).")
    try:
        return planted_generators(parse_plant(plant))
    except ValueError as exc:
        raise InvalidParameterError(str(exc)) from None


def _print_table(results, title: str) -> None:
    """The audit's table: claimed ε, lower bound, ratio and verdict per row."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    for col in ("mechanism", "claimed ε", "lower bound ε", "ratio", "verdict"):
        table.add_column(col)
    for r in results:
        ratio = r.epsilon_lower_bound / r.epsilon_claimed if r.epsilon_claimed > 0 else float("nan")
        table.add_row(escape(r.name), f"{r.epsilon_claimed:.3f}", _bound(r.epsilon_lower_bound), f"{ratio:.2f}"
                      if ratio < 100 else "> 100", _verdict(r))
    console.print(table)


def _exit_if_failed(results) -> None:
    """Exit 1 (after the table and audit.json) on an honest row above its claim or a planted row not caught."""
    violations = [r.name for r in results if not r.broken and r.caught]
    weak = [r.name for r in results if r.broken and not r.caught]
    if violations:
        err_console.print(f"audit FAILED: {len(violations)} honest row(s) above the claimed epsilon: "
                          f"{'; '.join(violations)}", markup=False, highlight=False)
    if weak:
        err_console.print(f"audit FAILED: {len(weak)} planted row(s) not caught (the audit is too weak): "
                          f"{'; '.join(weak)}", markup=False, highlight=False)
    if violations or weak:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def audit(
    out: Path = typer.Option(..., help="Output directory (audit.json)."),
    end_to_end: bool = typer.Option(False, "--end-to-end", help="Audit every private mechanism against its strongest "
                                    "adversary (canary and coordinator messages chosen by it; the real party steps "
                                    "through the engine), plus whole fits where no such game exists."),
    quick: bool = typer.Option(False, "--quick", help="With --end-to-end: fewer runs (CI); still catches the planted bugs."),
    runs: int = typer.Option(0, help=f"With --end-to-end: whole fits per dataset and neighbouring pair "
                             f"(0 = {E2E_RUNS:,}, or {E2E_QUICK_RUNS} with --quick)."),
    only: list[str] = typer.Option([], help="With --end-to-end: audit only this row (a full name), or the rows "
                                   "whose name starts with it (repeatable)."),
    samples: int = typer.Option(400_000, help="Per-mechanism audit: releases sampled per neighbouring input."),
    confidence: float = typer.Option(0.95, help="Confidence of the lower bounds."),
    seed: int = typer.Option(0, help="Root random seed (of the auditor's simulations)."),
    quiet: bool = typer.Option(False, help="No progress output."),
    plant: str = typer.Option("", hidden=True, help="For testing the audit itself, with --end-to-end: every noise "
                              "draw of the worst-case games planted (noise=F: times F; reuse: every second draw "
                              "repeated), the ledgers unchanged; the honest rows must then fail (exit 1)."),
):
    """Run each private mechanism on neighbouring inputs many times and bound ε from below.

    Default: each noise mechanism alone, one release at its stated sensitivity. ``--end-to-end``:
    the whole fit of each algorithm (estimator, engine, backend), thousands of times on worst-case
    neighbouring datasets, against the ε the fit reports; rows marked broken must be caught.
    """
    from .._validation import check_int, check_open_unit

    check_open_unit("confidence", confidence)
    planted = _planted(plant, end_to_end)
    if end_to_end:
        n_runs = runs or (E2E_QUICK_RUNS if quick else E2E_RUNS)
        check_int("runs", n_runs, minimum=40)
    else:
        check_int("samples", samples, minimum=1000)
    with output_dir(out) as stage:
        if end_to_end:
            from .. import _progress
            from ..experiments.audit_e2e import METHOD, names, run_end_to_end

            known = names()
            for o in only:
                if not any(k.startswith(o) for k in known):
                    from ..exceptions import InvalidParameterError

                    raise InvalidParameterError(f"--only {o!r} matches no audit row; rows: {', '.join(known)}.")
            with heartbeat(f"audit --end-to-end ({n_runs} runs per dataset)", enabled=not quiet), planted:
                results = run_end_to_end(runs=n_runs, seed=seed, confidence=confidence, quick=quick, only=only or None,
                                         progress=_progress.status)
            title = (f"end-to-end privacy audit: {n_runs:,} runs per dataset ({5 * n_runs:,} for the worst-case games), "
                     f"{confidence:.0%} confidence")
            extra = {"end_to_end": True, "runs": n_runs, "quick": quick, "method": METHOD, "plant": plant or None}
        else:
            from ..experiments.audit import run_audit

            from .. import _progress

            with heartbeat(f"audit ({samples:,} releases per input)", enabled=not quiet):
                results = run_audit(samples=samples, seed=seed, confidence=confidence,
                                    progress=lambda name: _progress.status(f"mechanism {name}"))
            title = f"privacy audit: {samples:,} releases per input, {confidence:.0%} confidence"
            extra = {"end_to_end": False, "samples": samples,
                     "method": "threshold test on the projection onto the neighbours' difference; threshold chosen on "
                               "half the samples, Clopper-Pearson bounds on the other half (Jagielski et al. 2020)"}
        _print_table(results, title)
        write_json(stage / "audit.json", {"mechanisms": [dict(r.to_dict(), verdict=_verdict(r)) for r in results],
                                          "confidence": confidence, "seed": seed, **extra})
    console.print(f"wrote {out}/audit.json")
    _exit_if_failed(results)
