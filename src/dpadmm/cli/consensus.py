"""``dpadmm consensus madmm`` (M-ADMM over a graph, [Zhang]) and ``dpadmm attack kkt`` ([Zhang, App. E]); the
option groups are :mod:`dpadmm.cli._consensus_options`' (shared with ``dpadmm consensus gossip``, in
:mod:`dpadmm.cli._consensus_gossip`); the old spelling ``dpadmm consensus …`` is rewritten by :mod:`dpadmm.cli._legacy`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple, Optional

import typer

from . import _consensus_options as co
from . import _options as opt
from ._app import app, consensus_app
from .._jsonio import write_json
from ._common import console, elapsed, output_dir, standard_names
from ._display import heartbeat, phase, progress
from ._consensus_gossip import backend_options, check_test_source, test_split
from ..exceptions import DataFileError, InvalidParameterError

#: defaults of a private run (pp/dvp) where the option is not given, chosen on the private-utility benchmark
#: (Adult 4,000 rows and all of it on a 5-node ring, breast_cancer, a9a). C "auto" = private_C(smallest node):
#: the per-round privacy cost is ∝ C/B_i, so nodes with more rows afford a weaker regularisation
TOL = 0.005  # relative excess test loss over the base rate tolerated (the DP base rate's own noise)
PRIVATE_DEFAULTS = {"C": "auto", "reg_weight": "C/20", "iterations": 60, "eta": "0.5", "eta_growth": "1.02", "alpha": "20",
                    "alpha_growth": "1.02"}

def private_C(smallest_node: int) -> float:
    """The private default loss weight C = clip(B_min/720, 2, 50) (ρ = C/20): C = 2 at 800 rows per node,
    10 at 7,200 (measured on Adult: test log loss 0.48 at ε = 1 where C = 2 gave 0.51 and C = 50 the base rate)."""
    return float(min(50.0, max(2.0, smallest_node / 720.0)))


attack_app = typer.Typer(no_args_is_help=True, help="Attacks on released protocol messages.")
app.add_typer(attack_app, name="attack")


def parse_values(name: str, text: Optional[str], *, allow_inf: bool = False):
    """``"0.5"`` → 0.5; ``"0.55,0.65"`` → [0.55, 0.65] (one per node); None → None. Validates positivity."""
    if text is None:
        return None
    try:
        vals = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise InvalidParameterError(f"{name} must be a number or comma-separated numbers, got {name}={text!r}.") from None
    if not vals:
        raise InvalidParameterError(f"{name} must not be empty.")
    for v in vals:
        if not (v > 0) or (v == float("inf") and not allow_inf):
            raise InvalidParameterError(f"{name} must be positive{'' if allow_inf else ' and finite'}, got {name}={text}.")
    return vals[0] if len(vals) == 1 else vals


class _MadmmRun(NamedTuple):
    """The options of one ``dpadmm consensus madmm`` run, as typed groups."""

    graph: co.Graph
    tests: co.TestRows
    perturbation: str
    schedules: co.Schedules
    penalty: co.Penalty
    iterations: Optional[int]
    epsilon: Optional[float]
    fallback_epsilon: Optional[float]
    runs: int
    normalize: bool
    seed: Optional[int]
    monitor: Optional[bool]
    out: Optional[Path]
    quiet: bool
    where: opt.Parties
    peer_to_peer: bool


@consensus_app.command("madmm")
@opt.grouped
def madmm(
    graph: co.Graph = None,  # the "Data and graph" block, spelled out for typer by @opt.grouped
    tests: co.TestRows = None,
    perturbation: str = typer.Option("none", rich_help_panel=co.PRIVACY, help="none|pp|dvp|pvp."),
    schedules: co.Schedules = None,
    penalty: co.Penalty = None,
    iterations: Optional[int] = co.iterations_option(),
    epsilon: Optional[float] = typer.Option(None, rich_help_panel=co.PRIVACY,
                                            help="Total ε per node (pp/dvp: solves for α)."),
    fallback_epsilon: Optional[float] = typer.Option(None, rich_help_panel=co.PRIVACY,
                                                     help="pp/dvp: ε for the DP fallback."),
    runs: int = co.runs_option(),
    normalize: bool = typer.Option(False, "--normalize", rich_help_panel=co.DATA, help="Rescale rows to norm <= 1."),
    seed: Optional[int] = opt.seed_option(co.PRIVACY),
    monitor: Optional[bool] = opt.monitor_option(co.PRIVACY, "Nodes report their loss each round."),
    out: Optional[Path] = opt.out_option(),
    quiet: bool = opt.quiet_option(),
    where: opt.Parties = None,  # the "Where the parties run" block
    peer_to_peer: bool = co.peer_to_peer_option(),
):
    """Train logistic regression over a graph with (private) M-ADMM [Zhang, eq. 10–11, Alg. 1]."""
    from ..workflows.consensus import run_consensus

    run = _MadmmRun(graph, tests, perturbation, schedules, penalty, iterations, epsilon, fallback_epsilon, runs,
                    normalize, seed, monitor, out, quiet, where, peer_to_peer)
    st = _madmm_settings(run)
    options = backend_options(where.backend, ray_address=where.ray_address, ray_resources=where.ray_resources,
                              timeout=where.timeout, peer=where.peer, tls=where.tls, insecure=where.insecure,
                              peer_to_peer=peer_to_peer, out=out)
    X, y, X_test, y_test, C, reg_weight = _madmm_data(run, st)
    with output_dir(out) as stage:
        with progress(st.iterations * runs, f"M-ADMM ({perturbation})", enabled=not quiet) as cb:
            metrics = run_consensus(data=st.data, X=X, y=y, nodes=st.nodes, topology=graph.topology, split=graph.split,
                                    uneven_ratio=graph.uneven_ratio, perturbation=perturbation, C=C,
                                    reg_weight=reg_weight, iterations=st.iterations, runs=runs, seed=seed,
                                    normalize=normalize, progress=cb, backend=where.backend, monitor=monitor,
                                    backend_options=options, X_test=X_test, y_test=y_test,
                                    fallback_epsilon=st.fallback_epsilon if st.private else None, epsilon=epsilon,
                                    **st.schedules)
        model_arrays = metrics.pop("_model")
        if peer_to_peer:
            metrics["config"]["peer_to_peer"] = True  # the nodes exchanged with their neighbours, not via this side
        _madmm_report(run, st, metrics)
        metrics["wall_seconds"] = elapsed()
        if out is not None:
            _madmm_write(run, st, stage, metrics, model_arrays)
    if out is not None:
        console.print(f"wrote {out}/metrics.json, model.npz" + (
            " and convergence.png" if "train_loss" in metrics["history"] else
            " (no convergence.png: a private run keeps no training loss without --monitor)"))


class _MadmmSettings(NamedTuple):
    """What the options resolve to before any data are read."""

    data: str
    nodes: int
    private: bool
    iterations: int
    C: Optional[float]
    reg_weight: Optional[float]
    fallback_epsilon: float
    schedules: dict


def _madmm_settings(run: _MadmmRun) -> _MadmmSettings:
    """Validate every option (one line, exit 2, before any work) and resolve the private defaults."""
    from .._validation import check_choice, check_int, check_positive
    from ..algorithms.consensus.schedules import PERTURBATIONS

    g, sch, epsilon, perturbation = run.graph, run.schedules, run.epsilon, run.perturbation
    check_choice("perturbation", perturbation, PERTURBATIONS)
    private = perturbation in ("pp", "dvp")
    fallback_epsilon = run.fallback_epsilon
    if fallback_epsilon is None:
        fallback_epsilon = 0.5 if epsilon is None else min(0.5, epsilon / 4.0)
    if epsilon is not None:
        if not private:
            raise InvalidParameterError("--epsilon needs --perturbation pp or dvp (or use `dpadmm consensus gossip "
                                        "--epsilon E`, the noisy-gradient protocol).")
        if sch.alpha is not None:
            raise InvalidParameterError("give --epsilon or --alpha, not both (--epsilon solves for alpha).")
        check_positive("epsilon", epsilon)
        if epsilon <= fallback_epsilon:
            raise InvalidParameterError(f"--epsilon {epsilon:g} must exceed --fallback-epsilon {fallback_epsilon:g}.")
    eta, eta_growth, alpha, alpha_growth = sch.eta, sch.eta_growth, sch.alpha, sch.alpha_growth
    C, reg_weight, iterations = run.penalty.C, run.penalty.reg_weight, run.iterations
    if private:
        iterations = PRIVATE_DEFAULTS["iterations"] if iterations is None else iterations
        alpha = PRIVATE_DEFAULTS["alpha"] if alpha is None and epsilon is None else alpha
        alpha_growth = PRIVATE_DEFAULTS["alpha_growth"] if alpha_growth is None else alpha_growth
        if perturbation == "pp":
            eta = PRIVATE_DEFAULTS["eta"] if eta is None else eta
            eta_growth = PRIVATE_DEFAULTS["eta_growth"] if eta_growth is None else eta_growth
    else:
        C = 50.0 if C is None else C
        reg_weight = 1.0 if reg_weight is None else reg_weight
    iterations = 100 if iterations is None else iterations
    nodes = 5 if g.nodes is None else g.nodes
    check_int("nodes", nodes, minimum=2)
    check_int("iterations", iterations)
    check_positive("fallback_epsilon", fallback_epsilon, allow_zero=True)
    check_test_source(run.tests.test, run.tests.test_fraction)
    check_int("runs", run.runs)
    for name, value in (("C", C), ("reg_weight", reg_weight)):
        if value is not None:
            check_positive(name, value)
    check_positive("uneven_ratio", g.uneven_ratio)
    check_choice("split", g.split, ("even", "uneven"))
    schedules = {
        "eta": parse_values("eta", eta), "eta_growth": parse_values("eta_growth", eta_growth or "1.0"),
        "alpha": parse_values("alpha", alpha, allow_inf=True),
        "alpha_growth": parse_values("alpha_growth", alpha_growth or "1.0"),
        "theta": parse_values("theta", sch.theta), "theta_growth": parse_values("theta_growth", sch.theta_growth),
    }
    if perturbation != "none" and schedules["alpha"] is None and epsilon is None:
        raise InvalidParameterError(f"--perturbation {perturbation} needs --alpha (noise density ~ exp(-alpha ||eps||)).")
    if perturbation == "none" and alpha is not None:
        raise InvalidParameterError("--alpha is only used with --perturbation pp|dvp|pvp.")
    if perturbation == "dvp" and sch.eta is not None:
        raise InvalidParameterError("--perturbation dvp fixes eta = theta (Zhang & Zhu 2017); drop --eta or use pp.")
    data = "adult" if g.data is None else g.data
    if data != "adult" and not Path(data).is_file():
        raise DataFileError(f"data file not found: {data}; give 'adult' or a LIBSVM file.")
    return _MadmmSettings(data, nodes, private, iterations, C, reg_weight, fallback_epsilon, schedules)


def _madmm_data(run: _MadmmRun, st: _MadmmSettings):
    """``(X, y, X_test, y_test, C, reg_weight)``: the data, its test rows, and C/ρ resolved from the smallest node."""
    from ..workflows.consensus import load_data

    phase("loading data")
    X, y = load_data(st.data, seed=0 if run.seed is None else run.seed)
    X, y, X_test, y_test = test_split(X, y, run.tests.test, run.tests.test_fraction, run.seed)
    C, reg_weight = st.C, st.reg_weight
    if st.private and (C is None or reg_weight is None):
        from ..data.graphs import split_sizes

        g = run.graph
        C = private_C(int(min(split_sizes(len(y), st.nodes, g.split, g.uneven_ratio)))) if C is None else C
        reg_weight = C / 20.0 if reg_weight is None else reg_weight
    return X, y, X_test, y_test, C, reg_weight


def _madmm_report(run: _MadmmRun, st: _MadmmSettings, metrics: dict) -> None:
    """Print the run's summary, privacy and hand-over lines and its verdict (kept in ``metrics``)."""
    from ..workflows.baselines import BASE_RATE_NAMES, verdict

    f, private, runs, g = metrics["final"], st.private, run.runs, run.graph
    pb = f["privacy_bound"]
    console.print(f"nodes {st.nodes} ({g.topology}, {g.split}), {runs} run(s) x {st.iterations} iterations: " + (
                  f"final L(T) mean {f['train_loss_mean']:.5f} (min {f['train_loss_min']:.5f}, max "
                  f"{f['train_loss_max']:.5f}), " if "train_loss_mean" in f else "")  # private: --monitor only
                  + f"consensus error {f['consensus_error_mean']:.3g}")
    total = (metrics.get("privacy") or {}).get("epsilon")
    with_fb = (f"; total with the fallback: ε = {total:.4g}" if private and isinstance(total, (int, float))
               and pb is not None and total > pb + 1e-12 else "")
    console.print("privacy: " + "\n  ".join(metrics["privacy"]["summary"]) + with_fb)
    if run.monitor and pb is not None:
        console.print("  monitoring (--monitor): per-round values left the parties un-noised; they are NOT covered by "
                      "this epsilon")
    handed = f.get("handed_over") or []
    if private and f.get("dp_base_rate") and f["dp_base_rate"][0] is not None:
        n_model = sum(h == "model" for h in handed)
        console.print(f"handed over: the consensus model in {n_model} of {len(handed)} run(s), the DP base rate "
                      f"(≈ {f['dp_base_rate'][-1]:.4g}) otherwise (accounted comparison, ε = {st.fallback_epsilon:g} "
                      "per node included in the total)")
    fix = ("more budget: a larger --alpha-growth or a faster --eta-growth (or more --iterations), more rows per "
           "node or fewer --nodes." if private else "more --iterations, a smaller --reg-weight or --normalize.")
    if "test_loss_mean" in f:
        console.print(f"test log loss (n = {f['n_test']:,}): mean {f['test_loss_mean']:.5f} (min "
                      f"{f['test_loss_min']:.5f}, max {f['test_loss_max']:.5f}); base rate "
                      f"{f['test_base_rate_loss']:.5f}")
        # a run handed the DP base rate is within its noise of the base rate: flagged only beyond TOL
        tol = f["test_base_rate_loss"] * (1.0 + TOL)
        worse = [i + 1 for i, v in enumerate(f["test_loss"]) if v > tol]
        v = verdict("test log loss", max(f["test_loss"]), tol,
                    BASE_RATE_NAMES[f.get("test_base_rate_source", "training-labels")]
                    + (f" (run(s) {', '.join(map(str, worse))} of {runs})" if worse else ""), fix)
        f["test_log_loss"] = f["test_loss_mean"]  # the key `dpadmm vertical` uses (test_loss_mean kept)
    else:
        trivial = f.get("base_rate_train_loss")
        v = verdict("final training loss of the handed-over model", f.get("handed_over_train_loss_mean"),
                    trivial if trivial is not None else math.log(2.0),
                    "predicting the base rate" if trivial is not None else "predicting ½ (log 2)", fix)
    metrics["verdict"] = v
    if v:
        console.print(v)


def _madmm_write(run: _MadmmRun, st: _MadmmSettings, stage: Path, metrics: dict, model_arrays: dict) -> None:
    """metrics.json, model.npz and (with a training loss) convergence.png."""
    import numpy as np

    from ..workflows.consensus_plots import plot_curves

    write_json(stage / "metrics.json", standard_names(metrics))
    np.savez(stage / "model.npz", **model_arrays)
    if "train_loss" in metrics["history"]:  # a private run without --monitor keeps no training loss
        g = run.graph
        plot_curves(stage / "convergence.png", {run.perturbation: metrics["history"]},
                    title=f"M-ADMM on a graph: {st.data}, {st.nodes} nodes ({g.topology}, {g.split}), perturbation "
                          f"{run.perturbation}, {run.runs} run(s) × {st.iterations} iterations")


@attack_app.command("kkt")
def attack_kkt(
    nodes: int = typer.Option(5, help="Number of nodes."),
    topology: str = typer.Option("ring", help="ring|line|star|complete|erdos:p|FILE."),
    node: int = typer.Option(0, help="The attacked node (its first training point is the target)."),
    samples: int = typer.Option(2000, help="Adult rows used (random subset; 0 = all)."),
    C: float = typer.Option(50.0, "--C", help="Loss weight C."),
    reg_weight: float = typer.Option(1.0, help="The paper's ρ."),
    theta: float = typer.Option(0.5, help="Dual step θ (public)."),
    eta: float = typer.Option(0.55, help="η_i(1) of the node's private penalty."),
    eta_growth: float = typer.Option(1.1, help="q of η_i(t) = η_i(1) q^(t-1)."),
    alpha: float = typer.Option(3.0, help="α(1) of the PP noise in the noisy scenario."),
    alpha_growth: float = typer.Option(1.0, help="q of α(t)."),
    iterations: int = typer.Option(100, help="Iterations T."),
    seed: int = typer.Option(0, help="Root random seed."),
    out: Optional[Path] = typer.Option(None, help="Write attack.json here."),
):
    """Reconstruct a node's training point from its broadcast f's via KKT [Zhang, §6.2, App. E]."""
    from .._validation import check_int, check_positive
    from ..workflows.kkt_attack import attack_table

    check_int("nodes", nodes, minimum=2)
    check_int("iterations", iterations)
    check_int("samples", samples, minimum=0)
    for k, v in (("C", C), ("reg_weight", reg_weight), ("theta", theta), ("eta", eta), ("eta_growth", eta_growth),
                 ("alpha", alpha), ("alpha_growth", alpha_growth)):
        check_positive(k, v)
    if not 0 <= node < nodes:
        raise InvalidParameterError(f"node must be in 0..{nodes - 1}, got node={node}.")
    with output_dir(out) as stage:
        with heartbeat("attack kkt"):
            rows = attack_table(nodes=nodes, topology=topology, node=node, samples=samples, C=C, reg_weight=reg_weight,
                                theta=theta, eta=eta, eta_growth=eta_growth, alpha=alpha, alpha_growth=alpha_growth,
                                iterations=iterations, seed=seed)
        for r in rows:
            console.print(f"{r['scenario']:<24} |cos(x_hat, x_1)| = {r['cosine']:.4f}   chance: mean {r['chance_mean']:.3f}, "
                          f"95% {r['chance_q95']:.3f}; rank {r['rank']}/{r['candidates']}")
        if out is not None:
            from ..workflows.kkt_attack import plot_attack

            n_rows = samples or 45_222
            plot_attack(stage / "attack.png", rows, list(dict.fromkeys(r["scenario"] for r in rows)), 1,
                         samples=n_rows, iterations=iterations, graph=f"{nodes}-node {topology}, node {node}")
            write_json(stage / "attack.json", {"results": rows, "config": {
                "nodes": nodes, "topology": topology, "node": node, "samples": samples, "C": C, "reg_weight": reg_weight,
                "theta": theta, "eta": eta, "eta_growth": eta_growth, "alpha": alpha, "alpha_growth": alpha_growth,
                "iterations": iterations, "seed": seed}})
    if out is not None:
        console.print(f"wrote {out}/attack.json and {out}/attack.png")
