"""``dpadmm vertical admm|experts|encrypted``: one command per protocol, sharing the option groups of
:mod:`dpadmm.cli._vertical_options` (``dpadmm demo`` lives in :mod:`dpadmm.cli.demo`; the old spelling
``dpadmm vertical --protocol P`` is rewritten by :mod:`dpadmm.cli._legacy`)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import NamedTuple, Optional


from ._app import vertical_app
from . import _backend as bk
from . import _options as opt
from . import _vertical_options as vo
from . import _vertical_targets as vt
from .._jsonio import write_json
from ._common import console, elapsed, output_dir
from ._display import phase, progress
from ._vertical_report import _plot_convergence, _privacy_line, _trivial_verdict, _last_relative_change
from ..exceptions import InvalidParameterError, PrivacyPreconditionError

DEMO_EPSILON = 300.0
DEMO_DELTA = 1e-5
DEMO_RHO = 0.3
DEMO_ITERATIONS = 10


def _label_block_scale(data, row_clip) -> float:
    """1/R of the label party's row clip (the factor its block was scaled by for the feature side)."""
    from ..data.prepare import default_row_clip

    return 1.0 / (row_clip or default_row_clip(data.party_sizes[0]))


def _party_widths(paths, id_column: str, label_column: str) -> list[list[str]]:
    """Feature-column names of each party file (its header only)."""
    import pandas as pd

    return [[c for c in pd.read_csv(p, nrows=0).columns if c not in (id_column, label_column)] for p in paths]




@vertical_app.command("admm")
@opt.grouped
def admm(
    inp: vo.VerticalInput = None,  # the "Data" block, spelled out for typer by @opt.grouped
    prep: vo.Preparation = None,
    lam: float = vo.lam_option(),
    iterations: Optional[int] = vo.iterations_option(),
    model: vo.AdmmModel = None,
    epsilon: Optional[float] = vo.epsilon_option(),
    feature: vo.FeatureMechanism = None,
    label: vo.LabelPrivacy = None,
    delta: float = opt.delta_option(vo.PRIVACY, "δ of the total budget."),
    seed: Optional[int] = opt.seed_option(vo.PRIVACY),
    monitor: Optional[bool] = opt.monitor_option(vo.PRIVACY, "Record un-noised loss each round."),
    out: Optional[Path] = opt.out_option(),
    quiet: bool = opt.quiet_option(),
    where: opt.Parties = None,  # the "Where the parties run" block
    state: vo.RunState = None,
    psi: bool = vo.psi_option(),
    target: Optional[str] = vo.target_option(),
    classes: Optional[str] = vo.classes_option(),
):
    """Train logistic, linear or Poisson regression on vertically partitioned data with (DP) ADMM sharing [Hu].

    The label: yes/no (--target binary), an amount (regression), a count (count) or a class (multiclass).
    A private run declares it, a non-private one infers it from the labels (multiclass: always --target multiclass).
    With --label-epsilon, amounts, counts and classes run labels-only."""
    run = _AdmmRun(inp, prep, lam, iterations, model, epsilon, feature, label, delta, seed, monitor, out, quiet,
                   where, state, psi)
    settings = _admm_settings(run)
    kind, declared = vt.resolve(target, inp, where.backend, private=label.label_epsilon is not None or
                                run.feature_private, classes=classes)
    if kind != "binary":
        return vt.run(kind, run, settings, classes=declared)
    run_opts = where.run_options(out=out, transcript=state.transcript, checkpoint_every=state.checkpoint_every,
                                 resume=state.resume)
    data, raw = _admm_data(run, settings, run_opts, declared)
    note = bk.resume_note(run_opts, settings.rounds)
    if note:
        console.print(note)
    _admm_fit_and_report(run, settings, run_opts, data, raw)


class _AdmmRun(NamedTuple):
    """The options of one ``dpadmm vertical admm`` run, as typed groups."""

    inp: vo.VerticalInput
    prep: vo.Preparation
    lam: float
    iterations: Optional[int]
    model: vo.AdmmModel
    epsilon: Optional[float]
    feature: vo.FeatureMechanism
    label: vo.LabelPrivacy
    delta: float
    seed: Optional[int]
    monitor: Optional[bool]
    out: Optional[Path]
    quiet: bool
    where: opt.Parties
    state: vo.RunState
    psi: bool

    @property
    def feature_private(self) -> bool:
        return any(v is not None for v in (self.epsilon, self.feature.iteration_epsilon, self.feature.noise_scale))


class _AdmmSettings(NamedTuple):
    """What the options resolve to before any data are read."""

    prepare: str
    clip_rows_at: bool
    rounds: int


def _admm_settings(run: _AdmmRun) -> _AdmmSettings:
    """Validate every option (one line, exit 2, before any work) and resolve ``--prepare auto`` and the rounds."""
    from .._validation import check_choice, check_int, check_positive
    from ..algorithms.vertical.params import VerticalParams
    from ..estimators.vertical import VerticalLogisticRegression

    f, lab, backend = run.feature, run.label, run.where.backend
    check_positive("lam", run.lam)
    check_choice("label_mechanism", lab.label_mechanism, ("rr", "gaussian"))
    check_choice("prepare", run.prep.prepare, ("auto", "standardize", "normalize-rows", "none"))
    if run.prep.row_clip is not None:
        check_positive("row_clip", run.prep.row_clip)
    prepare = run.prep.prepare
    if run.prep.normalize_rows:
        if prepare not in ("auto", "normalize-rows"):
            raise InvalidParameterError(f"--normalize-rows and --prepare {prepare} contradict each other; give one.")
        prepare = "normalize-rows"
    if prepare == "auto":  # (the grpc parties read their files in their own processes: not there yet)
        prepare = "standardize" if run.inp.party and backend != "grpc" else "none"
    if prepare == "standardize" and backend == "grpc":
        raise InvalidParameterError("--prepare standardize is not available with --backend grpc yet (each party "
                                    "would prepare its own file in party-serve); scale the columns in the party "
                                    "files and pass --prepare none, or --normalize-rows.")
    if run.feature_private and f.mechanism == "gaussian" and f.relation == "record" and prepare == "standardize":
        raise PrivacyPreconditionError(
            "--relation record with --prepare standardize: the party's column statistics move when a record is "
            "replaced, which the record relation does not cover; scale the columns by public bounds yourself and "
            "pass --prepare none (or use --relation feature_column).")
    if run.model.rho is not None:
        check_positive("rho", run.model.rho)
    if run.iterations is not None:
        check_int("iterations", run.iterations)
    vo.check_budget(run.epsilon, run.delta, f.noise_scale, f.iteration_epsilon)
    check_choice("mechanism", f.mechanism, ("gaussian", "paper"))
    check_choice("relation", f.relation, ("feature_column", "record"))
    for name, value in (("clip", f.clip), ("label_epsilon", lab.label_epsilon), ("bound", f.bound)):
        if value is not None:
            check_positive(name, value)
    rounds = run.iterations if run.iterations is not None else VerticalParams.of(dict(  # the estimator's default
        VerticalLogisticRegression().get_params(), epsilon=run.epsilon, iteration_epsilon=f.iteration_epsilon,
        noise_scale=f.noise_scale, mechanism=f.mechanism, label_epsilon=lab.label_epsilon,
        label_mechanism=lab.label_mechanism), loss="logistic").rounds()
    run.inp.check()
    if run.psi and backend != "grpc":
        raise InvalidParameterError("--psi aligns the rows of parties in different organisations: it needs --backend "
                                    "grpc (with in-machine --party files the ids are joined in the clear).")
    clip_rows_at = run.feature_private and f.mechanism == "gaussian" and prepare == "standardize"
    return _AdmmSettings(prepare, clip_rows_at, rounds)


def _admm_data(run: _AdmmRun, settings: _AdmmSettings, run_opts, classes=None):
    """The data (read here, by the parties' workers, or by the parties across organisations), prepared and checked
    against the mechanism's premises; and the data as read (for the "label party alone" baseline). ``classes``: the
    declared (negative, positive) pair; a private run maps its labels against them (or 0/1, -1/+1), counting none."""
    inp, backend, prepare = run.inp, run.where.backend, settings.prepare
    domain = {"private": run.feature_private or run.label.label_epsilon is not None, "classes": classes}
    normalize_rows = prepare == "normalize-rows"
    phase("connecting to the parties" + (" (PSI alignment)" if run.psi else "") if backend == "grpc" else
          "loading party files" if inp.party else "loading data")
    if backend == "grpc":
        # cross-organisation: every party reads its own file; this side reads only ids and labels
        from .party import vertical_remote_data

        data = vertical_remote_data(run_opts.backend, inp.party, inp.test_party, id_column=inp.id_column,
                                    label_column=inp.label_column, normalize=normalize_rows,
                                    other=(inp.train, inp.data), psi=run.psi, **domain)
    elif inp.party and backend != "inprocess":
        # data locality: each party's worker reads its own --party file; unit-norm rows are checked there
        if inp.train is not None:
            raise InvalidParameterError("give either --train (LIBSVM) or --party files, not both.")
        from ..data.prepare import default_row_clip
        from ..data.vertical import load_vertical_sources

        widths = [len(cols) for cols in _party_widths(inp.party, inp.id_column, inp.label_column)]
        clips = [run.prep.row_clip or default_row_clip(w) for w in widths] if settings.clip_rows_at else None
        data = load_vertical_sources(inp.party, inp.test_party, id_column=inp.id_column,
                                     label_column=inp.label_column, normalize=normalize_rows, prepare=prepare,
                                     row_clip=clips, **domain)
    else:
        data = inp.load(**domain)
    raw = data  # as read: the one "label party alone" baseline is fitted on it, whatever --prepare does
    if data.source.get("data_locality"):
        return data, raw  # rows are prepared (and, under DP, checked) by each party's worker
    if prepare != "none":
        from ..data.vertical import prepared, row_clips

        data = prepared(data, prepare, row_clip=row_clips(data, run.prep.row_clip) if settings.clip_rows_at else None)
    _check_rows(run, data)
    return data, raw


def _check_rows(run: _AdmmRun, data) -> None:
    """The feature side's premise on the rows: unit norm ([Hu, Assumption 2.3], ``paper``) or norm ≤ 1 (Gaussian)."""
    from ..data.parties import row_norms
    from ..data.vertical import rows_are_normalized

    if not run.feature_private:
        return
    if run.feature.mechanism == "paper" and not rows_are_normalized(data.train):
        raise PrivacyPreconditionError("--mechanism paper needs unit-norm rows in every party block "
                                       "[Hu, Assumption 2.3]; pass --normalize-rows.")
    if run.feature.mechanism == "gaussian":
        for m, B in enumerate(data.train, start=1):
            top = float(row_norms(B).max())
            if top > 1.0 + 1e-9:
                raise PrivacyPreconditionError(
                    f"--epsilon needs rows of norm <= 1 (the feature-side sensitivity's premise), but party {m}'s rows "
                    f"reach {top:.4g}; pass --prepare standardize (party-local scaling, rows clipped at --row-clip) "
                    "or --normalize-rows.")


def _admm_fit(run: _AdmmRun, settings: _AdmmSettings, run_opts, data, cb):
    """Fit (:func:`dpadmm.workflows.vertical.run_vertical`): the model and its metrics."""
    from ..workflows.vertical import run_vertical

    f, m = run.feature, run.model
    with warnings.catch_warnings():
        # reported below as a plain fact (iteration limit vs tol), not as a warning
        warnings.filterwarnings("ignore", message="ADMM did not reach tol")
        return run_vertical(
            data, lam=run.lam, rho=m.rho if m.rho is not None else "auto", iterations=settings.rounds,
            fit_intercept=not m.no_intercept, epsilon=run.epsilon, delta=run.delta,
            iteration_epsilon=f.iteration_epsilon, noise_scale=f.noise_scale,
            bound=f.bound if f.bound is not None else "auto", accountant=f.accountant, adaptive_rho=m.adaptive_rho,
            seed=run.seed, callbacks=[cb], backend=run_opts.backend, fit_kwargs=run_opts.begin(),
            monitor=run.monitor, mechanism=f.mechanism, relation=f.relation,
            clip=f.clip if f.clip is not None else "auto", label_epsilon=run.label.label_epsilon,
            label_mechanism=run.label.label_mechanism,
            label_block_scale=_label_block_scale(data, run.prep.row_clip) if settings.clip_rows_at else 1.0)


def _admm_fit_and_report(run: _AdmmRun, settings: _AdmmSettings, run_opts, data, raw) -> None:
    """Fit, add the baselines and the run's facts, print the summary and write the outputs (all or nothing)."""
    from ..workflows.vertical import vertical_baselines

    phase("training")
    with output_dir(run.out) as stage:
        with progress(settings.rounds, "vertical ADMM", enabled=not run.quiet) as cb:
            model, metrics = _admm_fit(run, settings, run_opts, data, cb)
        metrics["config"]["normalize_rows"] = settings.prepare == "normalize-rows"
        metrics["config"]["prepare"] = settings.prepare
        phase("baselines and outputs")
        # the label party's own model on its own block: λ·c² on a block its DP preparation scaled by c = 1/R
        own_lam = run.lam * (_label_block_scale(data, run.prep.row_clip) ** 2 if settings.clip_rows_at else 1.0)
        private = any(bool(side.get("protected")) for side in (metrics["privacy"].get("sides") or {}).values())
        metrics["baselines"] = (vertical_baselines(data, lam=own_lam, fit_intercept=not run.model.no_intercept,
                                                   raw=raw, private=private)
                                if run.where.backend != "grpc" else {})
        extra = bk.run_metrics(run_opts)
        metrics["config"].update({k: v for k, v in extra.items() if k != "transcript"})
        if "transcript" in extra:
            metrics["transcript"] = extra["transcript"]
        _admm_print(run, metrics)
        metrics["verdict"] = v = _trivial_verdict(metrics, data)
        if v:
            console.print(v)
        plotted = "objective" in metrics["history"]  # per-round values exist only when monitored
        if run.out is not None:
            _admm_write(run, stage, model, data, metrics, plotted)
    if run.out is not None:
        console.print(f"wrote {run.out}/metrics.json" + (" and convergence.png" if plotted else
                                                         " (no per-round curve: monitoring was off)"))


def _admm_print(run: _AdmmRun, metrics: dict) -> None:
    """The run's summary lines: quality, baselines, the label party's choice and the privacy line."""
    f = metrics["final"]
    private = run.feature_private or run.label.label_epsilon is not None
    console.print(f"iterations: {f['iterations']}"
                  + (f"  training objective: {f['train_objective']:.6f}" if "train_objective" in f else "")
                  + (f"  test log loss: {f['test_log_loss']:.4f}  accuracy: {f['test_accuracy']:.4f}  "
                     f"AUC: {f['test_auc']:.4f}" if "test_log_loss" in f else ""))
    if "note" in f:
        console.print(f["note"])
    if not private and not f.get("converged", True):
        console.print(f"stopped at the iteration limit ({f['iterations']}) before the residuals fell below "
                      f"tol={metrics['config'].get('tol', 1e-6):g}; the last iteration changed the training "
                      f"objective by {_last_relative_change(metrics):.1e} (relative) — pass more --iterations "
                      "for a tighter fit.")
    b = metrics["baselines"]
    if b:
        alone = b.get("label_party_alone")
        console.print(f"baselines (test log loss): base rate {b['base_rate']['test_log_loss']:.4f}"
                      + (f", label party alone {alone['test_log_loss']:.4f} (AUC {alone['test_auc']:.4f})"
                         if alone else ""))
    choice = f.get("label_party_choice")
    if choice:
        console.print(f"label party kept {'the joint model' if choice == 'joint' else 'its own model'} "
                      "(cross-validated on its own rows; the choice stays with it)")
        if choice != "joint" and run.feature_private and run.feature.mechanism == "gaussian":
            console.print("  the shares are per-row releases, which at this ε are noise to the label party; "
                          "`dpadmm vertical experts` sends none (each party's own DP model, added by the label "
                          "party; see docs/algorithms.md)")
    console.print(f"privacy: {_privacy_line(metrics)}")
    if run.monitor and private:
        console.print("  monitoring (--monitor): per-round values left the parties un-noised; they are NOT covered "
                      "by this epsilon")


def _admm_write(run: _AdmmRun, stage: Path, model, data, metrics: dict, plotted: bool) -> None:
    """metrics.json, the label party's model (grpc: for ``dpadmm score``) and the convergence figure."""
    from ..workflows.baselines import base_rate_name

    metrics["fit_seconds"] = metrics.get("wall_seconds")
    metrics["wall_seconds"] = elapsed()
    write_json(stage / "metrics.json", metrics)
    if run.where.backend == "grpc":  # the label party's part of the model, for `dpadmm score` (stays on this side)
        from .score import write_label_model

        write_label_model(stage, model, data)
    c = metrics["config"]
    base = (metrics.get("baselines") or {}).get("base_rate")
    trivial = {base_rate_name(base): base["test_log_loss"]} if base else {}
    if plotted:
        _plot_convergence(stage / "convergence.png", {"ADMM": metrics["history"]}, trivial,
                          title=f"{c.get('data', 'vertical data')}, parties {tuple(c.get('party_sizes', ()))}, "
                                f"λ = {run.lam:g}, ρ = {c['rho']:g}; {_privacy_line(metrics).split(' (')[0]}")
