"""``dpadmm consensus`` (M-ADMM over a graph, [Zhang]) and ``dpadmm attack kkt`` ([Zhang, App. E])."""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer

from . import _backend as bk
from . import _options as opt
from ._app import app
from .._jsonio import write_json
from ._common import console, elapsed, output_dir, standard_names
from ._display import heartbeat, phase, progress
from ._consensus_gossip import _gossip, backend_options, check_test_source, test_split
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


#: ``dpadmm consensus --help`` groups its options in these panels; docs/reference/cli.md explains each in full
_DATA, _MODEL, _PRIVACY = "Data and graph", "Model and ADMM", "Privacy"


@app.command()
@opt.grouped
def consensus(
    data: Optional[str] = typer.Option(None, rich_help_panel=_DATA,
                                       help="adult (bundled, the default) or a LIBSVM FILE, split at random into --nodes."),
    node: List[Path] = typer.Option([], "--node", metavar="FILE", rich_help_panel=_DATA,
                                    help="One node's own file, kept as given (repeat once per node; LIBSVM or CSV)."),
    test_node: List[Path] = typer.Option([], "--test-node", metavar="FILE", rich_help_panel=_DATA,
                                         help="One node's test file (repeat, --node order)."),
    label_column: str = typer.Option("y", rich_help_panel=_DATA, help="Label column of CSV --node files."),
    id_column: str = typer.Option("id", rich_help_panel=_DATA, help="Id column of CSV --node files (dropped)."),
    nodes: Optional[int] = typer.Option(None, rich_help_panel=_DATA, help="Number of nodes N (default 5)."),
    topology: str = typer.Option("ring", rich_help_panel=_DATA, help="ring|line|star|complete|erdos:p|FILE."),
    split: str = typer.Option("even", rich_help_panel=_DATA, help="even|uneven."),
    uneven_ratio: float = typer.Option(10.0, rich_help_panel=_DATA, help="Largest/smallest node size (uneven)."),
    perturbation: str = typer.Option("none", rich_help_panel=_PRIVACY, help="none|pp|dvp|pvp."),
    eta: Optional[str] = typer.Option(None, rich_help_panel=_MODEL, help="η_i(1), one or one per node."),
    eta_growth: Optional[str] = typer.Option(None, rich_help_panel=_MODEL, help="q of η_i(t) = η_i(1) q^(t-1)."),
    alpha: Optional[str] = typer.Option(None, rich_help_panel=_PRIVACY, help="α_i(1) of the noise density."),
    alpha_growth: Optional[str] = typer.Option(None, rich_help_panel=_PRIVACY, help="q of α_i(t) = α_i(1) q^(t-1)."),
    theta: str = typer.Option("0.5", rich_help_panel=_MODEL, help="Dual step θ (one or one per node)."),
    theta_growth: str = typer.Option("1.0", rich_help_panel=_MODEL, help="q of θ(t) (1: fixed θ)."),
    C: Optional[float] = typer.Option(None, "--C", rich_help_panel=_MODEL, help="Loss weight C (default: auto)."),
    reg_weight: Optional[float] = typer.Option(None, rich_help_panel=_MODEL, help="The paper's ρ (default: auto)."),
    iterations: Optional[int] = typer.Option(None, rich_help_panel=_MODEL, help="Iterations T (default: auto)."),
    test: Optional[Path] = typer.Option(None, rich_help_panel=_DATA, help="Held-out LIBSVM file."),
    test_fraction: float = typer.Option(0.0, rich_help_panel=_DATA, help="Hold out this share of the rows."),
    epsilon: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY, help="Total ε per node (private fit)."),
    delta: float = opt.delta_option(_PRIVACY, "δ of --epsilon (gossip)."),
    bounds: Optional[Path] = typer.Option(None, rich_help_panel=_PRIVACY, help="Gossip: CSV of column bounds."),
    fallback_epsilon: Optional[float] = typer.Option(None, rich_help_panel=_PRIVACY,
                                                     help="pp/dvp: ε for the DP fallback."),
    runs: int = typer.Option(1, rich_help_panel=_MODEL, help="Independent runs R."),
    normalize: bool = typer.Option(False, "--normalize", rich_help_panel=_DATA, help="Rescale rows to norm <= 1."),
    seed: Optional[int] = opt.seed_option(_PRIVACY),
    monitor: Optional[bool] = opt.monitor_option(_PRIVACY, "Nodes report their loss each round."),
    out: Optional[Path] = opt.out_option(),
    quiet: bool = opt.quiet_option(),
    where: opt.Parties = None,  # the "Where the parties run" block, spelled out for typer by @opt.grouped
    peer_to_peer: bool = typer.Option(False, "--peer-to-peer", rich_help_panel=bk.BACKEND_PANEL,
                                      help="grpc: nodes talk to their neighbours."),
    own_files: bool = typer.Option(False, "--own-files", rich_help_panel=bk.BACKEND_PANEL,
                                   help="grpc: each node reads its own file (party serve --data train=FILE)."),
    checkpoint_every: Optional[int] = bk.checkpoint_every_option(),
    resume: Optional[Path] = bk.resume_option(),
):
    """Train logistic regression over a graph with (private) M-ADMM [Zhang, eq. 10–11, Alg. 1]."""
    backend = where.backend
    ray_address, ray_resources, timeout = where.ray_address, where.ray_resources, where.timeout
    peer, tls, insecure = where.peer, where.tls, where.insecure
    if own_files:
        if epsilon is None or perturbation != "none" or backend != "grpc":
            raise InvalidParameterError("--own-files: nodes started with `dpadmm party serve --data train=FILE` each "
                                        "read their own file; give --backend grpc --peer node0=… … and --epsilon E.")
        if node or test_node or data is not None or nodes is not None or test_fraction > 0:
            raise InvalidParameterError("--own-files: the nodes read their own files; drop --node/--test-node/--data/"
                                        "--nodes/--test-fraction (a pooled --test FILE is allowed).")
        node_data, data = "own-files", "each node's own file"
    elif node or test_node:
        if epsilon is None or perturbation != "none":
            raise InvalidParameterError("--node files run the noisy-gradient gossip protocol: give --epsilon E "
                                        "(without --perturbation).")
        if not node:
            raise InvalidParameterError("--test-node needs the nodes' training files: --node FILE once per node.")
        from ._consensus_nodes import load_nodes

        node_data = load_nodes(node, test_node, test, label_column=label_column, id_column=id_column, nodes=nodes,
                               data=data, split=split, test_fraction=test_fraction)
        nodes, data, test = len(node), ",".join(str(p) for p in node), None
    else:
        node_data = None
        nodes = 5 if nodes is None else nodes
        data = "adult" if data is None else data
    if epsilon is not None and perturbation == "none":  # --epsilon alone: the best private protocol we have
        return _gossip(node_data=node_data, data=data, nodes=nodes, topology=topology, split=split, uneven_ratio=uneven_ratio,
                       epsilon=epsilon, delta=delta, bounds=bounds, iterations=iterations, test=test,
                       test_fraction=test_fraction, runs=runs, normalize=normalize, seed=seed, monitor=monitor,
                       out=out, quiet=quiet, backend=backend,
                       backend_args=dict(ray_address=ray_address, ray_resources=ray_resources, timeout=timeout,
                                         peer=peer, tls=tls, insecure=insecure, peer_to_peer=peer_to_peer,
                                         checkpoint_every=checkpoint_every, resume=resume),
                       zhang_options={"--eta": eta, "--eta-growth": eta_growth, "--alpha": alpha,
                                      "--alpha-growth": alpha_growth, "--C": C, "--reg-weight": reg_weight,
                                      "--fallback-epsilon": fallback_epsilon,
                                      "--theta": None if theta == "0.5" else theta,
                                      "--theta-growth": None if theta_growth == "1.0" else theta_growth})
    # M-ADMM only (imported after the gossip dispatch, which loads none of them)
    from .._validation import check_choice, check_int, check_positive
    from ..algorithms.consensus.schedules import PERTURBATIONS
    from ..workflows.consensus import run_consensus

    if bounds is not None:
        raise InvalidParameterError("--bounds is used by the gossip protocol (--epsilon without --perturbation).")
    if checkpoint_every is not None or resume is not None:
        raise InvalidParameterError("--checkpoint-every and --resume are for the gossip protocol (--epsilon without "
                                    "--perturbation): M-ADMM's DP base-rate fallback releases after the rounds, "
                                    "outside a checkpoint.")
    private = perturbation in ("pp", "dvp")
    if fallback_epsilon is None:
        fallback_epsilon = 0.5 if epsilon is None else min(0.5, epsilon / 4.0)
    if epsilon is not None:
        if not private:
            raise InvalidParameterError("--epsilon needs --perturbation pp or dvp.")
        if alpha is not None:
            raise InvalidParameterError("give --epsilon or --alpha, not both (--epsilon solves for alpha).")
        check_positive("epsilon", epsilon)
        if epsilon <= fallback_epsilon:
            raise InvalidParameterError(f"--epsilon {epsilon:g} must exceed --fallback-epsilon {fallback_epsilon:g}.")
    if private:
        iterations = PRIVATE_DEFAULTS["iterations"] if iterations is None else iterations
        alpha = PRIVATE_DEFAULTS["alpha"] if alpha is None and epsilon is None else alpha
        alpha_growth = PRIVATE_DEFAULTS["alpha_growth"] if alpha_growth is None else alpha_growth
        if perturbation == "pp":
            eta = PRIVATE_DEFAULTS["eta"] if eta is None else eta
            eta_growth = PRIVATE_DEFAULTS["eta_growth"] if eta_growth is None else eta_growth
    if not private:
        C = 50.0 if C is None else C
        reg_weight = 1.0 if reg_weight is None else reg_weight
    iterations = 100 if iterations is None else iterations
    eta_growth = "1.0" if eta_growth is None else eta_growth
    alpha_growth = "1.0" if alpha_growth is None else alpha_growth
    check_int("nodes", nodes, minimum=2)
    check_int("iterations", iterations)
    check_positive("fallback_epsilon", fallback_epsilon, allow_zero=True)
    check_test_source(test, test_fraction)
    check_int("runs", runs)
    if C is not None:
        check_positive("C", C)
    if reg_weight is not None:
        check_positive("reg_weight", reg_weight)
    check_positive("uneven_ratio", uneven_ratio)
    check_choice("split", split, ("even", "uneven"))
    check_choice("perturbation", perturbation, PERTURBATIONS)
    schedules = {
        "eta": parse_values("eta", eta), "eta_growth": parse_values("eta_growth", eta_growth),
        "alpha": parse_values("alpha", alpha, allow_inf=True), "alpha_growth": parse_values("alpha_growth", alpha_growth),
        "theta": parse_values("theta", theta), "theta_growth": parse_values("theta_growth", theta_growth),
    }
    if perturbation != "none" and schedules["alpha"] is None and epsilon is None:
        raise InvalidParameterError(f"--perturbation {perturbation} needs --alpha (noise density ~ exp(-alpha ||eps||)).")
    if perturbation == "none" and alpha is not None:
        raise InvalidParameterError("--alpha is only used with --perturbation pp|dvp|pvp.")
    if perturbation == "dvp" and eta is not None:
        raise InvalidParameterError("--perturbation dvp fixes eta = theta (Zhang & Zhu 2017); drop --eta or use pp.")
    options = backend_options(backend, ray_address=ray_address, ray_resources=ray_resources, timeout=timeout, peer=peer,
                              tls=tls, insecure=insecure, peer_to_peer=peer_to_peer, out=out)
    if data != "adult" and not Path(data).is_file():
        raise DataFileError(f"data file not found: {data}; give 'adult' or a LIBSVM file.")
    from ..workflows.consensus import load_data

    phase("loading data")
    X, y = load_data(data, seed=0 if seed is None else seed)
    X, y, X_test, y_test = test_split(X, y, test, test_fraction, seed)
    if private and (C is None or reg_weight is None):
        from ..data.graphs import split_sizes

        C = private_C(int(min(split_sizes(len(y), nodes, split, uneven_ratio)))) if C is None else C
        reg_weight = C / 20.0 if reg_weight is None else reg_weight
    with output_dir(out) as stage:
        with progress(iterations * runs, f"M-ADMM ({perturbation})", enabled=not quiet) as cb:
            metrics = run_consensus(data=data, X=X, y=y, nodes=nodes, topology=topology, split=split,
                                    uneven_ratio=uneven_ratio, perturbation=perturbation, C=C, reg_weight=reg_weight,
                                    iterations=iterations, runs=runs, seed=seed, normalize=normalize, progress=cb,
                                    backend=backend, monitor=monitor, backend_options=options, X_test=X_test,
                                    y_test=y_test, fallback_epsilon=fallback_epsilon if private else None,
                                    epsilon=epsilon, **schedules)
        model_arrays = metrics.pop("_model")
        if peer_to_peer:
            metrics["config"]["peer_to_peer"] = True  # the nodes exchanged with their neighbours, not via this side
        f = metrics["final"]
        pb = f["privacy_bound"]
        console.print(f"nodes {nodes} ({topology}, {split}), {runs} run(s) x {iterations} iterations: " + (
                      f"final L(T) mean {f['train_loss_mean']:.5f} (min {f['train_loss_min']:.5f}, max "
                      f"{f['train_loss_max']:.5f}), " if "train_loss_mean" in f else "")  # private: --monitor only
                      + f"consensus error {f['consensus_error_mean']:.3g}")
        total = (metrics.get("privacy") or {}).get("epsilon")
        with_fb = (f"; total with the fallback: ε = {total:.4g}" if private and isinstance(total, (int, float))
                   and pb is not None and total > pb + 1e-12 else "")
        console.print("privacy: " + "\n  ".join(metrics["privacy"]["summary"]) + with_fb)
        if monitor and pb is not None:
            console.print("  monitoring (--monitor): per-round values left the parties un-noised; they are NOT covered by this epsilon")
        from ..workflows.baselines import BASE_RATE_NAMES, verdict

        handed = f.get("handed_over") or []
        if private and f.get("dp_base_rate") and f["dp_base_rate"][0] is not None:
            n_model = sum(h == "model" for h in handed)
            console.print(f"handed over: the consensus model in {n_model} of {len(handed)} run(s), the DP base rate "
                          f"(≈ {f['dp_base_rate'][-1]:.4g}) otherwise (accounted comparison, ε = {fallback_epsilon:g} "
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
                        BASE_RATE_NAMES[f.get("test_base_rate_source", "training-labels")] + (f" (run(s) {', '.join(map(str, worse))} of {runs})"
                                                               if worse else ""), fix)
        else:
            trivial = f.get("base_rate_train_loss")
            v = verdict("final training loss of the handed-over model", f.get("handed_over_train_loss_mean"),
                        trivial if trivial is not None else math.log(2.0),
                        "predicting the base rate" if trivial is not None else "predicting ½ (log 2)", fix)
        metrics["verdict"] = v
        if v:
            console.print(v)
        if "test_loss_mean" in f:
            f["test_log_loss"] = f["test_loss_mean"]  # the key `dpadmm vertical` uses (test_loss_mean kept)
        metrics["wall_seconds"] = elapsed()
        if out is not None:
            import numpy as np

            from ..workflows.consensus_plots import plot_curves

            write_json(stage / "metrics.json", standard_names(metrics))
            np.savez(stage / "model.npz", **model_arrays)
            if "train_loss" in metrics["history"]:  # a private run without --monitor keeps no training loss
                plot_curves(stage / "convergence.png", {perturbation: metrics["history"]},
                            title=f"M-ADMM on a graph: {data}, {nodes} nodes ({topology}, {split}), perturbation "
                                  f"{perturbation}, {runs} run(s) × {iterations} iterations")
    if out is not None:
        console.print(f"wrote {out}/metrics.json, model.npz" + (
            " and convergence.png" if "train_loss" in metrics["history"] else
            " (no convergence.png: a private run keeps no training loss without --monitor)"))


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
