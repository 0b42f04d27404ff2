"""The end-to-end privacy audit behind ``dpadmm audit --end-to-end``.

For each private algorithm and each neighbouring relation it claims, the audit builds small
worst-case neighbouring datasets D, D', runs the *whole fit* (estimator → engine → backend →
the algorithm's per-party steps, exactly as a user runs it) many times on each with fresh noise,
records everything the adversary of the threat model sees in each run, and turns the best of
several test statistics (:mod:`dpadmm.privacy.audit_e2e`) into an ε lower bound at the stated
confidence. A row is flagged ``caught`` when the lower bound exceeds the ε the fit itself reported.

What the adversary sees is captured from the real run, not re-derived: :func:`_capture` wraps
``engine.run`` so every protocol message a party sends is recorded (the transcript hook every
backend honours), and pooled values the central machine computes (the functional basis and mean
curve, the noisy moment matrices) are taken from the fitted estimator or spied on where they are
made.

Rows flagged ``broken`` must be caught — the test of the test:

- ``hu-eq16-paper``: the vertical share as published [Hu, eq. 16] (docs/algorithms.md §1 erratum: its noise
  lies in range(D_m), so neighbours with different column spaces have disjoint output supports);
- one planted bug per algorithm, patched into the *real* code path for the audit run only
  (``unittest.mock.patch`` of the function the estimator calls), e.g. score clipping skipped or the
  noise drawn at the wrong scale while the ledger still records the right one.

Noise is seeded per run (a reproducible simulation: the auditor is not the adversary); run r on D
and run r on D' use different seeds.
"""

from __future__ import annotations

from typing import Sequence

from ..privacy.audit import AuditResult
from .audit_fit import Pair, Row, _capture, _claim, _fast_accounting, _orth, _seeded, _unit_rows, audit_row  # noqa: F401
from .audit_fit_consensus import (CONS_B, CONS_D, CONS_OPTIONS, CONS_ROUNDS, _consensus_data,  # noqa: F401
                                  _consensus_fit, _consensus_pairs, consensus_bug_row, consensus_reuse_bug_row,
                                  consensus_row)
from .audit_fit_functional import (FUNC_GRID, FUNC_K, FUNC_M, FUNC_OPTIONS, FUNC_PRIVATE_BASIS,  # noqa: F401
                                   FUNC_ROUNDS, _functional_data, _functional_fit, _functional_model,
                                   _functional_pairs, functional_bug_row, functional_private_basis_row, functional_row)
from .audit_fit_vertical import (HU_PAPER_EPSILON, VERT_GAUSSIAN, VERT_N, VERT_ROUNDS, _has_gaussian_vertical,  # noqa: F401
                                 _vertical_data, _vertical_feature_pairs, _vertical_fit, _vertical_model,
                                 _vertical_params, hu_eq16_paper_row, vertical_clip_bug_row, vertical_feature_row,
                                 vertical_label_row, vertical_label_tight_row)
from .audit_games import play
from .audit_worst_case import games

METHOD = ("worst-case games (experiments/audit_worst_case.py): the threat model's adversary chooses the canary and, "
          "where it is the coordinator, every message; the real party steps run through the engine; each run scored by "
          "the Gaussian likelihood ratio of everything seen (all rounds) and by a discriminant of the releases' "
          "residuals (reused noise); epsilon from a Gaussian-DP fit of the two score samples (confidence bound on mu, "
          "converted at the claimed delta), Clopper-Pearson alongside. Whole-fit rows: "
          "whole fits run many times on each of two neighbouring datasets; everything the threat model's adversary "
          "sees per run; statistics fitted on 25% of the runs (mean difference, Gaussian likelihood ratios with diagonal, "
          "per-side and full covariance, distance from data-dependent subspaces; on the whole view and per block); "
          "statistic and threshold chosen on half the rest, Clopper-Pearson bounds on the other half; confidence "
          "split over a row's neighbouring pairs")


# ----------------------------------------------------------------------------- registry
def rows(*, quick: bool = False) -> list[Row]:
    """Every row of the end-to-end audit (real mechanisms first, then the ones that must be caught).
    ``quick`` runs the same rows (fewer runs are the caller's choice)."""
    real = [consensus_row(), functional_row(), functional_private_basis_row()]
    broken = [hu_eq16_paper_row(), consensus_bug_row(), consensus_reuse_bug_row(), functional_bug_row()]
    if _has_gaussian_vertical():  # the sound vertical mechanism and label privacy
        real = [vertical_feature_row("feature_column"), vertical_feature_row("record"), vertical_label_row(),
                vertical_label_tight_row()] + real
        broken += [vertical_clip_bug_row(), vertical_label_row(bug=True), vertical_label_tight_row(halved=True)]
    return [r for r in real + broken if not (quick and r.full_only)]


# whole-fit rows still run by default: the published [Hu, eq. 16] (no game), and whole consensus and private-FPCA
# fits (their mechanisms have games — audit_games_consensus, the statistics pipeline — but these rows audit the
# fit a user runs, with its planted bugs); the other whole-fit rows are superseded by :mod:`.audit_worst_case`
# and run only when named with ``only``
WHOLE_FIT_DEFAULT = ("hu-eq16-paper", "zhang-consensus-pp", "zhou-fdp-admm-private-basis")


def run_end_to_end(*, runs: int = 2000, seed: int = 0, confidence: float = 0.95, quick: bool = False,
                   only: Sequence[str] | None = None, progress=None) -> list[AuditResult]:
    """Audit every worst-case game (:mod:`.audit_worst_case`) and the default whole-fit rows (or, with
    ``only``, the rows named exactly, and every row whose name starts with an entry that is no full name)."""
    exact = set(names()) & set(only or ())  # a full row name selects that row alone; anything else is a prefix
    wanted = (lambda name: any(name == o if o in exact else name.startswith(o) for o in only)) if only else None
    results = []
    for game in games(quick=quick and not only):
        if wanted is None or wanted(game.name):
            results.append(play(game, runs=runs, seed=seed, confidence=confidence, progress=progress))
    for row in rows(quick=quick and not only):
        if (wanted(row.name) if wanted else row.name.startswith(WHOLE_FIT_DEFAULT)):
            results.append(audit_row(row, runs=runs, seed=seed, confidence=confidence, progress=progress))
    return results


def names() -> list[str]:
    """Every game and row name ``only`` can select."""
    return [g.name for g in games()] + [r.name for r in rows()]
