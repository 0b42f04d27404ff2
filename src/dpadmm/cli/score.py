"""``dpadmm score``: the label party scores new records across the parties (``--backend grpc`` runs).

The label party (the coordinator's organisation) holds its new-records file (ids, optionally
labels: then it also prints the usual test metrics) and the training run's ``--out`` directory
(``label_model.json``: intercept, weight on the other parties' scores, and after a private fit its
refitted block). Every party serves ``vertical-scoring`` with its own new-records file and its own
model file; with ``--psi`` the rows are aligned by private set intersection first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer

from ._app import app
from . import _backend as bk
from .._jsonio import write_json
from ._common import console, output_dir
from ..exceptions import DataFileError, InvalidParameterError

LABEL_MODEL = "label_model.json"


def write_label_model(directory: Path, model, data) -> None:
    """The label party's part of a grpc run's model (never sent to a passive party)."""
    coef = getattr(model, "label_coef_", None)
    out = {"format": "dpadmm-label-model/1", "intercept": float(model.intercept_),
           "passive_weight": float(getattr(model, "passive_weight_", 1.0)),
           "label_coef": None if coef is None else np.asarray(coef, dtype=float).tolist(),
           "normalized_rows": bool(data.source.get("normalized_rows", False)),
           "parties": sorted(data.source.get("peers", {})),
           "private": getattr(model, "privacy_", None) is not None}
    write_json(Path(directory) / LABEL_MODEL, out)


def _read_label_model(model_dir: Path) -> dict:
    path = Path(model_dir) / LABEL_MODEL
    if not path.is_file():
        raise DataFileError(f"no {LABEL_MODEL} in {model_dir}; give --model the --out directory of a "
                            "`dpadmm vertical admm --backend grpc` run.")
    try:
        lm = json.loads(path.read_text())
        if str(lm.get("format", "")).startswith("dpadmm-experts"):  # a `--protocol experts --backend grpc` run
            return lm
        float(lm["intercept"]), float(lm["passive_weight"])
    except (ValueError, KeyError, TypeError):
        raise DataFileError(f"{path} is not a dpadmm label model; re-run the training with --out.") from None
    return lm


def score_new_records(backend, party_file, label_model: dict, *, psi: bool = False, id_column: str = "id",
                      label_column: str = "y") -> dict:
    """Scores (and, when the file has labels, test metrics) of the label party's new records."""
    from ..algorithms.vertical import protocol as vertical_protocol, scoring as vertical_scoring
    from ..fit import runner
    from ..backends.base import PartySpec
    from ..data.parties import _read_csv
    from ..data.remote import PartyFile
    from ..data.vertical import encode_labels
    from ..workflows.vertical import classifier_metrics
    from ..protocol import PartyData

    if str(label_model.get("format", "")).startswith("dpadmm-experts"):
        from ._vertical_experts import score_new_records as score_experts

        return score_experts(backend, party_file, label_model, psi=psi, id_column=id_column, label_column=label_column)
    names = list(backend.peers)
    own_coef = label_model.get("label_coef")
    first = 2 if own_coef is not None and "party1" not in names else 1  # a refit label block is scored here
    expected = [f"party{m}" for m in range(first, first + len(names))]
    if sorted(names, key=lambda n: (len(n), n)) != expected:
        raise InvalidParameterError(f"vertical parties must be named party1 (the label party), party2, … (party1 may "
                                    f"be left out after a private fit: the label party scores its refit block itself); "
                                    f"got --peer {', '.join(names)}.")
    asked = [n for n in expected if n != "party1"] if own_coef is not None else expected
    head = _read_csv(party_file, "the label party's new-records file")
    if id_column not in head.columns:
        raise DataFileError(f"{party_file} has no id column {id_column!r}; pass --id-column.")
    ids = head[id_column].to_numpy()
    info = backend.hello(asked)
    psi_info = None
    if psi:
        from ..fit.psi import align_parties

        aligned = align_parties(backend, asked, "new", ids, id_column=id_column)
        ids = aligned.ids
        psi_info = {"rows": int(len(ids)), "own_rows": int(len(head)), "parties": aligned.parties}
    normalize = bool(label_model.get("normalized_rows", False))
    specs = []
    for name in asked:
        m = int(name[len("party"):])
        facts = info[name].get("data", {})
        if "new" not in facts or "model" not in facts:
            raise InvalidParameterError(f"party {name!r} must serve --protocol vertical-scoring with --data new=FILE "
                                        "--data model=OUT/model.npz (its own new records and model).")
        join = {"psi": True} if psi else {"ids": ids}
        new = PartyData("new", {**join, "index": m, "n_features": int(facts["new"]["columns"]), "normalize": normalize},
                        (int(len(ids)), int(facts["new"]["columns"])))
        setup = vertical_protocol.SCORING_PROTOCOL.setup_type(name=name, X=new, model=PartyData("model", {}))
        specs.append(PartySpec.of(vertical_protocol.SCORING_PROTOCOL, name, setup))
    # the backend stays open (the caller's, closed by it): this side's part follows
    parts = runner.session(backend, specs, lambda b: {name: np.asarray(b.request(name, "score")) for name in asked},
                           close=False, blas_threads=None).result
    own = None
    if own_coef is not None:
        cols = len(own_coef)
        block = PartyFile(str(party_file), 1, np.asarray(ids), cols, id_column, label_column, normalize, subset=True)
        own = np.asarray(block.load() @ np.asarray(own_coef, dtype=float)).ravel()
    scores = vertical_scoring.combine(parts, label_model, "party1", own)
    prob = 1.0 / (1.0 + np.exp(-np.clip(scores, -500, 500)))
    result = {"ids": ids, "scores": scores, "probability": prob, "psi": psi_info}
    if label_column in head.columns:
        labels = head.set_index(id_column)[label_column].loc[ids].to_numpy()
        y_pm, _ = encode_labels(labels, None, "the new-records file")
        result["metrics"] = {f"test_{k}": v for k, v in classifier_metrics(prob, y_pm).items()}
    return result


@app.command()
def score(
    party: Path = typer.Option(..., "--party", help="The label party's new-records CSV (the id column; with the label "
                                                    "column, test metrics are printed too)."),
    model: Path = typer.Option(..., "--model", help="The --out directory of the `dpadmm vertical admm --backend grpc` run "
                                                    "(its label_model.json)."),
    peer: List[str] = bk.peer_option(),
    tls: Optional[Path] = bk.tls_option(),
    insecure: bool = bk.insecure_option(),
    psi: bool = typer.Option(False, "--psi", help="Align the new records by private set intersection first."),
    id_column: str = typer.Option("id", "--id-column", help="Id column of the new-records file."),
    label_column: str = typer.Option("y", "--label-column", help="Label column (optional in the new-records file)."),
    timeout: float = bk.timeout_option(),
    out: Path = typer.Option(..., "--out", help="Directory for predictions.csv (id, score, probability) and "
                                                "metrics.json."),
):
    """Score new records across the parties (each computes its partial score; the label party sums)."""
    if not party.is_file():
        raise DataFileError(f"file not found: {party}; check the path.")
    label_model = _read_label_model(model)
    opts = bk.run_options(backend="grpc", ray_address=None, ray_resources=None, timeout=timeout, transcript=None,
                          checkpoint_every=None, resume=None, out=out, peers=peer, tls=tls, insecure=insecure)
    import pandas as pd

    from ..fit import runner

    with output_dir(out) as stage:
        with runner.owned(opts.backend) as backend:
            res = score_new_records(backend, party, label_model, psi=psi, id_column=id_column,
                                    label_column=label_column)
        pd.DataFrame({id_column: res["ids"], "score": res["scores"], "probability": res["probability"]}).to_csv(
            stage / "predictions.csv", index=False)
        metrics = {"n": int(len(res["ids"])), "psi": res["psi"], **res.get("metrics", {}),
                   "private_model": bool(label_model.get("private", False))}
        write_json(stage / "metrics.json", metrics)
    line = f"scored {metrics['n']} records"
    if res["psi"] is not None:
        line += f" (PSI: {res['psi']['rows']} of this side's {res['psi']['own_rows']} ids are held by every party)"
    console.print(line)
    if "test_log_loss" in metrics:
        console.print(f"test log loss: {metrics['test_log_loss']:.4f}  accuracy: {metrics['test_accuracy']:.4f}  "
                      f"AUC: {metrics['test_auc']:.4f}")
    console.print(f"wrote {out}/predictions.csv and metrics.json")
