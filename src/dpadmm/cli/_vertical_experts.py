"""``dpadmm vertical --protocol experts``: each party's own DP model, combined by the label party
(:mod:`dpadmm.algorithms.vertical_experts`). In-process (a simulation of the deployment), or across
organisations with ``--backend grpc``: this side is the label party (it reads its own ``--party`` file,
features and labels, fits its own model and combines), every other party serves ``vertical-experts``
(``dpadmm party serve --protocol vertical-experts --data train=FILE --data test=FILE``), fits and keeps its
model, and answers its logits on its test file's rows (distributed scoring: the test metrics)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._common import base_rate_log_loss, console, elapsed, output_dir, verdict, write_json
from ..exceptions import InvalidParameterError, PrivacyPreconditionError

#: options of the ADMM protocol that mean nothing here (name -> value meaning "not given")
ADMM_ONLY = ("--rho", "--iterations", "--mechanism", "--relation", "--clip", "--iteration-epsilon", "--noise-scale",
             "--bound", "--adaptive-rho", "--monitor", "--transcript", "--checkpoint-every", "--resume")


def refuse_admm_options(given: dict) -> None:
    """One line naming the first ADMM-only option given with ``--protocol experts``."""
    for name in ADMM_ONLY:
        if given.get(name):
            raise InvalidParameterError(f"{name} belongs to the ADMM protocol; --protocol experts has no rounds, "
                                        f"no shares and the record relation only: drop {name}.")


def remote_data(backend, party_files, test_party_files, *, id_column: str = "id", label_column: str = "y",
                psi: bool = False):
    """The label party's side of a grpc run: its own block and labels read from its own ``--party`` file (and
    ``--test-party`` file), and for every other party (``party2``, …: ``--peer`` names) a
    :class:`~dpadmm.protocol.PartyData` reference to its training file and to its test file (key ``test``), joined
    on this side's ids — or, with ``psi``, on the private set intersection (:mod:`dpadmm.data.psi`)."""
    from ..data.remote import PartyFile, party_sources
    from ..experiments.vertical import VerticalData, _encode
    from ..protocol import PartyData

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
            from ..data.psi import align_parties

            aligned = align_parties(backend, expected, key, ids, id_column=id_column)
            psi_info[key] = {"rows": int(len(aligned.ids)), "own_rows": int(len(ids)), "parties": aligned.parties}
            src, lab, ids = party_sources([path], id_column=id_column, label_column=label_column, ids=aligned.ids)
            src[0] = PartyFile(src[0].path, 1, ids, src[0].n_features, id_column, label_column, subset=True)
        return src[0].load(), lab, ids

    def refs(key, ids):
        ids = np.asarray(ids)
        ids = ids.astype(str) if ids.dtype.kind == "O" else ids
        out = []
        for m, name in enumerate(expected, start=2):
            facts = info[name].get("data", {}).get(key)
            if facts is None:
                raise InvalidParameterError(f"party {name!r} was started without --data {key}=FILE; restart it with its "
                                            f"{key} file.")
            join = {"psi": True} if psi else {"ids": ids}
            out.append(PartyData(key, {**join, "index": m, "n_features": int(facts["columns"])},
                                 (int(len(ids)), int(facts["columns"]))))
        return out

    X, labels, ids = own("train", party_files[0])
    test = test_labels = None
    if test_party_files:
        Xt, test_labels, test_ids = own("test", test_party_files[0])
        test = [Xt, *refs("test", test_ids)]
    labels, test_labels = _encode(labels, test_labels, "the label party's file")
    return VerticalData([X, *refs("train", ids)], labels, test, test_labels,
                        {"party_files": [str(p) for p in party_files], "peers": dict(backend.peers),
                         "data_locality": "the label party reads its own file; every other party reads its own (grpc)",
                         **({"psi": psi_info} if psi else {})})


def run_experts(data, *, lam: float, epsilon, delta: float, label_epsilon, prepare: str, row_clip, seed,
                out: Path | None, label_mechanism: str, backend=None) -> dict:
    """Fit, evaluate, print and write metrics.json; returns the metrics. With ``backend`` (grpc), ``data.train[1:]``
    (and ``data.test[1:]``) are references to the other parties' files: they fit there and score their test rows."""
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
    remote = backend is not None
    if own_how != "none":
        train[0], s0 = prepare_block(train[0], own_how)
        if test is not None:
            test[0] = prepare_block(test[0], own_how, scaling=s0)[0]
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

    model = VerticalExpertsClassifier(lam=lam, epsilon=epsilon, delta=delta, label_epsilon=label_epsilon,
                                      row_clip=R, random_state=seed)
    final: dict = {"protocol": "experts"}
    if remote:
        names = [f"party{m}" for m in range(2, len(train) + 1)]
        model.fit_remote(train[0], data.y, backend,
                         {n: (train[m], {"test": test[m]} if test is not None else {}) for m, n in enumerate(names, 1)})
        clipped = []  # the other parties' rows never reach this side
    else:
        clipped = [float(np.mean(row_norms(B) > R)) for B in train[1:]]
        model.fit(train, data.y)
    final.update({"expert_lambdas": model.expert_lambdas_, "rows_clipped": clipped,
                  "kept_own_model": model.kept_own_model_, "effective_rows": model.effective_rows_})
    baselines: dict = {}
    if test is not None:
        logit = model.remote_decision(test[0], "test") if remote else model.decision_function(test)
        final.update({f"test_{k}": v for k, v in model.metrics_from_logit(logit, data.y_test).items()})
        alone = sklearn_baseline(train[:1], data.y, test[:1], data.y_test, lam=lam, fit_intercept=True)
        baselines = {"base_rate": {"test_log_loss": base_rate_log_loss(data.y, data.y_test)},
                     "label_party_alone": {k: v for k, v in alone.items() if k.startswith("test_")}}
    rep = model.privacy_
    privacy = rep.to_dict() if rep is not None else {"private": False, "epsilon": "inf"}
    privacy["noise_source"] = model.noise_source_
    metrics = {"config": {"protocol": "experts", "lam": lam, "epsilon": epsilon, "delta": delta,
                          "label_epsilon": label_epsilon, "prepare": {"label_party": own_how, "others": how},
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

