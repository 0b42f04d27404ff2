"""``dpadmm consensus`` (M-ADMM over a graph, [Zhang]) and ``dpadmm attack kkt`` ([Zhang, App. E])."""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer

from . import _backend as bk
from . import app
from ._common import console, elapsed, heartbeat, output_dir, progress, write_json
from ..exceptions import DataFileError, InvalidParameterError

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


@app.command()
def consensus(
    data: str = typer.Option("adult", help="adult (bundled, [Zhang, §5] preprocessing) or a LIBSVM FILE."),
    nodes: int = typer.Option(5, help="Number of nodes N."),
    topology: str = typer.Option("ring", help="ring|line|star|complete|erdos:p|FILE (edge list, 'u v' per line)."),
    split: str = typer.Option("even", help="even|uneven (uneven: sizes ∝ linspace(1, --uneven-ratio, N))."),
    uneven_ratio: float = typer.Option(10.0, help="Largest/smallest node size for --split uneven."),
    perturbation: str = typer.Option("none", help="none|pp|dvp|pvp."),
    eta: Optional[str] = typer.Option(None, help="η_i(1): one value or one per node (default: θ, conventional ADMM)."),
    eta_growth: str = typer.Option("1.0", help="q of η_i(t) = η_i(1) q_i^(t-1) (one or one per node)."),
    alpha: Optional[str] = typer.Option(None, help="α_i(1) of the noise density ∝ exp(-α||ε||) (pp/dvp/pvp)."),
    alpha_growth: str = typer.Option("1.0", help="q of α_i(t) = α_i(1) q^(t-1)."),
    theta: str = typer.Option("0.5", help="Dual step θ (one or one per node)."),
    theta_growth: str = typer.Option("1.0", help="q of θ(t) (1 = the paper's fixed θ)."),
    C: float = typer.Option(50.0, "--C", help="Loss weight C of O(f, D_i) = (C/B_i) Σ ℒ + (ρ/N) R."),
    reg_weight: float = typer.Option(1.0, help="The paper's ρ: weight of R(f) = ½||f||²."),
    iterations: int = typer.Option(100, help="Iterations T."),
    runs: int = typer.Option(1, help="Independent runs R (noise re-drawn; split and graph fixed)."),
    normalize: bool = typer.Option(False, "--normalize", help="Rescale rows with ||x|| > 1 to norm 1 (DP needs ||x|| <= 1)."),
    seed: Optional[int] = typer.Option(None, help="Seed for a reproducible simulation (whoever knows it can remove the "
                                       "noise; the report says so). Default: each node draws its noise from its own "
                                       "OS entropy; the data split and graph use seed 0."),
    monitor: Optional[bool] = typer.Option(None, "--monitor/--no-monitor", help="Nodes report their training loss "
                                           "every round (default: only for non-private runs; otherwise L(t) is "
                                           "evaluated from the released models)."),
    out: Optional[Path] = typer.Option(None, help="Write metrics.json and convergence.png here."),
    quiet: bool = typer.Option(False, help="No progress bar."),
    backend: str = bk.backend_option(),
    ray_address: Optional[str] = bk.ray_address_option(),
    ray_resources: Optional[str] = bk.ray_resources_option(),
    timeout: float = bk.timeout_option(),
    peer: List[str] = bk.peer_option(),
    tls: Optional[Path] = bk.tls_option(),
    insecure: bool = bk.insecure_option(),
):
    """Train logistic regression over a graph with (private) M-ADMM [Zhang, eq. 10–11, Alg. 1]."""
    from .._validation import check_choice, check_int, check_positive
    from ..algorithms.graph_consensus import PERTURBATIONS
    from ..experiments.zhang import run_consensus

    check_int("nodes", nodes, minimum=2)
    check_int("iterations", iterations)
    check_int("runs", runs)
    check_positive("C", C)
    check_positive("reg_weight", reg_weight)
    check_positive("uneven_ratio", uneven_ratio)
    check_choice("split", split, ("even", "uneven"))
    check_choice("perturbation", perturbation, PERTURBATIONS)
    schedules = {
        "eta": parse_values("eta", eta), "eta_growth": parse_values("eta_growth", eta_growth),
        "alpha": parse_values("alpha", alpha, allow_inf=True), "alpha_growth": parse_values("alpha_growth", alpha_growth),
        "theta": parse_values("theta", theta), "theta_growth": parse_values("theta_growth", theta_growth),
    }
    if perturbation != "none" and schedules["alpha"] is None:
        raise InvalidParameterError(f"--perturbation {perturbation} needs --alpha (noise density ~ exp(-alpha ||eps||)).")
    if perturbation == "none" and alpha is not None:
        raise InvalidParameterError("--alpha is only used with --perturbation pp|dvp|pvp.")
    if perturbation == "dvp" and eta is not None:
        raise InvalidParameterError("--perturbation dvp fixes eta = theta (Zhang & Zhu 2017); drop --eta or use pp.")
    run_opts = bk.run_options(backend=backend, ray_address=ray_address, ray_resources=ray_resources, timeout=timeout,
                              transcript=None, checkpoint_every=None, resume=None, out=out, peers=peer, tls=tls,
                              insecure=insecure)  # validation (and Ray presence)
    backend_options = {"timeout": timeout} if backend != "inprocess" else {}
    if backend == "grpc":  # nodes are `dpadmm party serve --protocol graph-consensus` processes
        backend_options = {"peers": run_opts.backend.peers, "tls": run_opts.backend.tls, "insecure": insecure,
                           "timeout": timeout}
    if backend == "ray":
        backend_options.update(address=ray_address, party_resources=bk.parse_resources(ray_resources) or None)
    if data != "adult" and not Path(data).is_file():
        raise DataFileError(f"data file not found: {data}; give 'adult' or a LIBSVM file.")
    with output_dir(out) as stage:
        with progress(iterations * runs, f"M-ADMM ({perturbation})", enabled=not quiet) as cb:
            metrics = run_consensus(data=data, nodes=nodes, topology=topology, split=split, uneven_ratio=uneven_ratio,
                                    perturbation=perturbation, C=C, reg_weight=reg_weight, iterations=iterations,
                                    runs=runs, seed=seed, normalize=normalize, progress=cb, backend=backend, monitor=monitor,
                                    backend_options=backend_options, **schedules)
        f = metrics["final"]
        pb = f["privacy_bound"]
        console.print(f"nodes {nodes} ({topology}, {split}), {runs} run(s) x {iterations} iterations: "
                      f"final L(T) mean {f['train_loss_mean']:.5f} (min {f['train_loss_min']:.5f}, max "
                      f"{f['train_loss_max']:.5f}), consensus error {f['consensus_error_mean']:.3g}")
        console.print("privacy: " + "\n  ".join(metrics["privacy"]["summary"]))
        if monitor and pb is not None:
            console.print("  monitoring (--monitor): per-round values left the parties un-noised; they are NOT covered by this epsilon")
        from ._common import verdict

        trivial = f.get("base_rate_train_loss")
        v = verdict("final training loss L(T)", f["train_loss_mean"], trivial if trivial is not None else math.log(2.0),
                    "predicting the base rate" if trivial is not None else "predicting ½ (log 2)",
                    "less noise (larger --alpha / --alpha-growth), more --iterations or a faster --eta-growth.")
        metrics["verdict"] = v
        if v:
            console.print(v)
        metrics["wall_seconds"] = elapsed()
        if out is not None:
            from ..experiments.zhang import plot_curves

            write_json(stage / "metrics.json", metrics)
            plot_curves(stage / "convergence.png", {perturbation: metrics["history"]},
                        title=f"M-ADMM on a graph: {data}, {nodes} nodes ({topology}, {split}), perturbation "
                              f"{perturbation}, {runs} run(s) × {iterations} iterations")
    if out is not None:
        console.print(f"wrote {out}/metrics.json and convergence.png")


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
    from ..experiments.zhang import attack_table

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
            from ..experiments.zhang import _plot_attack

            n_rows = samples or 45_222
            _plot_attack(stage / "attack.png", rows, list(dict.fromkeys(r["scenario"] for r in rows)), 1,
                         samples=n_rows, iterations=iterations, graph=f"{nodes}-node {topology}, node {node}")
            write_json(stage / "attack.json", {"results": rows, "config": {
                "nodes": nodes, "topology": topology, "node": node, "samples": samples, "C": C, "reg_weight": reg_weight,
                "theta": theta, "eta": eta, "eta_growth": eta_growth, "alpha": alpha, "alpha_growth": alpha_growth,
                "iterations": iterations, "seed": seed}})
    if out is not None:
        console.print(f"wrote {out}/attack.json and {out}/attack.png")
