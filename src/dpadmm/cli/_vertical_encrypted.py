"""``dpadmm vertical encrypted``: one joint model, gradients under OU encryption with DP noise on both
sides (:mod:`dpadmm.algorithms.encrypted`), the encrypted forward pass (features DP) with any number of parties
(three or more: the parties' column sums of each other's scores, opened by each score's owner). In-process (a simulation of the deployment); parties can serve the
protocol (``dpadmm party serve --protocol vertical-encrypted``) but this command does not drive them yet.
Needs the HE extra: ``pip install "dpadmm[he]"``."""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from ..exceptions import PrivacyPreconditionError
from . import _options as opt
from . import _vertical_options as vo
from ._app import vertical_app
from .._jsonio import write_json
from ._common import console, elapsed, output_dir
from ..workflows.baselines import base_rate_baseline, loss_tolerance, per_row_log_loss, verdict
from ._display import phase, progress


@contextmanager
def _native_stdout_to(quiet: bool):
    """The HE library's C++ log lines (written to file descriptor 1) kept off the command's output: sent to stderr,
    or discarded under ``--quiet``. stdout holds the command's results only."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (AttributeError, OSError, ValueError):  # no real descriptor 1 (an embedded run): nothing to keep off
        yield
        return
    target = os.open(os.devnull, os.O_WRONLY) if quiet else os.dup(2)
    try:
        os.dup2(target, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(target)


def run_encrypted(data, *, lam: float | None, epsilon, delta: float, label_epsilon, prepare: str, row_clip, seed,
                  out: Path | None, rounds: int | None, label_mechanism: str = "rr", quiet: bool = False) -> dict:
    """Fit in-process, evaluate, print and write metrics.json; returns the metrics."""
    from ..algorithms.encrypted import he
    from ..data.prepare import prepare_block
    from ..estimators.vertical_encrypted import VerticalEncryptedClassifier
    from ..algorithms.experts.alone import label_party_alone_proba
    from ..workflows.vertical import BASELINE_LAM, classifier_metrics

    he.require_he()  # one line with the install command
    if prepare == "standardize":
        raise PrivacyPreconditionError(
            "--protocol encrypted protects each record of a party's block as it is used (replace one row): a party "
            "standardised by its own column statistics moves every row when one record is replaced; scale columns "
            "by public bounds (then --prepare none) or pass --prepare normalize-rows.")
    how = "none" if prepare == "auto" else prepare
    train, test = list(data.train), list(data.test) if data.test is not None else None
    if how != "none":
        for m in range(len(train)):
            train[m], sc = prepare_block(train[m], how)
            if test is not None:
                test[m] = prepare_block(test[m], how, scaling=sc)[0]
    forward = "encrypted"  # features DP with any number of parties (the clear forward pass does not protect them)
    T = int(rounds) if rounds is not None else VerticalEncryptedClassifier.DEFAULTS[forward]["rounds"]
    model = VerticalEncryptedClassifier(epsilon=epsilon, label_epsilon=label_epsilon, delta=delta, rounds=T,
                                        forward=forward, label_mechanism=label_mechanism,
                                        lam=1e-4 if lam is None else lam,
                                        row_clip=float(row_clip) if row_clip is not None else 1.0, random_state=seed)
    phase(f"encrypted training ({T} rounds) and calibration")
    with progress(T, "vertical encrypted") as cb, _native_stdout_to(quiet):  # round k/T and time left
        model.fit(train, data.y, callbacks=[cb])
    phase("scoring the test rows")
    final: dict = {"protocol": "encrypted", "forward": forward, **model.cost_}
    cal = model.combination_  # the label party's final model (algorithms.encrypted.combine): None = the joint one
    final["combination"] = cal.facts() if cal is not None else {"choice": "joint"}
    baselines: dict = {}
    p = mine = None
    if test is not None:
        final.update({f"test_{k}": v for k, v in model.score_metrics(test, data.y_test).items()})
        mine = model.predict_proba(test)[:, 1]
        final["test_auc"] = classifier_metrics(mine, data.y_test)["auc"]
        # one "label party alone" per data set: its raw columns, its own standardisation, whatever the options
        p = label_party_alone_proba(data.train[0], data.y, data.test[0], BASELINE_LAM)
        baselines = {"base_rate": base_rate_baseline(data.y, data.y_test, private=model.privacy_ is not None),
                     "label_party_alone": {f"test_{k}": v for k, v in classifier_metrics(p, data.y_test).items()}}
    metrics = {"config": {"protocol": "encrypted", "rounds": T, "lam": model.lam, "step": model.step,
                          "epsilon": epsilon, "label_epsilon": label_epsilon, "label_mechanism": label_mechanism,
                          "delta": delta, "prepare": how,
                          "row_clip": model.row_clip, "weight_bound": model.weight_bound, "combine": model.combine,
                          "seed": seed, "he": f"Okamoto-Uchiyama {he.KEY_BITS}-bit (the label party's key), Paillier "
                                f"{he.MIN_MODULUS_BITS}-bit (each other party's; sf-heu)",
                          "party_sizes": [int(B.shape[1]) for B in train]},
               "final": final, "baselines": baselines, "privacy": _json_inf(model.privacy_)}
    line = (f"encrypted ({forward} forward pass): label party + {len(train) - 1} part{'y' if len(train) == 2 else 'ies'}, "
            f"{T} rounds")
    if "test_log_loss" in final:
        line += f"  test log loss: {final['test_log_loss']:.4f}  accuracy: {final['test_accuracy']:.4f}"
        line += f"  AUC: {final['test_auc']:.4f}" if final["test_auc"] is not None else ""
    console.print(line)
    if cal is not None:
        kept = {"stacked": "the parties' joint scores stacked with its own model (better by two standard errors)",
                "weighted": f"its own model plus the parties' joint score with weight {cal.weights[2]:.3g}",
                "own model": "its own model (the parties' joint score got weight 0)"}[cal.kind]
        console.print(f"final model, chosen on {cal.heldout_rows} of the label party's own held-out training rows: "
                      f"{kept}; cross-validated held-out log loss {cal.loss_own:.4f}, stacked {cal.loss_stacked:.4f}",
                      soft_wrap=True)
    if baselines:
        alone = baselines["label_party_alone"]["test_log_loss"]
        console.print(f"baselines (test log loss): base rate {baselines['base_rate']['test_log_loss']:.4f}, "
                      f"label party alone {alone:.4f}")
    if baselines and not (cal is not None and cal.kind == "own model"):  # kept: its own model by construction
        tol = loss_tolerance(per_row_log_loss(mine, data.y_test), per_row_log_loss(p, data.y_test))
        final["verdict_tolerance"] = tol
        v = verdict("test log loss", final["test_log_loss"], alone, "the label party alone",
                    "at small n·ε the joint model's noise outweighs the other parties' signal; use the label party's "
                    "own model, more rows or a larger --epsilon", tolerance=tol)
        v = v.replace("WORSE THAN A TRIVIAL MODEL", "WORSE THAN THE LABEL PARTY ALONE") if v else v
        metrics["verdict"] = v
        if v:
            console.print(v)
    p = model.privacy_
    feat = p["features"]["epsilon"]
    who = f" {p['features']['against']}" if "against" in p["features"] else ""
    console.print(f"privacy: labels epsilon = {p['labels']['epsilon']:.4g}, features epsilon = {feat:.4g}{who} at "
                  f"delta = {delta:g}; {p['features']['note']}; {p['labels']['note']}", soft_wrap=True)
    if out is not None:
        with output_dir(out) as stage:
            metrics["wall_seconds"] = elapsed()
            write_json(stage / "metrics.json", metrics)
        console.print(f"wrote {out}/metrics.json")
    return metrics


def _json_inf(obj):
    """ε = ∞ written as "inf" (JSON has no infinity; the report must not turn it into null)."""
    if isinstance(obj, dict):
        return {k: _json_inf(v) for k, v in obj.items()}
    if isinstance(obj, float) and math.isinf(obj):
        return "inf"
    return obj


@vertical_app.command("encrypted")
@opt.grouped
def encrypted(
    inp: vo.VerticalInput = None,
    prep: vo.Preparation = None,
    lam: float = vo.lam_option(),
    iterations: Optional[int] = vo.iterations_option(),
    epsilon: Optional[float] = vo.epsilon_option(),
    label: vo.LabelPrivacy = None,
    delta: float = opt.delta_option(vo.PRIVACY, "δ of the total budget."),
    seed: Optional[int] = opt.seed_option(vo.PRIVACY),
    out: Optional[Path] = opt.out_option(),
    quiet: bool = opt.quiet_option(),
):
    """Train one joint model with the encrypted forward pass (HE) and DP on both sides, in-process.

    Parties in different organisations serve it with `party serve --protocol vertical-encrypted`. No --backend,
    --transcript, --checkpoint-every or --resume: the in-process simulation records no ciphertexts and keeps no
    checkpoints (a deployment's parties checkpoint their own state).
    """
    vo.check_budget(epsilon, delta, None, None)
    private = epsilon is not None or label.label_epsilon is not None  # labels mapped, no class counted (T3)
    run_encrypted(inp.load(private=private), lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label.label_epsilon,
                     prepare=prep.how, row_clip=prep.row_clip, seed=seed, out=out, rounds=iterations,
                     label_mechanism=label.label_mechanism, quiet=quiet)
