"""``dpadmm vertical`` (``dpadmm demo`` lives in :mod:`dpadmm.cli.demo`)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import List, Optional

import typer

from ._app import app
from . import _backend as bk
from . import _options as opt
from .._jsonio import write_json
from ._common import console, elapsed, output_dir
from ._display import phase, progress
from ._vertical_report import _plot_convergence, _privacy_line, _trivial_verdict, _last_relative_change
from ..exceptions import InvalidParameterError, PrivacyPreconditionError

DEMO_EPSILON = 300.0
DEMO_DELTA = 1e-5
DEMO_RHO = 0.3
DEMO_ITERATIONS = 10


def _check_budget(epsilon, delta, noise_scale, iteration_epsilon):
    from .._validation import check_open_unit, check_positive

    given = [n for n, v in (("--epsilon", epsilon), ("--iteration-epsilon", iteration_epsilon),
                            ("--noise-scale", noise_scale)) if v is not None]
    if len(given) > 1:
        raise InvalidParameterError(f"give only one of --epsilon, --iteration-epsilon, --noise-scale; got {', '.join(given)}.")
    if epsilon is not None:
        check_positive("epsilon", epsilon)
    if iteration_epsilon is not None:
        check_positive("iteration_epsilon", iteration_epsilon)
    if noise_scale is not None:
        check_positive("noise_scale", noise_scale, allow_zero=True)
    check_open_unit("delta", delta)


def _label_block_scale(data, row_clip) -> float:
    """1/R of the label party's row clip (the factor its block was scaled by for the feature side)."""
    from ..data.prepare import default_row_clip

    return 1.0 / (row_clip or default_row_clip(data.party_sizes[0]))


def _party_widths(paths, id_column: str, label_column: str) -> list[list[str]]:
    """Feature-column names of each party file (its header only)."""
    import pandas as pd

    return [[c for c in pd.read_csv(p, nrows=0).columns if c not in (id_column, label_column)] for p in paths]


#: ``dpadmm vertical --help`` groups its options in these panels; docs/reference/cli.md explains each option in full
_DATA, _MODEL, _PRIVACY = "Data", "Model and protocol", "Privacy"


@app.command()
@opt.grouped
def vertical(
    train: Optional[Path] = typer.Option(None, rich_help_panel=_DATA, help="Training LIBSVM file (with --parties)."),
    test: Optional[Path] = typer.Option(None, rich_help_panel=_DATA, help="Test LIBSVM file."),
    parties: Optional[str] = typer.Option(None, rich_help_panel=_DATA, help="Columns per party, e.g. 66,57."),
    party: List[Path] = typer.Option([], "--party", metavar="CSV", rich_help_panel=_DATA,
                                     help="Party CSV (repeat, label party first)."),
    test_party: List[Path] = typer.Option([], "--test-party", metavar="CSV", rich_help_panel=_DATA,
                                          help="Test party CSV (repeat, same order)."),
    id_column: str = typer.Option("id", rich_help_panel=_DATA, help="Id column joining the party files."),
    label_column: str = typer.Option("y", rich_help_panel=_DATA, help="Label column (first party's file)."),
    data: Optional[str] = typer.Option(None, rich_help_panel=_DATA, help="a9a: the bundled a9a train/test."),
    lam: float = typer.Option(1e-3, rich_help_panel=_MODEL, help="Regularisation weight λ."),
    rho: Optional[float] = typer.Option(None, rich_help_panel=_MODEL, help="ADMM penalty ρ (default: auto)."),
    iterations: Optional[int] = typer.Option(None, rich_help_panel=_MODEL, help="Iterations T (default: auto)."),
    no_intercept: bool = typer.Option(False, "--no-intercept", rich_help_panel=_MODEL, help="Fit without intercept."),
    epsilon: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Feature-side total ε."),
    mechanism: str = typer.Option("gaussian", rich_help_panel=_PRIVACY, help="Feature side: gaussian or paper."),
    relation: str = typer.Option("feature_column", rich_help_panel=_PRIVACY, help="feature_column or record."),
    clip: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Per-sample clip c (default: auto)."),
    label_epsilon: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Label-side total ε."),
    label_mechanism: str = typer.Option("rr", rich_help_panel=_PRIVACY, help="Label side: rr or gaussian."),
    delta: float = opt.delta_option(_PRIVACY, "δ of the total budget."),
    iteration_epsilon: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Per-iteration ε instead."),
    noise_scale: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Raw noise σ instead."),
    bound: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="b1 of [Hu, Ass. 2.1] (default: auto)."),
    normalize_rows: bool = typer.Option(False, "--normalize-rows", rich_help_panel=_DATA,
                                        help="= --prepare normalize-rows."),
    prepare: str = typer.Option("auto", rich_help_panel=_DATA, help="standardize, normalize-rows, none or auto."),
    row_clip: Optional[float] = typer.Option(None, rich_help_panel=_DATA, help="Row clip R (default: 3·sqrt(d_m))."),
    adaptive_rho: bool = typer.Option(False, rich_help_panel=_MODEL, help="Residual-balancing ρ."),
    accountant: str = typer.Option("pld", rich_help_panel=_PRIVACY, help="pld or rdp."),
    seed: Optional[int] = opt.seed_option(_PRIVACY),
    monitor: Optional[bool] = opt.monitor_option(_PRIVACY, "Record un-noised loss each round."),
    out: Optional[Path] = opt.out_option(),
    quiet: bool = opt.quiet_option(),
    where: opt.Parties = None,  # the "Where the parties run" block, spelled out for typer by @opt.grouped
    transcript: Optional[Path] = bk.transcript_option(),
    checkpoint_every: Optional[int] = bk.checkpoint_every_option(),
    resume: Optional[Path] = bk.resume_option(),
    psi: bool = typer.Option(False, "--psi", rich_help_panel=bk.BACKEND_PANEL, help="grpc: align rows by PSI on ids."),
    protocol: str = typer.Option("admm", rich_help_panel=_MODEL, help="admm, encrypted or experts."),
    min_effective_rows: Optional[float] = typer.Option(None, rich_help_panel=_MODEL,
                                                       help="experts: floor to send RR labels."),
    bounds: List[Path] = typer.Option([], "--bounds", metavar="FILE", rich_help_panel=_PRIVACY,
                                      help="experts: column bounds of each other party (repeat, --party order)."),
):
    """Train logistic regression on vertically partitioned data with (DP) ADMM sharing [Hu]."""
    backend = where.backend
    from ..data.vertical import load_vertical_data, rows_are_normalized
    from ..workflows.vertical import run_vertical
    from .._validation import check_int, check_positive

    from .._validation import check_choice

    check_choice("protocol", protocol, ("admm", "experts", "encrypted"))
    if bounds and (protocol != "experts" or backend == "grpc"):
        raise InvalidParameterError("--bounds declares the other parties' column bounds for an in-process --protocol "
                                    "experts run; drop it (across organisations each party's operator declares its own: party serve "
                                    "--bounds FILE).")
    if min_effective_rows is not None and protocol != "experts":
        raise InvalidParameterError("--min-effective-rows belongs to --protocol experts (the floor at which the label "
                                    "party sends its randomized-response labels): drop it, or pass --protocol experts.")
    if protocol == "encrypted":  # issue 28: in-process only here (parties can serve vertical-encrypted)
        from . import _vertical_encrypted as ve

        ve.check_options(backend, {"--rho": rho is not None, "--mechanism": mechanism != "gaussian",
                                   "--relation": relation != "feature_column", "--clip": clip is not None,
                                   "--iteration-epsilon": iteration_epsilon is not None,
                                   "--noise-scale": noise_scale is not None, "--psi": psi},
                         {"--transcript": transcript is not None, "--checkpoint-every": checkpoint_every is not None,
                          "--resume": resume is not None})
        _check_budget(epsilon, delta, None, None)
        vdata = (load_vertical_data(bundled=True, parties=parties) if data is not None else
                 load_vertical_data(train=train, test=test, parties=parties, party_files=party,
                                    test_party_files=test_party, id_column=id_column, label_column=label_column))
        ve.run_encrypted(vdata, lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label_epsilon,
                         prepare="normalize-rows" if normalize_rows else prepare, row_clip=row_clip, seed=seed,
                         out=out, rounds=iterations, label_mechanism=label_mechanism)
        return
    if protocol == "experts":
        from . import _vertical_experts as vx

        vx.refuse_admm_options({"--rho": rho is not None, "--iterations": iterations is not None,
                                "--mechanism": mechanism != "gaussian", "--relation": relation != "feature_column",
                                "--clip": clip is not None, "--iteration-epsilon": iteration_epsilon is not None,
                                "--noise-scale": noise_scale is not None, "--bound": bound is not None,
                                "--adaptive-rho": adaptive_rho, "--monitor": bool(monitor),
                                "--transcript": transcript is not None, "--checkpoint-every": checkpoint_every is not None,
                                "--resume": resume is not None})
        if backend not in ("inprocess", "grpc"):
            raise InvalidParameterError(f"--protocol experts runs in-process (a simulation of the deployment) or across "
                                        f"organisations (--backend grpc); drop --backend {backend}.")
        if psi and backend != "grpc":
            raise InvalidParameterError("--psi aligns the rows of parties in different organisations: it needs "
                                        "--backend grpc.")
        check_positive("lam", lam)
        _check_budget(epsilon, delta, None, None)
        if label_epsilon is not None:
            check_positive("label_epsilon", label_epsilon)
        if row_clip is not None:
            check_positive("row_clip", row_clip)
        check_choice("prepare", prepare, ("auto", "standardize", "normalize-rows", "none"))
        for p in [train, test, *party, *test_party]:
            if p is not None and not Path(p).is_file():
                from ..exceptions import DataFileError

                raise DataFileError(f"file not found: {p}; check the path.")
        if data is not None and data != "a9a":
            raise InvalidParameterError(f"--data must be 'a9a' (bundled), got --data={data!r}; "
                                        "use --train/--party for your own files.")
        if backend == "grpc":  # this side is the label party; every other party serves vertical-experts
            if train is not None or data is not None:
                raise InvalidParameterError("with --backend grpc give the label party's --party FILE (its features and "
                                            "labels); --train/--data do not apply (the features stay at the parties).")
            run_opts = where.run_options(out=out)
            from ..fit import runner

            with runner.owned(run_opts.backend) as remote:
                vdata = vx.remote_data(remote, party, test_party, id_column=id_column,
                                       label_column=label_column, psi=psi)
                vx.run_experts(vdata, lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label_epsilon,
                               prepare="normalize-rows" if normalize_rows else prepare, row_clip=row_clip, seed=seed,
                               out=out, label_mechanism=label_mechanism, backend=remote,
                               min_effective_rows=min_effective_rows)
            return
        where.run_options(out=out)  # --peer/--tls/--insecure without --backend grpc: one clear error
        vdata = (load_vertical_data(bundled=True, parties=parties) if data is not None else
                 load_vertical_data(train=train, test=test, parties=parties, party_files=party,
                                    test_party_files=test_party, id_column=id_column, label_column=label_column))
        vx.run_experts(vdata, lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label_epsilon,
                       prepare="normalize-rows" if normalize_rows else prepare, row_clip=row_clip, seed=seed, out=out,
                       label_mechanism=label_mechanism, min_effective_rows=min_effective_rows, bounds=bounds)
        return

    check_positive("lam", lam)
    check_choice("label_mechanism", label_mechanism, ("rr", "gaussian"))
    check_choice("prepare", prepare, ("auto", "standardize", "normalize-rows", "none"))
    if row_clip is not None:
        check_positive("row_clip", row_clip)
    if normalize_rows:
        if prepare not in ("auto", "normalize-rows"):
            raise InvalidParameterError(f"--normalize-rows and --prepare {prepare} contradict each other; give one.")
        prepare = "normalize-rows"
    if prepare == "auto":  # (the grpc parties read their files in their own processes: not there yet)
        prepare = "standardize" if party and backend != "grpc" else "none"
    if prepare == "standardize" and backend == "grpc":
        raise InvalidParameterError("--prepare standardize is not available with --backend grpc yet (each party "
                                    "would prepare its own file in party-serve); scale the columns in the party "
                                    "files and pass --prepare none, or --normalize-rows.")
    feature_private = any(v is not None for v in (epsilon, iteration_epsilon, noise_scale))
    if feature_private and mechanism == "gaussian" and relation == "record" and prepare == "standardize":
        raise PrivacyPreconditionError(
            "--relation record with --prepare standardize: the party's column statistics move when a record is "
            "replaced, which the record relation does not cover; scale the columns by public bounds yourself and "
            "pass --prepare none (or use --relation feature_column).")
    clip_rows_at = feature_private and mechanism == "gaussian" and prepare == "standardize"
    if rho is not None:
        check_positive("rho", rho)
    if iterations is not None:
        check_int("iterations", iterations)
    _check_budget(epsilon, delta, noise_scale, iteration_epsilon)
    check_choice("mechanism", mechanism, ("gaussian", "paper"))
    check_choice("relation", relation, ("feature_column", "record"))
    if clip is not None:
        check_positive("clip", clip)
    if label_epsilon is not None:
        check_positive("label_epsilon", label_epsilon)
    from ..estimators.vertical import VerticalLogisticRegression

    rounds = iterations if iterations is not None else VerticalLogisticRegression(
        epsilon=epsilon, iteration_epsilon=iteration_epsilon, noise_scale=noise_scale, mechanism=mechanism,
        label_epsilon=label_epsilon, label_mechanism=label_mechanism)._max_iter()  # the estimator's default
    if bound is not None:
        check_positive("bound", bound)
    for p in [train, test, *party, *test_party]:
        if p is not None and not Path(p).is_file():
            from ..exceptions import DataFileError

            raise DataFileError(f"file not found: {p}; check the path.")
    run_opts = where.run_options(out=out, transcript=transcript, checkpoint_every=checkpoint_every, resume=resume)
    private = any(v is not None for v in (epsilon, iteration_epsilon, noise_scale)) or label_epsilon is not None
    needs_unit_rows = mechanism == "paper" and feature_private
    normalize_rows = prepare == "normalize-rows"
    if psi and backend != "grpc":
        raise InvalidParameterError("--psi aligns the rows of parties in different organisations: it needs --backend "
                                    "grpc (with in-machine --party files the ids are joined in the clear).")
    phase("connecting to the parties" + (" (PSI alignment)" if psi else "") if backend == "grpc" else
          "loading party files" if party else "loading data")
    if backend == "grpc":
        # cross-organisation: every party reads its own file; this side reads only ids and labels
        from .party import vertical_remote_data

        data = vertical_remote_data(run_opts.backend, party, test_party, id_column=id_column,
                                    label_column=label_column, normalize=normalize_rows, other=(train, data),
                                    psi=psi)
    elif party and backend != "inprocess":
        # data locality: each party's worker reads its own --party file; unit-norm rows are checked there
        if train is not None:
            raise InvalidParameterError("give either --train (LIBSVM) or --party files, not both.")
        from ..data.vertical import load_vertical_sources

        from ..data.prepare import default_row_clip

        widths = [len(bk_cols) for bk_cols in _party_widths(party, id_column, label_column)]
        clips = [row_clip or default_row_clip(w) for w in widths] if clip_rows_at else None
        data = load_vertical_sources(party, test_party, id_column=id_column, label_column=label_column,
                                     normalize=normalize_rows, prepare=prepare, row_clip=clips)
    elif data is not None:
        if data != "a9a":
            raise InvalidParameterError(f"--data must be 'a9a' (bundled), got --data={data!r}; "
                                        "use --train/--party for your own files.")
        if train is not None or party:
            raise InvalidParameterError("give either --data a9a or --train/--party files, not both.")
        data = load_vertical_data(bundled=True, parties=parties)
    else:
        data = load_vertical_data(train=train, test=test, parties=parties, party_files=party,
                                  test_party_files=test_party, id_column=id_column, label_column=label_column)
    raw = data  # as read: the one "label party alone" baseline is fitted on it, whatever --prepare does
    if data.source.get("data_locality"):
        pass  # rows are prepared (and, under DP, checked) by each party's worker
    elif prepare != "none":
        from ..data.vertical import prepared, row_clips

        data = prepared(data, prepare, row_clip=row_clips(data, row_clip) if clip_rows_at else None)
    if data.source.get("data_locality"):
        pass
    elif needs_unit_rows and not rows_are_normalized(data.train):
        raise PrivacyPreconditionError("--mechanism paper needs unit-norm rows in every party block "
                                       "[Hu, Assumption 2.3]; pass --normalize-rows.")
    elif feature_private and mechanism == "gaussian":
        from ..data.parties import row_norms

        for m, B in enumerate(data.train, start=1):
            top = float(row_norms(B).max())
            if top > 1.0 + 1e-9:
                raise PrivacyPreconditionError(
                    f"--epsilon needs rows of norm <= 1 (the feature-side sensitivity's premise), but party {m}'s rows "
                    f"reach {top:.4g}; pass --prepare standardize (party-local scaling, rows clipped at --row-clip) "
                    "or --normalize-rows.")
    note = bk.resume_note(run_opts, rounds)
    if note:
        console.print(note)
    phase("training")
    with output_dir(out) as stage:
        with progress(rounds, "vertical ADMM", enabled=not quiet) as cb, warnings.catch_warnings():
            # reported below as a plain fact (iteration limit vs tol), not as a warning
            warnings.filterwarnings("ignore", message="ADMM did not reach tol")
            model, metrics = run_vertical(data, lam=lam, rho=rho if rho is not None else "auto", iterations=rounds,
                                          fit_intercept=not no_intercept,
                                          epsilon=epsilon, delta=delta, iteration_epsilon=iteration_epsilon,
                                          noise_scale=noise_scale, bound=bound if bound is not None else "auto",
                                          accountant=accountant, adaptive_rho=adaptive_rho, seed=seed, callbacks=[cb],
                                          backend=run_opts.backend, fit_kwargs=run_opts.begin(), monitor=monitor,
                                          mechanism=mechanism, relation=relation,
                                          clip=clip if clip is not None else "auto", label_epsilon=label_epsilon,
                                          label_mechanism=label_mechanism,
                                          label_block_scale=_label_block_scale(data, row_clip) if clip_rows_at else 1.0)
        metrics["config"]["normalize_rows"] = normalize_rows
        metrics["config"]["prepare"] = prepare
        phase("baselines and outputs")
        from ..workflows.baselines import vertical_baselines

        # the label party's own model on its own block: λ·c² on a block its DP preparation scaled by c = 1/R
        own_lam = lam * (_label_block_scale(data, row_clip) ** 2 if clip_rows_at else 1.0)
        metrics["baselines"] = (vertical_baselines(data, lam=own_lam, fit_intercept=not no_intercept, raw=raw,
                                          private=any(bool(side.get("protected")) for side in
                                                      (metrics["privacy"].get("sides") or {}).values()))
                                if backend != "grpc" else {})
        extra = bk.run_metrics(run_opts)
        metrics["config"].update({k: v for k, v in extra.items() if k != "transcript"})
        if "transcript" in extra:
            metrics["transcript"] = extra["transcript"]
        f = metrics["final"]
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
        choice = metrics["final"].get("label_party_choice")
        if choice:
            console.print(f"label party kept {'the joint model' if choice == 'joint' else 'its own model'} "
                          "(cross-validated on its own rows; the choice stays with it)")
            if choice != "joint" and feature_private and mechanism == "gaussian":
                console.print("  the shares are per-row releases, which at this ε are noise to the label party; "
                              "--protocol experts sends none (each party's own DP model, added by the label party; "
                              "see docs/algorithms.md)")
        console.print(f"privacy: {_privacy_line(metrics)}")
        if monitor and private:
            console.print("  monitoring (--monitor): per-round values left the parties un-noised; they are NOT covered by this epsilon")
        v = _trivial_verdict(metrics, data)
        metrics["verdict"] = v
        if v:
            console.print(v)
        plotted = "objective" in metrics["history"]  # per-round values exist only when monitored
        if out is not None:
            metrics["fit_seconds"] = metrics.get("wall_seconds")
            metrics["wall_seconds"] = elapsed()
            write_json(stage / "metrics.json", metrics)
            if backend == "grpc":  # the label party's part of the model, for `dpadmm score` (stays on this side)
                from .score import write_label_model

                write_label_model(stage, model, data)
            c = metrics["config"]
            from ..workflows.baselines import base_rate_name

            base = (metrics.get("baselines") or {}).get("base_rate")
            trivial = {base_rate_name(base): base["test_log_loss"]} if base else {}
            if plotted:
                _plot_convergence(stage / "convergence.png", {"ADMM": metrics["history"]}, trivial,
                                  title=f"{c.get('data', 'vertical data')}, parties {tuple(c.get('party_sizes', ()))}, "
                                        f"λ = {lam:g}, ρ = {c['rho']:g}; {_privacy_line(metrics).split(' (')[0]}")
    if out is not None:
        console.print(f"wrote {out}/metrics.json" + (" and convergence.png" if plotted else
                                                     " (no per-round curve: monitoring was off)"))
