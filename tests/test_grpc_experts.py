"""The vertical experts protocol across organisations: every feature party serves ``vertical-experts`` over gRPC,
fits its DP model once (priced by its own policy as ONE Gaussian release), keeps it, and answers only its logits
on NEW records; the label party (the coordinator) keeps its own model and the combination.

The seeded run over gRPC equals the in-process run to 1e-12 (CLI and estimator), the party's ledger equals the
report's per-party ε, and every departure the party's policy does not accept is refused before anything is
released: an empty ledger and one refusal line in its audit log."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms import vertical_experts as ve  # noqa: E402
from dpadmm.algorithms import vertical_experts_party as vp  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import LEDGER_NAME, PartyService, _Refused  # noqa: E402
from dpadmm.data.parties import write_party_files  # noqa: E402
from dpadmm.estimators.vertical_experts import VerticalExpertsClassifier  # noqa: E402
from dpadmm.privacy.policy import PartyPolicy  # noqa: E402
from dpadmm.protocol import PartyData, find_protocol  # noqa: E402
from conftest import run_cli, serve_parties  # noqa: E402

BUDGET = dict(max_epsilon=3.0, delta=1e-5)
NORMALIZING = PartyPolicy(relation="record", normalize_vertical_rows=True)  # the party's own preparation
PROTO = ve.PROTOCOL


def _blocks(n, seed=0, d=(2, 3, 2)):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, sum(d)))
    y = np.where(X @ rng.normal(size=sum(d)) + rng.logistic(size=n) > 0, 1, 0)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    cuts = np.cumsum(d)[:-1]
    return np.split(X, cuts, axis=1), y


def _files(tmp_path, n=240, n_test=120):
    """Party CSVs: training ids 0…n−1, test ids 10000…; party1 holds the labels."""
    blocks, y = _blocks(n + n_test)
    train = write_party_files([b[:n] for b in blocks], y[:n], tmp_path / "train", prefix="party")
    test = write_party_files([b[n:] for b in blocks], y[n:], tmp_path / "test", prefix="party",
                             ids=10_000 + np.arange(n_test))
    return train, test


def _services(tmp_path, train, test, names=("party2", "party3"), **kw):
    kw = {**BUDGET, **kw}
    return {name: PartyService(name=name, protocol=[PROTO], out=tmp_path / name, secure=False, allow_seeded_noise=True,
                               data={"train": str(train[int(name[-1]) - 1]), "test": str(test[int(name[-1]) - 1])},
                               describe_options={"id_column": "id", "label_column": "y"}, **kw) for name in names}


def _ledger(svc):
    svc.budget.close_run()
    return json.loads((svc.out / LEDGER_NAME).read_text())


def _audit(svc):
    return [json.loads(x) for x in svc.audit_path.read_text().splitlines()]


def test_cli_over_grpc_equals_in_process_and_each_ledger_equals_the_report(tmp_path, capsys):
    train, test = _files(tmp_path)
    common = ["vertical", "--protocol", "experts", "--epsilon", "1", "--label-epsilon", "2", "--prepare",
              "normalize-rows", "--seed", "3"]
    code, out_local, err = run_cli([*common, *sum((["--party", p] for p in train), []),
                                    *sum((["--test-party", p] for p in test), []), "--out", tmp_path / "local"], capsys)
    assert code == 0, err
    services = _services(tmp_path, train, test, policy=NORMALIZING)
    peers, stop = serve_parties(services)
    try:
        code, out_grpc, err = run_cli([*common, "--backend", "grpc", "--insecure", "--party", train[0], "--test-party",
                                       test[0], *sum((["--peer", f"{n}={a}"] for n, a in peers.items()), []),
                                       "--out", tmp_path / "grpc"], capsys)
        assert code == 0, err
        ledgers = {n: _ledger(s) for n, s in services.items()}
    finally:
        stop()
    local = json.loads((tmp_path / "local" / "metrics.json").read_text())
    remote = json.loads((tmp_path / "grpc" / "metrics.json").read_text())
    for k in ("test_log_loss", "test_accuracy", "test_auc"):
        assert remote["final"][k] == pytest.approx(local["final"][k], rel=1e-12, abs=1e-12)
    assert remote["final"]["expert_lambdas"] == pytest.approx(local["final"]["expert_lambdas"], rel=1e-12)
    assert remote["baselines"] == local["baselines"]
    assert remote["privacy"]["per_party"] == pytest.approx(local["privacy"]["per_party"], rel=1e-12)
    assert remote["config"]["backend"] == "grpc" and remote["privacy"]["noise_source"] == "seeded"
    # the same lines, the same figures
    first = [ln for ln in out_local.splitlines() if ln.startswith(("experts:", "baselines"))]
    assert first and first == [ln for ln in out_grpc.splitlines() if ln.startswith(("experts:", "baselines"))]
    for name, led in ledgers.items():  # the party's own account = the coordinator's report (one release)
        assert led["releases"] == 1 and led["relation"] == "record_replace"
        assert led["epsilon_spent"] == pytest.approx(remote["privacy"]["per_party"][name], rel=1e-6)
        assert (tmp_path / name / "model.npz").is_file()  # the model stayed at its party
        steps = [r for r in _audit(services[name]) if r["method"] == "Request"]
        assert steps and all(r["request"] for r in steps)
