"""Distributed scoring of new records: each party scores its own aligned rows with its own model file;
the label party sums. Equal to scoring the pooled records with the pooled model; a private model's
partial scores are refused unless the party's operator opts in."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

grpc = pytest.importorskip("grpc")

from dpadmm.algorithms.vertical import protocol as vsc  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, make_server  # noqa: E402
from dpadmm.backends.grpc_tls import TLSFiles, provision  # noqa: E402
from dpadmm.cli.score import score_new_records  # noqa: E402
from dpadmm.algorithms.psi import protocol as P  # noqa: E402
from dpadmm.exceptions import ProtocolError  # noqa: E402


@pytest.fixture
def setup(tmp_path):
    rng = np.random.default_rng(5)
    n = 300
    ids = np.array([f"n{i:04d}" for i in range(n)])
    X1, X2 = rng.normal(size=(n, 3)), rng.normal(size=(n, 4))
    y = rng.integers(0, 2, n)
    a = rng.permutation(n)[:250]  # the bank's new customers
    b = rng.permutation(n)[50:]  # the retailer's (200 in common with the bank at most)
    bank = pd.DataFrame(X1[a], columns=["a0", "a1", "a2"]); bank.insert(0, "id", ids[a]); bank.insert(1, "y", y[a])
    shop = pd.DataFrame(X2[b], columns=["b0", "b1", "b2", "b3"]); shop.insert(0, "id", ids[b])
    bank.to_csv(tmp_path / "bank_new.csv", index=False)
    shop.to_csv(tmp_path / "shop_new.csv", index=False)
    coefs = {"party1": rng.normal(size=3), "party2": rng.normal(size=4)}
    for name, c in coefs.items():
        (tmp_path / name).mkdir()
        np.savez(tmp_path / name / "model.npz", coef=c)
        (tmp_path / name / "model.json").write_text(json.dumps({"private": False}))
    provision(["coordinator", "party1", "party2"], tmp_path / "pki")
    return tmp_path, ids, X1, X2, y, a, b, coefs


def _parties(tmp_path, private=False, allow_monitoring=False):
    servers, peers, services = [], {}, {}
    for name, new in (("party1", "bank_new.csv"), ("party2", "shop_new.csv")):
        if private:
            (tmp_path / name / "model.json").write_text(json.dumps({"private": True}))
        svc = PartyService(name=name, protocol=[vsc.SCORING_PROTOCOL, P.PROTOCOL],
                           data={"new": str(tmp_path / new), "model": str(tmp_path / name / "model.npz")},
                           out=tmp_path / f"out-{name}", allow=("coordinator",), allow_monitoring=allow_monitoring)
        srv, port = make_server(svc, "127.0.0.1:0", TLSFiles.load(tls_dir=tmp_path / "pki" / name))
        srv.start()
        servers.append(srv)
        services[name] = svc
        peers[name] = f"127.0.0.1:{port}"
    return servers, services, peers


def _close(servers, services):
    for srv in servers:
        srv.stop(0).wait()
    for svc in services.values():
        svc.close()


def test_psi_aligned_scores_equal_the_pooled_model(setup):
    tmp_path, ids, X1, X2, y, a, b, coefs = setup
    servers, services, peers = _parties(tmp_path)
    be = GrpcBackend(peers, tls=TLSFiles.load(tls_dir=tmp_path / "pki" / "coordinator"), timeout=30)
    lm = {"intercept": 0.7, "passive_weight": 1.0, "label_coef": None, "normalized_rows": False}
    try:
        res = score_new_records(be, tmp_path / "bank_new.csv", lm, psi=True)
    finally:
        be.close()
        _close(servers, services)
    common = sorted(set(ids[a]) & set(ids[b]))
    assert list(res["ids"]) == common
    rows = np.array([int(s[1:]) for s in common])
    expect = X1[rows] @ coefs["party1"] + X2[rows] @ coefs["party2"] + 0.7
    np.testing.assert_allclose(res["scores"], expect, rtol=1e-12)
    assert set(res["metrics"]) == {"test_log_loss", "test_accuracy", "test_auc"}
    # party 2's audit log: every call answered, and what it sent for scoring is one vector of partial scores
    recs = [json.loads(x) for x in services["party2"].audit_path.read_text().splitlines()]
    assert all(r["status"] == "ok" for r in recs)
    last = [r for r in recs if r["method"] == "Request"][-1]
    assert last["reply"] == [{"name": "value", "shape": [len(common)], "dtype": "float64", "bytes": 8 * len(common)}]


def test_a_refit_label_block_is_scored_at_the_label_party_and_weighs_the_others(setup):
    tmp_path, ids, X1, X2, y, a, b, coefs = setup
    servers, services, peers = _parties(tmp_path)
    be = GrpcBackend({"party2": peers["party2"]}, tls=TLSFiles.load(tls_dir=tmp_path / "pki" / "coordinator"),
                     timeout=30)
    own = np.array([0.5, -1.0, 2.0])
    lm = {"intercept": -0.2, "passive_weight": 0.4, "label_coef": own.tolist(), "normalized_rows": False}
    try:
        res = score_new_records(be, tmp_path / "bank_new.csv", lm, psi=True)
    finally:
        be.close()
        _close(servers, services)
    rows = np.array([int(s[1:]) for s in res["ids"]])
    np.testing.assert_allclose(res["scores"], X1[rows] @ own + 0.4 * (X2[rows] @ coefs["party2"]) - 0.2, rtol=1e-12)
    assert "Request" not in services["party1"].audit_path.read_text()  # party1 was not asked


def test_a_private_model_is_not_scored_without_the_operators_consent(setup):
    tmp_path = setup[0]
    lm = {"intercept": 0.0, "passive_weight": 1.0, "label_coef": None, "normalized_rows": False}
    for allow in (False, True):
        servers, services, peers = _parties(tmp_path, private=True, allow_monitoring=allow)
        be = GrpcBackend(peers, tls=TLSFiles.load(tls_dir=tmp_path / "pki" / "coordinator"), timeout=30)
        try:
            if allow:
                assert len(score_new_records(be, tmp_path / "bank_new.csv", lm, psi=True)["scores"]) > 0
            else:
                with pytest.raises(ProtocolError, match="refused request 'score' in a private run"):
                    score_new_records(be, tmp_path / "bank_new.csv", lm, psi=True)
        finally:
            be.close()
            _close(servers, services)
