"""``dpadmm vertical --protocol experts``: each party's own DP model, combined by the label party
(:mod:`dpadmm.algorithms.vertical_experts`). In-process simulation of the deployment."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._common import base_rate_log_loss, console, elapsed, output_dir, verdict, write_json
from ..exceptions import InvalidParameterError, PrivacyPreconditionError

#: options of the ADMM protocol that mean nothing here (name -> value meaning "not given")
ADMM_ONLY = ("--rho", "--iterations", "--mechanism", "--relation", "--clip", "--iteration-epsilon", "--noise-scale",
             "--bound", "--adaptive-rho", "--monitor", "--transcript", "--checkpoint-every", "--resume", "--psi")


def refuse_admm_options(given: dict) -> None:
    """One line naming the first ADMM-only option given with ``--protocol experts``."""
    for name in ADMM_ONLY:
        if given.get(name):
            raise InvalidParameterError(f"{name} belongs to the ADMM protocol; --protocol experts has no rounds, "
                                        f"no shares and the record relation only: drop {name}.")


def run_experts(data, *, lam: float, epsilon, delta: float, label_epsilon, prepare: str, row_clip, seed,
                out: Path | None, label_mechanism: str) -> dict:
    """Fit, evaluate, print and write metrics.json; returns the metrics."""
    from ..algorithms.vertical_data import prepare_block
    from ..estimators.vertical_experts import VerticalExpertsClassifier
    from ..experiments.vertical import sklearn_baseline

    if label_mechanism != "rr":
        raise InvalidParameterError("--protocol experts sends the labels once, by randomized response: drop "
                                    "--label-mechanism gaussian.")
    if prepare == "standardize":
        raise PrivacyPreconditionError(
            "--protocol experts protects each record of a party's block as it is used (replace one row): a party "
            "standardised by its own column statistics moves every row when one record is replaced, which that "
            "relation does not cover; scale the columns by public bounds in the files (then --prepare none) or "
            "pass --prepare normalize-rows.")
    R = float(row_clip) if row_clip is not None else 1.0
    own_how = "standardize" if prepare == "auto" else prepare  # the label party's block never leaves it
    how = "none" if prepare == "auto" else prepare
    train, test = list(data.train), list(data.test) if data.test is not None else None
    s0 = None
    if own_how != "none":
        train[0], s0 = prepare_block(train[0], own_how)
        if test is not None:
            test[0] = prepare_block(test[0], own_how, scaling=s0)[0]
    if how != "none":
        for m in range(1, len(train)):
            train[m], sc = prepare_block(train[m], how)
            if test is not None:
                test[m] = prepare_block(test[m], how, scaling=sc)[0]
    from ..data.parties import row_norms

    clipped = [float(np.mean(row_norms(B) > R)) for B in train[1:]]
    model = VerticalExpertsClassifier(lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label_epsilon,
                                      row_clip=R, random_state=seed).fit(train, data.y)
    final: dict = {"protocol": "experts", "expert_lambdas": model.expert_lambdas_, "rows_clipped": clipped,
                   "kept_own_model": model.kept_own_model_, "effective_rows": model.effective_rows_}
    baselines: dict = {}
    if test is not None:
        final.update({f"test_{k}": v for k, v in model.score_metrics(test, data.y_test).items()})
        alone = sklearn_baseline(train[:1], data.y, test[:1], data.y_test, lam=lam, fit_intercept=True)
        baselines = {"base_rate": {"test_log_loss": base_rate_log_loss(data.y, data.y_test)},
                     "label_party_alone": {k: v for k, v in alone.items() if k.startswith("test_")}}
    rep = model.privacy_
    privacy = rep.to_dict() if rep is not None else {"private": False, "epsilon": "inf"}
    privacy["noise_source"] = model.noise_source_
    metrics = {"config": {"protocol": "experts", "lam": lam, "epsilon": epsilon, "delta": delta,
                          "label_epsilon": label_epsilon, "prepare": {"label_party": own_how, "others": how},
                          "row_clip": R, "seed": seed, "party_sizes": list(data.party_sizes)},
               "final": final, "baselines": baselines, "privacy": privacy}
    line = (f"experts: label party + {len(train) - 1} part{'y' if len(train) == 2 else 'ies'}, one release each"
            if not model.kept_own_model_ else "experts: the label party kept its own model, nothing released")
    if "test_log_loss" in final:
        line += (f"  test log loss: {final['test_log_loss']:.4f}  accuracy: {final['test_accuracy']:.4f}  "
                 f"AUC: {final['test_auc']:.4f}")
    console.print(line)
    if model.kept_own_model_:
        console.print(f"note: {model.privacy_.notes[0]}; with more rows or a larger --label-epsilon the experts "
                      "would be fitted", soft_wrap=True)
    for m, frac in enumerate(clipped, start=2):
        if frac > 0.5:
            console.print(f"note: {frac:.0%} of party {m}'s rows were clipped at norm {R:g}; scale its columns by "
                          "public bounds (or pass --prepare normalize-rows) to keep their signal")
    if baselines:
        alone = baselines["label_party_alone"]["test_log_loss"]
        console.print(f"baselines (test log loss): base rate {baselines['base_rate']['test_log_loss']:.4f}, "
                      f"label party alone {alone:.4f}")
    if baselines and not model.kept_own_model_:  # kept: the label party's own model by construction
        v = verdict("test log loss", final["test_log_loss"], alone, "the label party alone",
                    "the experts protocol adds the parties' models as if their features were independent given the "
                    "label; where they overlap, or at small n·ε, use the label party's own model (or the default "
                    "--protocol admm, whose label party keeps its own model when the others' shares do not help)")
        v = v.replace("WORSE THAN A TRIVIAL MODEL", "WORSE THAN THE LABEL PARTY ALONE") if v else v
        metrics["verdict"] = v
        if v:
            console.print(v)
    console.print("privacy: " + ("\n  ".join(rep.summary().splitlines()) if rep is not None else
                                 "not private (no --epsilon, no --label-epsilon): features and labels are not "
                                 "protected"))
    if out is not None:
        with output_dir(out) as stage:
            metrics["wall_seconds"] = elapsed()
            write_json(stage / "metrics.json", metrics)
        console.print(f"wrote {out}/metrics.json")
    return metrics

