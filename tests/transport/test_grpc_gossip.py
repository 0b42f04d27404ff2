"""Noisy-gradient gossip over gRPC: each node serves ``--protocol noisy-gradient-gossip``, prices the run with its
own policy and ledger, and the model equals the in-process fit at the same seed."""

from __future__ import annotations

import json

import numpy as np
import pytest

grpc = pytest.importorskip("grpc")

from dpadmm import ConsensusLogisticRegression  # noqa: E402
from dpadmm.algorithms.gossip.protocol import PROTOCOL  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import LEDGER_NAME, PartyService  # noqa: E402


def _data(n=240, seed=2):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.integers(1990, 2011, n), rng.gamma(2.0, 20.0, n), rng.random(n) < 0.3]).astype(float)
    y = np.where(0.15 * (X[:, 0] - 2000) - 0.03 * (X[:, 1] - 40) + X[:, 2] + rng.normal(size=n) > 0, 1, 0)
    return X, y


def _model(backend):
    return ConsensusLogisticRegression(epsilon=2.0, n_nodes=3, topology="ring", rounds=6, random_state=4,
                                       backend=backend)


def test_gossip_over_grpc_equals_in_process_and_each_node_prices_its_releases(tmp_path):
    from conftest import serve_parties

    X, y = _data()
    names = [f"node{i}" for i in range(3)]
    services = {nm: PartyService(name=nm, protocol=[PROTOCOL], data={}, out=tmp_path / nm, secure=False,
                                 accept_coordinator_data=True, allow_seeded_noise=True, max_epsilon=5.0, delta=1e-5)
                for nm in names}
    peers, stop = serve_parties(services)
    try:
        remote = _model(GrpcBackend(peers, insecure=True, timeout=60)).fit(X, y)
    finally:
        stop()
    local = _model("inprocess").fit(X, y)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-12)
    assert remote.intercept_ == pytest.approx(local.intercept_, rel=1e-9)
    assert remote.privacy_.per_party == pytest.approx(local.privacy_.per_party, rel=1e-9)
    for nm, svc in services.items():
        led = json.loads((svc.out / LEDGER_NAME).read_text())
        assert led["releases"] == 14 + 6  # K range counts + T gradient sums
        assert led["epsilon_spent"] <= 2.0 + 1e-9


def test_a_budgeted_node_refuses_a_run_beyond_its_budget(tmp_path):
    from conftest import serve_parties

    from dpadmm.exceptions import PartyFailureError, ProtocolError

    X, y = _data()
    names = [f"node{i}" for i in range(3)]
    services = {nm: PartyService(name=nm, protocol=[PROTOCOL], data={}, out=tmp_path / nm, secure=False,
                                 accept_coordinator_data=True, allow_seeded_noise=True, max_epsilon=1.0, delta=1e-5)
                for nm in names}
    peers, stop = serve_parties(services)
    try:
        with pytest.raises((ProtocolError, PartyFailureError), match="above its operator's cap --max-epsilon"):
            _model(GrpcBackend(peers, insecure=True, timeout=60)).fit(X, y)
    finally:
        stop()
