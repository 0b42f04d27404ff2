"""``dpadmm attack labels``: label inference by a passive party from everything the coordinator sends it, on the
published protocol and under label DP (:mod:`dpadmm.attacks.labels`)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import typer

from .._jsonio import write_json
from ._common import console, output_dir
from .consensus import attack_app  # the shared `dpadmm attack` group
from ._vertical_report import _fmt
from ..exceptions import InvalidParameterError


def _plot_attack(path: Path, runs: dict) -> None:
    from .._plotting import legend_outside, save
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, title in ((axes[0], "canary_auc", "canary records (random labels)"),
                           (axes[1], "all_auc", "all records")):
        for label, run in runs.items():
            rows = run["attack"]["rows"]
            rounds = sorted({r["round"] for r in rows})
            best = [max(r[key] for r in rows if r["round"] == t) for t in rounds]
            line, = ax.plot(rounds, best, marker=".", label=f"{label}: best attack")
            b = run["facts"]["bound"]
            if b < 1.0:
                ax.axhline(b, color=line.get_color(), ls="--", lw=1, label=f"{label}: e^ε/(1+e^ε) = {b:.3f}")
        ax.axhline(0.5, color="gray", ls=":", lw=1)
        ax.set(xlabel="round", ylabel="AUC (best of sign, norm, classifier; either sign)", title=title, ylim=(0.45, 1.02))
        ax.grid(alpha=0.3)
    legend_outside(axes[1])
    fig.tight_layout()
    save(fig, path)


@attack_app.command("labels")
def attack_labels(
    out: Path = typer.Option(..., help="Write attack.json and attack.png here."),
    label_epsilon: float = typer.Option(1.0, help="Label-side ε of the protected run."),
    delta: float = typer.Option(1e-5, help="δ of the protected run."),
    canaries: int = typer.Option(2000, help="Training records given random labels (leakage, not generalisation)."),
    known: int = typer.Option(500, help="Labels the attacker knows (to train its classifier; never canaries)."),
    unprotected_iterations: int = typer.Option(100, help="ADMM iterations of the unprotected run ([Hu, Alg. 1])."),
    parties: Optional[str] = typer.Option(None, help="Party column counts for the bundled a9a (default 66,57)."),
    seed: int = typer.Option(0, help="Seed of the canaries, the known set and the (simulated) noise."),
    quick: bool = typer.Option(False, "--quick", help="8,000 training records, 20 unprotected iterations."),
):
    """Label inference by party 2 from everything the coordinator sends it: published protocol vs label DP."""
    from ..attacks.labels import run_label_attack
    from ..data.vertical import load_vertical_data, normalized
    from .._validation import check_int, check_open_unit, check_positive

    check_positive("label_epsilon", label_epsilon)
    check_open_unit("delta", delta)
    check_int("canaries", canaries)
    check_int("known", known)
    check_int("unprotected_iterations", unprotected_iterations)
    data = normalized(load_vertical_data(bundled=True, parties=parties))
    blocks, y = data.train, data.y
    if quick:
        n = 8000
        blocks, y = [b[:n] for b in blocks], y[:n]
        unprotected_iterations = min(unprotected_iterations, 20)
    if canaries + known > len(y):
        raise InvalidParameterError(f"--canaries {canaries} + --known {known} exceed the {len(y)} training records; "
                                    "use fewer.")
    runs = {}
    with output_dir(out) as stage:
        for label, eps, kw in (("published protocol (labels unprotected)", None,
                                {"max_iter": unprotected_iterations, "tol": 0.0}),
                               (f"label DP, ε = {label_epsilon:g}", label_epsilon, {})):
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="ADMM did not reach tol")
                res, facts = run_label_attack(blocks, y, label_epsilon=eps, delta=delta, n_canaries=canaries,
                                              n_known=known, seed=seed, estimator_kwargs=kw)
            runs[label] = {"facts": facts, "attack": res.to_dict()}
            eps_s = _fmt(facts["label_epsilon"])
            console.print(f"{label}: best canary AUC {res.best_canary_auc:.3f} (bound e^ε/(1+e^ε) = "
                          f"{facts['bound']:.3f} at label ε = {eps_s}); best AUC on all records "
                          f"{res.best_all_auc:.3f}; {facts['vectors_received']} vectors over {facts['rounds']} rounds")
        write_json(stage / "attack.json", {"party": "party2", "n_train": int(len(y)), "seed": seed,
                                            "runs": runs, "data": data.source})
        _plot_attack(stage / "attack.png", runs)
    console.print(f"wrote {out}/attack.json and attack.png")
