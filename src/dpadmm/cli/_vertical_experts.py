"""``dpadmm vertical experts``: each party's own DP model, combined by the label party
(:mod:`dpadmm.algorithms.experts.model`). In-process (a simulation of the deployment), or across
organisations with ``--backend grpc``: this side is the label party (it reads its own ``--party`` file,
features and labels, fits its own model and combines), every other party serves ``vertical-experts``
(``dpadmm party serve --protocol vertical-experts --data train=FILE --data test=FILE``), fits and keeps its
model, and answers its logits on its test file's rows (distributed scoring: the test metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import numpy as np
import typer

from . import _options as opt
from . import _vertical_options as vo
from ._app import vertical_app
from .._jsonio import write_json
from ._common import console, elapsed, output_dir, party_data_refs
from ..workflows.baselines import base_rate_baseline, loss_tolerance, per_row_log_loss, verdict
from ._display import phase
from ..exceptions import InvalidParameterError, PrivacyPreconditionError

def remote_data(backend, party_files, test_party_files, *, id_column: str = "id", label_column: str = "y",
                psi: bool = False, private: bool = False):
    """The label party's side of a grpc run: its own block and labels read from its own ``--party`` file (and
    ``--test-party`` file), and for every other party (``party2``, …: ``--peer`` names) a
    :class:`~dpadmm.protocol.PartyData` reference to its training file and to its test file (key ``test``), joined
    on this side's ids — or, with ``psi``, on the private set intersection (:mod:`dpadmm.algorithms.psi`)."""
    from ..data.remote import PartyFile, party_sources
    from ..data.vertical import VerticalData, encode_labels

    if len(party_files) != 1 or len(test_party_files) > 1:
        raise InvalidParameterError("with --protocol experts --backend grpc give one --party FILE (the label party's "
                                    "features and labels) and at most one --test-party FILE; every other party reads "
                                    "its own files.")
    names = sorted(backend.peers, key=lambda n: (len(n), n))
    expected = [f"party{m}" for m in range(2, len(names) + 2)]
    if names != expected:
        raise InvalidParameterError(f"with --protocol experts the other parties must be named party2, party3, … (this "
                                    f"side is the label party, party1); got --peer {', '.join(backend.peers)}.")
    info = backend.hello(expected)
    psi_info: dict = {}

    def own(key, path):
        src, lab, ids = party_sources([path], id_column=id_column, label_column=label_column)
        if psi:
            from ..fit.psi import align_parties

            aligned = align_parties(backend, expected, key, ids, id_column=id_column)
            psi_info[key] = {"rows": int(len(aligned.ids)), "own_rows": int(len(ids)), "parties": aligned.parties}
            src, lab, ids = party_sources([path], id_column=id_column, label_column=label_column, ids=aligned.ids)
            src[0] = PartyFile(src[0].path, 1, ids, src[0].n_features, id_column, label_column, subset=True)
        return src[0].load(), lab, ids

    def refs(key, ids):
        return party_data_refs(info, expected, key, ids, psi=psi, first_index=2)

    X, labels, ids = own("train", party_files[0])
    test = test_labels = None
    if test_party_files:
        Xt, test_labels, test_ids = own("test", test_party_files[0])
        test = [Xt, *refs("test", test_ids)]
    from .._validation import binary_labels

    # its own coding, for `dpadmm score`; a private run maps its labels, counting no class (red team T3)
    classes = binary_labels("labels of the label party's file", labels, private=private)[1]
    labels, test_labels = encode_labels(labels, test_labels, "the label party's file", private=private)
    return VerticalData([X, *refs("train", ids)], labels, test, test_labels,
                        {"party_files": [str(p) for p in party_files], "peers": dict(backend.peers),
                         "data_locality": "the label party reads its own file; every other party reads its own (grpc)",
                         "classes": np.asarray(classes).tolist(), **({"psi": psi_info} if psi else {})})


def run_experts(data, *, lam: float, epsilon, delta: float, label_epsilon, prepare: str, row_clip, seed,
                out: Path | None, label_mechanism: str, backend=None, min_effective_rows=None, bounds=None) -> dict:
    """Fit, evaluate, print and write metrics.json; returns the metrics. With ``backend`` (grpc), ``data.train[1:]``
    (and ``data.test[1:]``) are references to the other parties' files: they fit there and score their test rows."""
    from ..data.prepare import prepare_block
    from ..estimators.vertical_experts import VerticalExpertsClassifier, label_party_alone_proba
    from ..workflows.vertical import classifier_metrics
    if label_mechanism != "rr":
        raise InvalidParameterError("--protocol experts sends the labels once, by randomized response: drop "
                                    "--label-mechanism gaussian.")
    if prepare == "standardize":
        raise PrivacyPreconditionError(
            "--protocol experts protects each record of a party's block as it is used (replace one row): a party "
            "standardised by its own column statistics moves every row when one record is replaced, which that "
            "relation does not cover; drop --prepare (the default: each party bounds its own columns by a DP range "
            "estimate from its own budget) or declare each party's column bounds with --bounds FILE.")
    R = float(row_clip) if row_clip is not None else 1.0
    # the label party's preparation is its own: the estimator standardises its columns with its own statistics
    # (nothing about them is released), whatever --prepare says about the other parties
    own_how = "standardize"
    how = "none" if prepare == "auto" else prepare
    train, test = list(data.train), list(data.test) if data.test is not None else None
    remote = backend is not None
    declared = list(bounds or [])
    if declared and len(declared) != len(train) - 1:
        raise InvalidParameterError(f"--bounds: give one FILE per party other than the label party ({len(train) - 1}), "
                                    f"in --party order; got {len(declared)}.")
    if declared and prepare != "auto":
        raise InvalidParameterError("--bounds bounds each party's raw columns itself: drop --prepare.")
    if remote:  # every other party prepares its own rows (its policy may impose its own preparation)
        from ..protocol import PartyData

        def ref(r):
            return PartyData(r.key, dict(r.params, normalize=how == "normalize-rows"), r.shape)

        train[1:] = [ref(r) for r in train[1:]]
        if test is not None:
            test[1:] = [ref(r) for r in test[1:]]
    elif how != "none":
        for m in range(1, len(train)):
            train[m], sc = prepare_block(train[m], how)
            if test is not None:
                test[m] = prepare_block(test[m], how, scaling=sc)[0]
    from ..data.parties import row_norms

    # how each other party bounds its raw columns: declared bounds, else a DP range estimate (auto); rows as given
    # (clipped at R) when they were prepared by --prepare normalize-rows / none
    col_bounds = ([vo.bounds_file(f, int(B.shape[1])) for f, B in zip(declared, train[1:])] if declared else
                  "dp" if how == "none" and prepare == "auto" else None)
    model = VerticalExpertsClassifier(lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label_epsilon,
                                      row_clip=R, min_effective_rows=min_effective_rows, random_state=seed,
                                      bounds=col_bounds)
    final: dict = {"protocol": "experts"}
    phase("fitting the experts (one release per party) and calibrating on held-out rows")
    if remote:
        names = [f"party{m}" for m in range(2, len(train) + 1)]
        model.fit_remote(train[0], data.y, backend,
                         {n: (train[m], {"test": test[m]} if test is not None else {}) for m, n in enumerate(names, 1)})
        clipped = []  # the other parties' rows never reach this side
    else:  # rows clipped at R (an in-process diagnostic): none when the party bounded its columns
        clipped = [0.0 if col_bounds is not None else float(np.mean(row_norms(B) > R)) for B in train[1:]]
        model.fit(train, data.y)
    cal = getattr(model, "calibration_", None)
    final["calibration"] = cal.facts() if cal is not None else None
    final.update({"expert_lambdas": model.expert_lambdas_, "rows_clipped": clipped,
                  "kept_own_model": model.kept_own_model_, "effective_rows": model.effective_rows_})
    baselines: dict = {}
    alone_p = None
    if test is not None:
        phase("scoring the test rows")
        logit = model.remote_decision(test[0], "test") if remote else model.decision_function(test)
        final.update({f"test_{k}": v for k, v in model.metrics_from_logit(logit, data.y_test).items()})
        # one "label party alone" per data set: its raw columns, its own standardisation, whatever the options
        alone_p = label_party_alone_proba(data.train[0], data.y, data.test[0], lam)
        alone = {f"test_{k}": v for k, v in classifier_metrics(alone_p, data.y_test).items()}
        baselines = {"base_rate": base_rate_baseline(data.y, data.y_test, private=model.privacy_ is not None),
                     "label_party_alone": alone}
    rep = model.privacy_
    privacy = rep.to_dict() if rep is not None else {"private": False, "epsilon": "inf"}
    privacy["noise_source"] = model.noise_source_
    metrics = {"config": {"protocol": "experts", "lam": lam, "epsilon": epsilon, "delta": delta,
                          "label_epsilon": label_epsilon, "min_effective_rows": min_effective_rows,
                          "prepare": {"label_party": own_how, "others": how,
                                      "others_bounds": ("declared" if declared else "dp" if col_bounds == "dp" else
                                                        "none")},
                          "row_clip": R, "seed": seed, "party_sizes": [int(B.shape[1]) for B in train],
                          "backend": "grpc" if remote else "inprocess",
                          **({"peers": data.source.get("peers"), "psi": data.source.get("psi")} if remote else {})},
               "final": final, "baselines": baselines, "privacy": privacy}
    line = (f"experts: label party + {len(train) - 1} part{'y' if len(train) == 2 else 'ies'}, one release each"
            if not model.kept_own_model_ else "experts: the label party kept its own model, nothing released")
    if "test_log_loss" in final:
        line += (f"  test log loss: {final['test_log_loss']:.4f}  accuracy: {final['test_accuracy']:.4f}  "
                 f"AUC: {final['test_auc']:.4f}")
    console.print(line)
    if cal is not None and not cal.heldout_rows:
        console.print("calibration: too few rows to hold out for the cross-validation; the label party kept its own "
                      "model", soft_wrap=True)
    elif cal is not None:
        console.print(f"calibration on {cal.heldout_rows} of the label party's own held-out training rows: "
                      + ("kept the recalibrated combination (stacked)" if cal.kind == "stacked" else
                         "kept its own model (the combination did not beat it by two standard errors)")
                      + f"; held-out log loss own {cal.loss_own:.4f}, stacked {cal.loss_stacked:.4f}", soft_wrap=True)
    if model.kept_own_model_:
        console.print(f"note: {model.privacy_.notes[0]}; with more rows or a larger --label-epsilon the experts "
                      "would be fitted", soft_wrap=True)
    for m, frac in enumerate(clipped, start=2):
        if frac > 0.5:
            console.print(f"note: {frac:.0%} of party {m}'s rows were clipped at norm {R:g}; drop --prepare (each party "
                          "then bounds its own columns by a DP range estimate) or declare its bounds with --bounds FILE "
                          "to keep their signal (an in-process diagnostic from the party's rows, outside the guarantee; "
                          "a deployment never computes it)")
    if baselines:
        alone = baselines["label_party_alone"]["test_log_loss"]
        console.print(f"baselines (test log loss): base rate {baselines['base_rate']['test_log_loss']:.4f}, "
                      f"label party alone {alone:.4f}")
    if baselines and not model.kept_own_model_ and not (cal is not None and cal.kind == "own model"):
        # kept: the label party's own model by construction
        p = 1.0 / (1.0 + np.exp(-np.clip(np.asarray(logit, dtype=np.float64), -50, 50)))
        tol = loss_tolerance(per_row_log_loss(p, data.y_test), per_row_log_loss(alone_p, data.y_test))
        final["verdict_tolerance"] = tol
        v = verdict("test log loss", final["test_log_loss"], alone, "the label party alone",
                    "the experts protocol adds the parties' models as if their features were independent given the "
                    "label; where they overlap, or at small n·ε, use the label party's own model (or the default "
                    "--protocol admm, whose label party keeps its own model when the others' shares do not help)",
                    tolerance=tol)
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
            if remote:  # the label party's part, for `dpadmm score` (stays on this side)
                write_json(stage / "label_model.json", label_model(model, own_how, model.own_scaling_, how, data))
        console.print(f"wrote {out}/metrics.json" + (" and label_model.json" if remote else ""))
    return metrics


LABEL_MODEL_FORMAT = "dpadmm-experts-label-model/1"


def label_model(model, own_how: str, scaling, how: str, data) -> dict:
    """What the label party keeps of a grpc experts run to score new records later (``dpadmm score``): its own
    model and preparation, the prior log-odds, the public flip probability and row clip, the parties' names."""
    return {"format": LABEL_MODEL_FORMAT, "own_coef": np.asarray(model.own_coef_, dtype=float).tolist(),
            "prior_logit": float(model.prior_logit_), "flip_probability": model.flip_probability_,
            "row_clip": float(model.row_clip), "own_prepare": own_how,
            "own_scaling": None if scaling is None else [np.asarray(v, dtype=float).tolist() for v in scaling],
            "others_normalize": how == "normalize-rows", "classes": data.source.get("classes", np.asarray(model.classes_).tolist()),
            "parties": [] if model.kept_own_model_ else list(model.remote_[1]),
            "private": model.privacy_ is not None, "kept_own_model": bool(model.kept_own_model_)}


def score_new_records(backend, party_file, lm: dict, *, psi: bool = False, id_column: str = "id",
                      label_column: str = "y") -> dict:
    """``dpadmm score`` for an experts run: every party (serving ``vertical-experts`` with ``--data train=…
    --data new=… --data model=OUT/model.npz``) answers its logit on its rows of the new records from its own model
    file (it refuses any row of its training file); this side adds them to its own model's logit."""
    from ..algorithms.experts import model as experts_model, protocol as experts_protocol
    from ..algorithms.experts.messages import Setup
    from ..data.prepare import prepare_block
    from ..backends.base import PartySpec
    from ..fit import runner
    from ..data.parties import _read_csv
    from ..data.remote import PartyFile
    from ..workflows.vertical import classifier_metrics
    from ..exceptions import DataFileError
    from ..protocol import PartyData

    names = list(lm["parties"])
    if sorted(backend.peers) != sorted(names):
        raise InvalidParameterError(f"this model's parties are {names}; give one --peer for each (got "
                                    f"{', '.join(backend.peers) or 'none'}).")
    head = _read_csv(party_file, "the label party's new-records file")
    if id_column not in head.columns:
        raise DataFileError(f"{party_file} has no id column {id_column!r}; pass --id-column.")
    ids = head[id_column].to_numpy()
    psi_info = None
    if psi and names:
        from ..fit.psi import align_parties

        aligned = align_parties(backend, names, "new", ids, id_column=id_column)
        ids = aligned.ids
        psi_info = {"rows": int(len(ids)), "own_rows": int(len(head)), "parties": aligned.parties}
    cols = len([c for c in head.columns if c not in (id_column, label_column)])
    if cols + 1 != len(lm["own_coef"]):
        raise DataFileError(f"{party_file} has {cols} feature columns, the label party's model {len(lm['own_coef']) - 1}; "
                            "score records with the columns it was trained on.")
    X = PartyFile(str(party_file), 1, np.asarray(ids), cols, id_column, label_column, subset=True).load()
    if lm["own_prepare"] == "standardize":
        X = prepare_block(X, "standardize", scaling=tuple(np.asarray(v) for v in lm["own_scaling"]))[0]
    elif lm["own_prepare"] == "normalize-rows":
        X = prepare_block(X, "normalize-rows")[0]
    own = np.asarray(experts_model.augment(X, 1.0) @ np.asarray(lm["own_coef"], dtype=float)).ravel()
    experts = []
    if names:
        info = backend.hello(names)
        specs = []
        for m, name in enumerate(names, start=2):
            facts = info[name].get("data", {})
            if not {"train", "new", "model"} <= set(facts):
                raise InvalidParameterError(f"party {name!r} must serve --protocol vertical-experts with --data "
                                            "train=FILE --data new=FILE --data model=OUT/model.npz (its training file: "
                                            "no training row is scored).")
            join = {"psi": True} if psi else {"ids": np.asarray(ids).astype(str) if np.asarray(ids).dtype.kind == "O"
                                              else np.asarray(ids)}
            new = PartyData("new", {**join, "index": m, "n_features": int(facts["new"]["columns"]),
                                    "normalize": bool(lm["others_normalize"])},
                            (int(len(ids)), int(facts["new"]["columns"])))
            setup = Setup(name=name, train=PartyData("train", {"ids_only": True}), score={"new": new},
                          R=float(lm["row_clip"]), lam=1e-3, noise_multiplier=None, noise_norm=0.5,
                          model=PartyData("model", {}), flip_probability=lm["flip_probability"])
            specs.append(PartySpec.of(experts_protocol.PROTOCOL, name, setup))
        # the backend stays open (the command's, closed by it)
        experts = runner.session(backend, specs, lambda b: [np.asarray(b.request(name, "logit", "new"), dtype=np.float64)
                                                            for name in names],
                                 rounds=1, close=False, blas_threads=None).result
    scores = experts_model.combine(own, experts, float(lm["prior_logit"]))
    prob = 1.0 / (1.0 + np.exp(-np.clip(scores, -50, 50)))
    result = {"ids": ids, "scores": scores, "probability": prob, "psi": psi_info}
    if label_column in head.columns:
        labels = head.set_index(id_column)[label_column].loc[ids].to_numpy()
        classes = np.asarray(lm["classes"], dtype=labels.dtype if labels.dtype.kind in "iufb" else object)
        unknown = ~np.isin(labels, classes)
        if unknown.any():
            raise DataFileError(f"the new-records file's labels contain {labels[unknown][0]!r}, not one of the "
                                f"training classes {classes.tolist()}; use the same label coding.")
        y_pm = np.where(labels == classes[1], 1.0, -1.0)
        result["metrics"] = {f"test_{k}": v for k, v in classifier_metrics(prob, y_pm).items()}
    return result


@vertical_app.command("experts")
@opt.grouped
def experts(
    inp: vo.VerticalInput = None,
    prep: vo.Preparation = None,
    lam: float = vo.lam_option(),
    min_effective_rows: Optional[float] = typer.Option(None, rich_help_panel=vo.MODEL,
                                                       help="Floor to send the RR labels."),
    epsilon: Optional[float] = vo.epsilon_option(),
    label: vo.LabelPrivacy = None,
    delta: float = opt.delta_option(vo.PRIVACY, "δ of the total budget."),
    bounds: List[Path] = typer.Option([], "--bounds", metavar="FILE", rich_help_panel=vo.PRIVACY,
                                      help="Column bounds of each other party (repeat, --party order; in-process)."),
    seed: Optional[int] = opt.seed_option(vo.PRIVACY),
    out: Optional[Path] = opt.out_option(),
    quiet: bool = opt.quiet_option(),
    where: opt.Parties = None,
    psi: bool = vo.psi_option(),
    target: Optional[str] = vo.target_option(),
    label_range: Optional[str] = typer.Option(None, "--label-range", metavar="LO,HI", rich_help_panel=vo.MODEL,
                                              help="Declared label range (regression; needed with --epsilon, --label-epsilon)."),
    loss: str = typer.Option("squared", "--loss", metavar="squared|huber", rich_help_panel=vo.MODEL,
                             help="Each party's loss (regression)."),
    classes: Optional[str] = vo.classes_option(),
):
    """Each party's own DP model, added by the label party: no rounds, no shares (the experts protocol).

    The label is yes/no (binary), an amount (--target regression, with --label-range LO,HI if private) or one of
    several classes (--target multiclass, with --classes A,B,... if private)."""
    from .._validation import check_choice, check_positive
    from . import _vertical_targets as vt

    backend = where.backend
    if vt.experts_target(target, classes, label_range, loss, inp, prep, lam, min_effective_rows, epsilon, label, delta,
                         bounds, seed, out, where):
        return  # --target regression or multiclass: run by its own command
    if bounds and backend == "grpc":
        raise InvalidParameterError("--bounds declares the other parties' column bounds for an in-process experts "
                                    "run; drop it (across organisations each party's operator declares its own: "
                                    "party serve --bounds FILE).")
    if backend not in ("inprocess", "grpc"):
        raise InvalidParameterError(f"`dpadmm vertical experts` runs in-process (a simulation of the deployment) or "
                                    f"across organisations (--backend grpc); drop --backend {backend}.")
    if psi and backend != "grpc":
        raise InvalidParameterError("--psi aligns the rows of parties in different organisations: it needs "
                                    "--backend grpc.")
    check_positive("lam", lam)
    vo.check_budget(epsilon, delta, None, None)
    for name, value in (("label_epsilon", label.label_epsilon), ("row_clip", prep.row_clip)):
        if value is not None:
            check_positive(name, value)
    check_choice("prepare", prep.prepare, ("auto", "standardize", "normalize-rows", "none"))
    inp.check()
    fit = dict(lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label.label_epsilon, prepare=prep.how,
               row_clip=prep.row_clip, seed=seed, out=out, label_mechanism=label.label_mechanism,
               min_effective_rows=min_effective_rows)
    private = epsilon is not None or label.label_epsilon is not None  # labels mapped, no class counted (T3)
    if backend == "grpc":  # this side is the label party; every other party serves vertical-experts
        if inp.train is not None or inp.data is not None:
            raise InvalidParameterError("with --backend grpc give the label party's --party FILE (its features and "
                                        "labels); --train/--data do not apply (the features stay at the parties).")
        from ..fit import runner

        with runner.owned(where.run_options(out=out).backend) as remote:
            vdata = remote_data(remote, inp.party, inp.test_party, id_column=inp.id_column,
                                label_column=inp.label_column, psi=psi, private=private)
            run_experts(vdata, backend=remote, **fit)
        return
    where.run_options(out=out)  # --peer/--tls/--insecure without --backend grpc: one clear error
    run_experts(inp.load(private=private), bounds=bounds, **fit)
