"""``dpadmm functional``: distributed (DP) quantile regression on curves [Zhou]."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import typer

from . import _backend as bk
from . import _options as opt
from ._app import app
from .._jsonio import write_json
from ._common import console, elapsed, output_dir
from ._display import phase, progress
from ..exceptions import DataFileError, InvalidParameterError


def _validate(tau, workers, components, lam, rho, iterations, epsilon, delta, total_epsilon, penalty, method, basis,
              n_sim, test_fraction):
    from .._validation import check_choice, check_int, check_open_unit, check_positive
    from ..algorithms.functional.rules import METHODS, PENALTIES
    from ..estimators.functional import BASES

    check_open_unit("tau", tau)
    check_int("workers", workers)
    check_int("components", components)
    check_positive("lam", lam, allow_zero=True)
    check_positive("rho", rho)
    if iterations is not None:
        check_int("iterations", iterations)
    if epsilon is not None and total_epsilon is not None:
        raise InvalidParameterError("give only one of --epsilon (per iteration) and --total-epsilon.")
    if epsilon is not None:
        check_positive("epsilon", epsilon)
    if total_epsilon is not None:
        check_positive("total_epsilon", total_epsilon)
    check_open_unit("delta", delta)
    check_choice("penalty", penalty, PENALTIES)
    check_choice("method", method, tuple(METHODS))
    check_choice("basis", basis, BASES)
    check_int("n", n_sim, minimum=2)
    check_open_unit("test_fraction", test_fraction)


def _split(data, fraction: float, seed: int):
    from ..data.functional import FunctionalData

    rng = np.random.default_rng(seed)
    perm = rng.permutation(data.n)
    k = max(1, int(round(fraction * data.n)))
    te, tr = perm[:k], perm[k:]
    sub = lambda idx: FunctionalData(data.curves[idx], data.y[idx], data.grid, beta=data.beta, source=data.source)  # noqa: E731
    return sub(tr), sub(te)


def _baseline(model, train, test, tau: float) -> dict:
    """Centralised QR (statsmodels QuantReg, unpenalised, with intercept) on the same scores: the floor."""
    import statsmodels.api as sm

    from ..kernels.quantile import pinball_score

    A = model.basis_.scores(train.curves)
    res = sm.QuantReg(train.y, np.c_[A, np.ones(A.shape[0])]).fit(q=tau, max_iter=5000)
    p = np.asarray(res.params)
    out = {"name": "centralised QR on the same scores (statsmodels QuantReg)", "coef": p[:-1], "intercept": p[-1],
           "train_pinball_loss": pinball_score(train.y, A @ p[:-1] + p[-1], tau)}
    if test is not None:
        At = model.basis_.scores(test.curves)
        out["test_pinball_loss"] = pinball_score(test.y, At @ p[:-1] + p[-1], tau)
    if train.beta is not None:
        b = model.basis_.curve(p[:-1])
        out["mise"] = float(np.sum((b - train.beta) ** 2 * model.basis_.q))
    return out


def _plot(path: Path, model, data, baseline) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].plot(model.grid_, model.beta_, label="ours β̂")
    axes[0].plot(model.grid_, model.basis_.curve(baseline["coef"]), ls="--", label="centralised QR")
    if data.beta is not None:
        axes[0].plot(model.grid_, data.beta, color="k", lw=1, label="true β")
    axes[0].set(xlabel="t", ylabel="β(t)", title="coefficient function")
    h = model.history_
    if "empirical_loss" in h:
        axes[1].plot(h["round"], h["empirical_loss"], label="empirical loss")
        axes[1].set(xlabel="iteration", ylabel="empirical check loss", title="convergence")
        from .._plotting import readable_log

        readable_log(axes[1], "y")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    src = data.source.get("name") or data.source.get("dataset") or data.source.get("path") or "curves"
    priv = (f"total ε = {model.privacy_.epsilon:.3g}" if getattr(model, "privacy_", None) is not None
            else "non-private")
    fig.suptitle(f"{src}: {len(data.y):,} training curves, M = {model.workers} workers, τ = {model.tau:g}, "
                 f"{model.basis} basis (K = {model.n_components}), {model.penalty} penalty, {priv}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _advice(model, components: int) -> str:
    """What to try next — only options this command accepts for this kind of run."""
    fewer = f"--components {max(2, components // 2)}" if components > 2 else "--components 2"
    if model.privacy_ is not None:
        return (f"try a larger budget (--total-epsilon), more curves per worker or fewer workers (--workers), or "
                f"{fewer}; with a DP constant handed over, the gap to the trivial model is the price of the DP "
                "quantile at this size.")
    return f"try --method exact, {fewer} or a different --basis (fpca, bspline, fourier)."


#: ``dpadmm functional --help`` groups its options in these panels; docs/reference/cli.md explains each in full
_DATA, _MODEL, _PRIVACY = "Data", "Model and ADMM", "Privacy"


def _source(train, test, simulate: bool, dataset) -> str:
    """The one data source given (``--train``, ``--simulate`` or ``--dataset``), its files checked."""
    from ..data.functional import DATASETS

    sources = [s for s, on in (("--train", train is not None), ("--simulate", simulate), ("--dataset", dataset is not None)) if on]
    if len(sources) != 1:
        raise InvalidParameterError(f"give exactly one data source (--train, --simulate or --dataset), got {sources or 'none'}.")
    if test is not None and train is None:
        raise InvalidParameterError("--test needs --train.")
    for p in (train, test):
        if p is not None and not Path(p).is_file():
            raise DataFileError(f"file not found: {p}; check the path.")
    if dataset is not None and dataset not in DATASETS:
        raise InvalidParameterError(f"dataset must be one of {sorted(DATASETS)}, got dataset={dataset!r}.")
    return sources[0]


def _check_sizes(tr, workers: int, components: int, y_range):
    """Workers and components against the training curves; ``--y-range`` parsed (None when not given)."""
    if workers > tr.n:
        raise InvalidParameterError(f"workers must be at most the number of training curves ({tr.n}), got workers={workers}.")
    if components > tr.curves.shape[1]:
        raise InvalidParameterError(f"components must be at most the number of grid points ({tr.curves.shape[1]}), "
                                    f"got components={components}.")
    if y_range is None:
        return None
    try:
        yr = tuple(float(v) for v in y_range.split(","))
    except ValueError:
        yr = ()
    if len(yr) != 2:
        raise InvalidParameterError(f"--y-range must be 'lo,hi' (two numbers), got {y_range!r}.")
    return yr


def _load(train, test, simulate, dataset, n, tau, test_fraction, response_column, id_column, seed):
    """``(data, train part, test part)``: simulated, bundled or the user's CSV files, split at the data seed."""
    from ..data.functional import load_dataset, load_functional_csv, simulate_zhou

    data_seed = 0 if seed is None else seed  # data and split only; the noise follows --seed
    phase("simulating data" if simulate else "loading data")
    if simulate:
        data = simulate_zhou(n, tau=tau, random_state=data_seed)
        tr, te = _split(data, test_fraction, data_seed)
    elif dataset is not None:
        data = load_dataset(dataset)
        tr, te = _split(data, test_fraction, data_seed)
    else:
        data = load_functional_csv(train, response_column=response_column, id_column=id_column)
        if test is not None:
            te = load_functional_csv(test, response_column=response_column, id_column=id_column)
            if te.curves.shape[1] != data.curves.shape[1]:
                raise InvalidParameterError(f"the test curves have {te.curves.shape[1]} grid points but the training "
                                            f"curves have {data.curves.shape[1]}; use the same grid.")
            tr = data
        else:
            tr, te = _split(data, test_fraction, data_seed)
    return data, tr, te


def _final_and_privacy(model, tr, te, tau: float, base: dict, epsilon):
    """metrics.json's ``final``, ``privacy`` and ``baseline`` blocks of a fitted model."""
    from ..kernels.quantile import pinball_score

    final = {"iterations": model.n_iter_,
             "train_pinball_loss": pinball_score(tr.y, model.predict(tr.curves), tau),
             "test_pinball_loss": pinball_score(te.y, model.predict(te.curves), tau),
             "test_coverage": float(np.mean(te.y <= model.predict(te.curves))),
             "baseline_test_pinball_loss": base.get("test_pinball_loss"),
             "baseline_train_pinball_loss": base["train_pinball_loss"],
             "constant_train_pinball_loss": model.constant_pinball_loss_,
             "handed_over": model.fallback_ or "model",
             "dp_constant": model.dp_constant_,
             "prediction_range": list(model.y_range_),
             "test_predictions_in_range": float(np.mean((model.predict(te.curves) >= model.y_range_[0])
                                                        & (model.predict(te.curves) <= model.y_range_[1]))),
             "worse_than_constant": model.worse_than_constant_,
             "converged": model.converged_,
             "clipped_fraction": model.clipped_fraction_}
    if tr.beta is not None:
        final["mise"] = float(np.sum((model.beta_ - tr.beta) ** 2 * model.basis_.q))
        final["baseline_mise"] = base["mise"]
    from ..privacy.ledger import nonprivate_privacy, not_protected

    priv = nonprivate_privacy({"curves": not_protected(
        "curves", "non-private run: the pooled statistics and every worker's local model are sent exactly")})
    baseline = {k: v for k, v in base.items()}
    if model.privacy_ is not None:
        priv = model.privacy_.to_dict() | {"private": True, "noise_multiplier": model.noise_multiplier_,
                                            "epsilon_per_iteration": epsilon}
        # The reference fit and the training-set losses are computed by this command on the pooled
        # training data it loaded (a simulation): they are not part of the private release. The
        # reference model itself (a non-private fit of the training data) is not written.
        baseline = {k: v for k, v in baseline.items() if k not in ("coef", "intercept")}
        baseline["outside_the_guarantee"] = True
        priv["notes"] = list(priv.get("notes", [])) + [
            "simulation outputs: final.train_pinball_loss, final.constant_train_pinball_loss and the "
            "'baseline' block (a NON-private centralised QR on the pooled training data, its coefficients "
            "withheld) were computed by this command on data it holds; they are NOT covered by the guarantee "
            "and must not be published beside epsilon"]
    return final, priv, baseline


def _check_params(model, tr) -> None:
    """Every parameter check with the data's size (:meth:`FunctionalParams.check_sizes`), before anything is written."""
    from ..algorithms.functional.params import FunctionalParams
    from ..estimators.functional import FIELDS

    params = FunctionalParams(**{k: v for k, v in model.get_params().items() if k in FIELDS})
    params.check_sizes(tr.n, tr.curves.shape[1])


def _report(model, tr, te, tau: float, final: dict, base: dict, priv: dict, monitor, total_epsilon,
            components: int):
    """Print the run's quality, hand-over, privacy and verdict lines; returns the verdict (None: fine)."""
    from ..kernels.quantile import pinball_score

    line = (f"iterations: {model.n_iter_}  test pinball loss: {final['test_pinball_loss']:.5f}  "
            f"(centralised QR on the same scores: {base.get('test_pinball_loss', float('nan')):.5f})")
    if "mise" in final:
        line += f"  MISE: {final['mise']:.4f} (centralised QR: {final['baseline_mise']:.4f})"
    console.print(line)
    if model.worse_than_constant_ and model.fallback_ != "dp-constant":
        local = ("; computed by this command on the training data: NOT covered by the guarantee"
                 if model.privacy_ is not None else "")
        console.print(f"[yellow]warning:[/] the fit is worse on the training data than the constant τ-quantile "
                      f"({final['train_pinball_loss']:.5g} vs {model.constant_pinball_loss_:.5g}{local}).")
    if model.fallback_ is not None:
        if getattr(model, "constant_only_", False):
            floor = model.MIN_N_EPSILON if model.min_n_epsilon is None else model.min_n_epsilon  # the public n·ε floor
            console.print(f"handed over: the DP {tau:g}-quantile {model.dp_constant_:.5g} for every curve (n·ε = "
                          f"{tr.n * total_epsilon:,.0f} < {floor:,.0f}: the whole budget went to the "
                          f"DP quantile, no ADMM run; predictions stay in [{model.y_range_[0]:.5g}, "
                          f"{model.y_range_[1]:.5g}])")
        elif model.fallback_ == "dp-constant":
            console.print(f"handed over: the DP {tau:g}-quantile {model.dp_constant_:.5g} for every curve (the private "
                          "model was not clearly better on the workers' noisy comparison; predictions stay in "
                          f"[{model.y_range_[0]:.5g}, {model.y_range_[1]:.5g}])")
        else:
            console.print(f"handed over: the private model (clearly better than the DP {tau:g}-quantile "
                          f"{model.dp_constant_:.5g} on the workers' noisy comparison; predictions clipped to "
                          f"[{model.y_range_[0]:.5g}, {model.y_range_[1]:.5g}])")
    console.print("privacy: " + "\n  ".join(priv["summary"]))
    if monitor and model.privacy_ is not None:
        console.print("  monitoring (--monitor): per-round values left the parties un-noised; they are NOT covered by this epsilon")
    from ..workflows.baselines import verdict

    trivial = pinball_score(te.y, np.full(te.n, np.quantile(tr.y, tau)), tau)
    final["trivial_test_pinball_loss"] = trivial
    v = verdict("test pinball loss", final["test_pinball_loss"], trivial,
                f"predicting the training responses' {tau:g}-quantile for every curve", _advice(model, components))
    if v:
        console.print(v)
    else:
        console.print(f"trivial model (the training {tau:g}-quantile for every curve): test pinball loss "
                      f"{trivial:.5f}")
    return v


@app.command()
@opt.grouped
def functional(
    train: Optional[Path] = typer.Option(None, rich_help_panel=_DATA, help="Training CSV, one row per curve."),
    test: Optional[Path] = typer.Option(None, rich_help_panel=_DATA, help="Test CSV in the same format."),
    simulate: bool = typer.Option(False, "--simulate", rich_help_panel=_DATA, help="The simulation of [Zhou, §5]."),
    dataset: Optional[str] = typer.Option(None, rich_help_panel=_DATA,
                                          help="fertility, tecator, temperature or elnino."),
    n: int = typer.Option(20_000, rich_help_panel=_DATA, help="Simulated curves (--simulate)."),
    test_fraction: float = typer.Option(0.2, rich_help_panel=_DATA, help="Held-out share (without --test)."),
    response_column: str = typer.Option("y", rich_help_panel=_DATA, help="Response column of the CSV files."),
    id_column: str = typer.Option("id", rich_help_panel=_DATA, help="Id column (ignored if absent)."),
    workers: int = typer.Option(4, rich_help_panel=_MODEL, help="Number of workers M."),
    tau: float = typer.Option(0.5, rich_help_panel=_MODEL, help="Quantile level τ in (0, 1)."),
    components: int = typer.Option(6, "--components", rich_help_panel=_MODEL, help="K basis functions."),
    basis: str = typer.Option("auto", rich_help_panel=_MODEL, help="auto|fpca|private-fpca|fourier|bspline."),
    penalty: str = typer.Option("l1", rich_help_panel=_MODEL, help="l1 | l2 | elasticnet."),
    lam: float = typer.Option(0.05, rich_help_panel=_MODEL, help="Penalty weight λ [Zhou, eq. 13]."),
    rho: float = typer.Option(0.1, rich_help_panel=_MODEL, help="ADMM penalty ρ."),
    method: str = typer.Option("fast", rich_help_panel=_MODEL, help="paper | fast | exact."),
    epsilon: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Per-iteration ε (turns DP on)."),
    delta: float = opt.delta_option(_PRIVACY, "δ (per iteration, or total)."),
    total_epsilon: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Total ε of the run."),
    iterations: Optional[int] = typer.Option(None, rich_help_panel=_MODEL, help="Rounds L (default: the method's)."),
    c1: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Score clipping radius c_1."),
    curve_clip: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Public L2 radius of the curves."),
    y_range: Optional[str] = typer.Option(None, "--y-range", rich_help_panel=_PRIVACY,
                                          help="Public response range lo,hi."),
    seed: Optional[int] = opt.seed_option(_PRIVACY),
    monitor: Optional[bool] = opt.monitor_option(_PRIVACY, "Workers report their loss each round."),
    out: Optional[Path] = opt.out_option("Directory for metrics.json, beta.csv, plot."),
    quiet: bool = opt.quiet_option(),
    where: opt.Parties = None,  # the "Where the parties run" block, spelled out for typer by @opt.grouped
):
    """Quantile regression of a scalar on a curve over M workers: F-ADMM / FDP-ADMM [Zhou]."""
    from ..algorithms.functional.rules import METHODS
    from ..estimators.functional import FunctionalQuantileRegressor

    _validate(tau, workers, components, lam, rho, iterations, epsilon, delta, total_epsilon, penalty, method, basis,
              n, test_fraction)
    source = _source(train, test, simulate, dataset)
    run_opts = where.run_options(out=out)
    data, tr, te = _load(train, test, simulate, dataset, n, tau, test_fraction, response_column, id_column, seed)
    yr = _check_sizes(tr, workers, components, y_range)
    model = FunctionalQuantileRegressor(
        tau=tau, n_components=components, basis=basis, penalty=penalty, lam=lam, rho=rho, method=method,
        max_iter=iterations, epsilon=epsilon, delta=delta, total_epsilon=total_epsilon, c1=c1, curve_clip=curve_clip,
        y_range=yr, workers=workers, backend=run_opts.backend, monitor=monitor,
        # no noise in a non-private fit, so its worker split is fixed (seed 0) unless --seed is given;
        # a private fit without --seed draws everything, noise included, from fresh entropy
        random_state=seed if seed is not None else (0 if epsilon is None and total_epsilon is None else None))
    _check_params(model, tr)
    rounds = iterations or METHODS[method]["iterations"]
    with output_dir(out) as stage:
        with progress(rounds, f"{method} ADMM (M={workers}, τ={tau:g})", enabled=not quiet) as cb:
            with warnings.catch_warnings():  # said once, on the console, below
                warnings.filterwarnings("ignore", message="the fitted model is worse on the training data")
                model.fit(tr.curves, tr.y, grid=tr.grid, callbacks=[cb])
        base = _baseline(model, tr, te, tau)
        final, priv, baseline = _final_and_privacy(model, tr, te, tau, base, epsilon)
        metrics = {
            "final": final, "privacy": priv,
            "history": {k: v for k, v in model.history_.items()},
            "baseline": baseline,
            "coef": model.coef_, "intercept": model.intercept_,
            "config": {"source": source, "dataset": dataset, "train": train, "test": test, "n_train": tr.n,
                       "n_test": te.n, "grid_points": int(tr.curves.shape[1]), "workers": workers, "tau": tau,
                       "components": components, "basis": basis, "penalty": penalty, "lam": lam, "rho": rho,
                       "method": method, "iterations": model.n_iter_, "y_range": yr, "epsilon": epsilon, "delta": delta,
                       "total_epsilon": total_epsilon, "c1": model.c1_, "seed": seed, "data_source": data.source,
                       "backend": where.backend, **bk.run_metrics(run_opts)},
        }
        metrics["verdict"] = _report(model, tr, te, tau, final, base, priv, monitor, total_epsilon, components)
        metrics["wall_seconds"] = elapsed()
        if out is not None:
            write_json(stage / "metrics.json", metrics)
            np.savetxt(stage / "beta.csv", np.c_[model.grid_, model.beta_], delimiter=",", header="t,beta", comments="")
            _plot(stage / "functional.png", model, tr, base)
    if out is not None:
        console.print(f"wrote {out}/metrics.json, beta.csv and functional.png")
