"""``dpadmm consensus gossip``: noisy-gradient gossip over a graph, DP per node (:mod:`dpadmm.algorithms.gossip`),
with the option groups of :mod:`dpadmm.cli._consensus_options` (the old spelling ``dpadmm consensus --epsilon E``
without ``--perturbation`` is rewritten by :mod:`dpadmm.cli._legacy`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from . import _backend as bk
from . import _consensus_options as co
from . import _options as opt
from ._app import consensus_app
from ._consensus_nodes import node_source
from .._jsonio import write_json
from ._common import console, elapsed, output_dir, standard_names
from ..workflows.baselines import BASE_RATE_NAMES
from ._display import phase, progress
from ..exceptions import DataFileError, InvalidParameterError

# final.test_base_rate_source in the printed line (workflows.gossip: no exact training count in a private run)
BASE_RATE_SOURCE = {"training-labels": "the training base rate", "dp": "the DP base rate of the range rounds",
                    "test-set": "the test set's own base rate: local evaluation"}


NODE_CHOICE_HEADER = ("the model each node uses (its choice by cross-validation on its own rows: local, nothing "
                      "released, no ε; node_models.npz):")
NODE_CHOICE_NAMES = {"consensus": "the consensus model recalibrated on its own rows",
                     "own": "its own model, fitted on its own rows alone",
                     "base-rate": "its own base rate"}


def backend_options(backend: str, *, ray_address, ray_resources, timeout, peer, tls, insecure, peer_to_peer, out,
                    checkpoint_every=None, resume=None, run_opts: list | None = None) -> dict:
    """The options of ``get_backend`` for a consensus run (both protocols), after one validation of the backend
    flags (and of Ray's presence). ``--peer-to-peer``: the nodes exchange with their neighbours (grpc only).
    ``run_opts``: a list that receives the validated :class:`~._backend.RunOptions` (checkpoints, resume)."""
    opts = bk.run_options(backend=backend, ray_address=ray_address, ray_resources=ray_resources, timeout=timeout,
                          transcript=None, checkpoint_every=checkpoint_every, resume=resume, out=out, peers=peer,
                          tls=tls, insecure=insecure)
    if run_opts is not None:
        run_opts.append(opts)
    options = {"timeout": timeout} if backend != "inprocess" else {}
    if peer_to_peer and backend != "grpc":
        raise InvalidParameterError("--peer-to-peer needs --backend grpc (nodes started with `dpadmm party serve "
                                    "--neighbour NAME=HOST:PORT`).")
    if backend == "grpc":  # nodes are `dpadmm party serve` processes
        options = {"peers": opts.backend.peers, "tls": opts.backend.tls, "insecure": insecure,
                   "timeout": timeout, **({"peer_to_peer": True} if peer_to_peer else {})}
    if backend == "ray":
        options.update(address=ray_address, party_resources=bk.parse_resources(ray_resources) or None)
    return options


def check_test_source(test, test_fraction: float) -> None:
    """One clear error for a bad test source: ``test_fraction`` outside [0, 1), both given, or a missing file."""
    if not 0.0 <= test_fraction < 1.0:
        raise InvalidParameterError(f"test_fraction must be in [0, 1), got test_fraction={test_fraction}.")
    if test is not None and test_fraction > 0:
        raise InvalidParameterError("give --test FILE or --test-fraction, not both.")
    if test is not None and not Path(test).is_file():
        raise DataFileError(f"test file not found: {test}; give a LIBSVM file.")

def test_split(X, y, test, test_fraction: float, seed):
    """``(X, y, X_test, y_test)``: the test file (LIBSVM's unwritten trailing zero columns restored), or a seeded
    ``test_fraction`` of the rows held out, or no test set."""
    import numpy as np  # the CLI's start-up stays light: numpy only once a command runs

    from ..workflows.consensus import load_data

    X_test = y_test = None
    if test is not None:
        X_test, y_test = load_data(str(test))
        if X_test.shape[1] > X.shape[1]:
            raise InvalidParameterError(f"the test file has {X_test.shape[1]} features but the training data "
                                        f"{X.shape[1]}; use the same feature columns.")
        if X_test.shape[1] < X.shape[1]:  # LIBSVM: trailing all-zero columns are not written
            X_test = np.hstack([X_test, np.zeros((X_test.shape[0], X.shape[1] - X_test.shape[1]))])
    elif test_fraction > 0:
        perm = np.random.default_rng([0 if seed is None else seed, 9]).permutation(len(y))
        k = max(1, int(round(test_fraction * len(y))))
        X_test, y_test, X, y = X[perm[:k]], y[perm[:k]], X[perm[k:]], y[perm[k:]]
    return X, y, X_test, y_test

def run_timing(load_s: float, load_cpu_s: float, fit_s: float, fit_cpu_s: float) -> dict:
    """metrics.json ``timing``: the phases of this command, wall and CPU seconds. ``load``: reading the data files
    (and the test split); ``fit``: the estimator's fit alone, every run (calibration, the rounds, the privacy report);
    ``total``: wall since the command started, CPU of the whole process since it started (interpreter start-up and
    imports included), up to the files written (plot included)."""
    return {"load_s": load_s, "load_cpu_s": load_cpu_s, "fit_s": fit_s, "fit_cpu_s": fit_cpu_s,
            "total_s": elapsed(), "total_cpu_s": time.process_time()}


def _read_bounds(path: Path):
    """(lo, hi) from a CSV with one 'lo,hi' row per feature column (a header line is allowed)."""
    import numpy as np

    if not Path(path).is_file():
        raise DataFileError(f"bounds file not found: {path}; give a CSV with one 'lo,hi' row per feature column.")
    rows = []
    for k, line in enumerate(Path(path).read_text().splitlines(), start=1):
        parts = [v.strip() for v in line.split(",")]
        if not line.strip():
            continue
        try:
            rows.append((float(parts[0]), float(parts[1])) if len(parts) == 2 else None)
        except ValueError:
            if k == 1:  # a header
                continue
            rows.append(None)
        if rows[-1] is None:
            raise InvalidParameterError(f"--bounds {path}, line {k}: expected 'lo,hi' (two numbers), got {line!r}.")
    arr = np.asarray(rows, dtype=float).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


@consensus_app.command("gossip")
@opt.grouped
def gossip(
    graph: co.Graph = None,  # the "Data and graph" block, spelled out for typer by @opt.grouped
    files: co.NodeFiles = None,
    tests: co.TestRows = None,
    epsilon: float = typer.Option(..., rich_help_panel=co.PRIVACY, help="Total ε per node."),
    delta: float = opt.delta_option(co.PRIVACY, "δ of --epsilon."),
    bounds: Optional[Path] = typer.Option(None, rich_help_panel=co.PRIVACY, help="CSV of column bounds."),
    iterations: Optional[int] = co.iterations_option("Rounds T (default: the public schedule)."),
    runs: int = co.runs_option(),
    seed: Optional[int] = opt.seed_option(co.PRIVACY),
    monitor: Optional[bool] = opt.monitor_option(co.PRIVACY, "Nodes report their loss each round."),
    out: Optional[Path] = opt.out_option(),
    quiet: bool = opt.quiet_option(),
    where: opt.Parties = None,  # the "Where the parties run" block
    peer_to_peer: bool = co.peer_to_peer_option(),
    state: co.Checkpoints = None,
    target: Optional[str] = co.target_option(),
    classes: Optional[str] = co.classes_option(),
):
    """Train over a graph by noisy-gradient gossip, (ε, δ)-DP per node: logistic regression, or --target regression|multiclass."""
    node_data, data, nodes, test = node_source(graph, files, tests, where.backend, target)
    backend_args = dict(ray_address=where.ray_address, ray_resources=where.ray_resources, timeout=where.timeout,
                        peer=where.peer, tls=where.tls, insecure=where.insecure, peer_to_peer=peer_to_peer,
                        checkpoint_every=state.checkpoint_every, resume=state.resume)
    _gossip(node_data=node_data, data=data, nodes=nodes, topology=graph.topology, split=graph.split,
            uneven_ratio=graph.uneven_ratio, epsilon=epsilon, delta=delta, bounds=bounds, iterations=iterations,
            test=test, test_fraction=tests.test_fraction, runs=runs, seed=seed, monitor=monitor, out=out,
            quiet=quiet, backend=where.backend, backend_args=backend_args, target=target, classes=classes)


def _gossip(*, node_data=None, data, nodes, topology, split, uneven_ratio, epsilon, delta, bounds, iterations, test,
            test_fraction, runs, seed, monitor, out, quiet, backend, backend_args, target=None, classes=None):
    """The gossip run: validate, load, fit, report (:func:`dpadmm.workflows.gossip.run_gossip`)."""
    import numpy as np

    from dataclasses import replace

    from .._validation import check_int
    from ..algorithms.gossip.params import GossipParams, plan
    from ..algorithms.gossip.schedule import DEFAULT_RANGE_ROUNDS
    from ..workflows.baselines import verdict
    from ..workflows.consensus import load_data
    from ..workflows.consensus_plots import plot_curves
    from ..workflows.gossip import run_gossip
    from ..workflows.gossip_targets import split_rows
    from . import _consensus_targets as targets

    if backend_args["peer_to_peer"] and bounds is None:
        raise InvalidParameterError("--peer-to-peer with --epsilon needs --bounds FILE: the DP column range pools "
                                    "every node's counts through the coordinator.")
    if runs != 1 and (backend_args.get("checkpoint_every") is not None or backend_args.get("resume") is not None):
        raise InvalidParameterError("--checkpoint-every and --resume checkpoint one run; drop --runs.")
    validated: list = []
    options = backend_options(backend, out=out, run_opts=validated, **backend_args)
    run_opts = validated[0]
    params = GossipParams(epsilon=epsilon, delta=delta)  # the protocol's checks of ε and δ
    if node_data != "own-files":  # else: the nodes that answer (cli/_consensus_nodes.remote_nodes)
        check_int("nodes", nodes, minimum=2)
    if iterations is not None:
        check_int("iterations", iterations)
    check_int("runs", runs)
    check_test_source(test, test_fraction)
    if node_data is None and data != "adult" and not Path(data).is_file():
        raise DataFileError(f"data file not found: {data}; give 'adult' or a LIBSVM file.")
    load_wall, load_cpu = time.perf_counter(), time.process_time()
    refs = None  # grpc with --own-files: every node reads its own file; this side holds references only
    if node_data == "own-files":
        from ..backends import get_backend
        from ._consensus_nodes import remote_nodes, remote_test

        refs = remote_nodes(get_backend(backend, **options))
        nodes, X, y = len(refs), None, None
        node_data = (refs, None, *remote_test(test, refs[0].shape[1]), None)
    elif node_data is not None:  # the user's nodes, as given (cli/_consensus_nodes.py)
        X, y = np.concatenate(node_data[0]), np.concatenate(node_data[1])
    else:
        X, y = load_data(data, seed=0 if seed is None else seed)
    target, classes = targets.resolve(target, y, own_files=refs is not None, classes=classes)
    n_rows, d = (len(y), X.shape[1]) if refs is None else (sum(r.shape[0] for r in refs), refs[0].shape[1])
    declared = _read_bounds(bounds) if bounds is not None else None
    if declared is not None and declared[0].shape[0] != d:
        raise InvalidParameterError(f"--bounds {bounds} has {declared[0].shape[0]} rows but the data {d} "
                                    "feature columns; give one 'lo,hi' row per column.")
    if declared is not None and not np.all(declared[1] > declared[0]):
        raise InvalidParameterError(f"--bounds {bounds}: every row needs lo < hi.")
    if node_data is not None:
        X_test, y_test = node_data[2], node_data[3]
    else:
        X, y, X_test, y_test = test_split(X, y, test, test_fraction, seed)
    load_wall, load_cpu = time.perf_counter() - load_wall, time.process_time() - load_cpu
    if target != "binary":
        targets.check_options(target, monitor=monitor, backend_args=backend_args, y_test=y_test)
        Xs, ys = (node_data[0], node_data[1]) if node_data is not None else split_rows(
            X, y, nodes, split, uneven_ratio, 0 if seed is None else seed)
        return targets.run(target, data=data, Xs=Xs, ys=ys, split="as given" if node_data is not None else split,
                           topology=topology, epsilon=epsilon, delta=delta, bounds=declared, iterations=iterations,
                           runs=runs, seed=seed, X_test=X_test, y_test=y_test, out=out, backend=backend,
                           options=options, classes=classes, timing=lambda fit_s, fit_cpu: run_timing(load_wall, load_cpu, fit_s, fit_cpu))
    if iterations is None:
        iterations = plan(replace(params, bounds=declared), n_rows if refs is not None else len(y), d, nodes,
                          noise=False).rounds  # the public schedule's T (for the progress bar)
    range_rounds = 0 if declared is not None else DEFAULT_RANGE_ROUNDS
    per_run = iterations + range_rounds  # each run's releases: the DP range counts, then the training rounds
    note = bk.resume_note(run_opts, per_run)
    if note:
        console.print(note)
    with output_dir(out) as stage:
        with progress(per_run * runs, "noisy-gradient gossip", enabled=not quiet) as bar:
            def cb(k, rec):
                phase("range estimate" if (k - 1) % per_run < range_rounds else "training")
                bar(k, rec)

            metrics = run_gossip(data=data, X=X, y=y, nodes=nodes, topology=topology, split=split,
                                 uneven_ratio=uneven_ratio, epsilon=epsilon, delta=delta, rounds=iterations, runs=runs,
                                 seed=seed, bounds=declared, monitor=monitor, X_test=X_test, y_test=y_test,
                                 progress=cb, backend=backend, backend_options=options, fit_kwargs=run_opts.begin(),
                                 node_data=None if node_data is None else (node_data[0], node_data[1], node_data[4]))
        model_arrays = metrics.pop("_model")
        node_arrays = metrics.pop("_node_models", None)
        if backend_args["peer_to_peer"]:
            metrics["config"]["peer_to_peer"] = True  # the nodes exchanged with their neighbours, not via this side
        f = metrics["final"]
        train = (f"final training loss mean {f['train_loss_mean']:.5f}, " if "train_loss_mean" in f else "")
        layout = "as given" if node_data is not None else split
        console.print(f"noisy-gradient gossip: nodes {nodes} ({topology}, {layout}), {runs} run(s) x {iterations} rounds: "
                      f"{train}consensus error {f['consensus_error_mean']:.3g}; column bounds: {f['bounds_source']}")
        console.print("privacy: " + "\n  ".join(metrics["privacy"]["summary"]))
        fix = "more budget (--epsilon), more rows per node, fewer --nodes or declared --bounds."
        handed = f.get("handed_over") or []
        if any(r is not None for r in f.get("dp_base_rate") or []):  # the shared model's DP validation
            console.print(f"handed over: the consensus model in {sum(h == 'model' for h in handed)} of {len(handed)} "
                          f"run(s), the DP base rate (≈ {f['dp_base_rate'][-1]:.4g}) otherwise (DP comparison on "
                          "its own slice of ε, included in the total)")
        if "test_log_loss" in f:
            console.print(f"test log loss (n = {f['n_test']:,}): mean {f['test_log_loss']:.5f} (min "
                          f"{f['test_loss_min']:.5f}, max {f['test_loss_max']:.5f}); base rate "
                          f"{f['test_base_rate_loss']:.5f} ({BASE_RATE_SOURCE[f['test_base_rate_source']]})")
            if "node_test_log_loss" in f:  # what the nodes use: judged as a whole, run by run
                worse = f["consensus_runs_worse_than_base_rate"]
                console.print(f"  each node's own model (its choice, below; not for release, no ε): mean "
                              f"{f['node_test_log_loss']:.5f}, worst node {f['node_test_loss_max']:.5f}")
                if worse:
                    console.print(f"  the consensus model itself (coefs: the shareable output) is worse than the "
                                  f"base rate in {worse} of {len(f['test_loss'])} run(s); each node's chosen model "
                                  f"(node_models.npz) is the one it should use")
                v = verdict("the nodes' mean test log loss", f["node_test_loss_run_max"], f["test_base_rate_loss"],
                            BASE_RATE_NAMES[f["test_base_rate_source"]], fix)
            else:
                v = verdict("test log loss", max(f["test_loss"]), f["test_base_rate_loss"],
                            BASE_RATE_NAMES[f["test_base_rate_source"]], fix)
        else:  # a private run without --monitor keeps no training loss: nothing to judge without a test set
            v = verdict("final training loss", f.get("train_loss_mean"), f.get("base_rate_train_loss"),
                        "predicting the base rate", fix)
        if f.get("node_choice"):  # what each node hands itself, and why (local: judged on its own rows, no ε)
            console.print(NODE_CHOICE_HEADER)
            for i, (c, why) in enumerate(zip(f["node_choice"][-1], f["node_choice_reasons"])):
                console.print(f"  node{i}: {NODE_CHOICE_NAMES[c]} ({why})")
        metrics["verdict"] = v
        if v:
            console.print(v)
        if out is not None:
            np.savez(stage / "model.npz", **model_arrays)
            if node_arrays is not None:  # the nodes' own models: not for release (the report does not cover them)
                np.savez(stage / "node_models.npz", **node_arrays)
            if "train_loss" in metrics["history"]:  # a private run without --monitor keeps no training loss
                plot_curves(stage / "convergence.png", {"gossip": metrics["history"]},
                            title=f"noisy-gradient gossip: {data}, {nodes} nodes ({topology}, {split}), epsilon {epsilon:g}, "
                                  f"{runs} run(s) × {iterations} rounds")
        metrics["wall_seconds"] = elapsed()
        metrics["timing"] = run_timing(load_wall, load_cpu, f.pop("fit_seconds"), f.pop("fit_cpu_seconds"))
        if out is not None:
            write_json(stage / "metrics.json", standard_names(metrics))
    if out is not None:
        plotted = "train_loss" in metrics["history"]
        console.print(f"wrote {out}/metrics.json, model.npz" + (", node_models.npz" if node_arrays is not None else "")
                      + (" and convergence.png" if plotted else " (no convergence.png: a private run keeps no training "
                                                                  "loss without --monitor)"))
