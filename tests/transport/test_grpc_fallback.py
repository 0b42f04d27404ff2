"""The consensus DP base-rate fallback over gRPC: each node releases its noisy count and comparison as the
``consensus-baseline`` protocol's declared round messages, priced by its own policy and ledger; the numbers
equal the in-process fallback at the same seed; a node refuses what would break the sensitivity argument."""

from __future__ import annotations

import json

import numpy as np
import pytest

grpc = pytest.importorskip("grpc")

from dpadmm import ConsensusLogisticRegression  # noqa: E402
from dpadmm.algorithms.consensus import baseline as consensus_baseline, protocol as consensus_protocol  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, _Refused  # noqa: E402
from conftest import ledger_of  # noqa: E402
from dpadmm.exceptions import ProtocolError  # noqa: E402


def _data(n=180, d=4, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= 1.2 * np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X @ np.ones(d) + 0.5 * rng.normal(size=n) > 0, 1, 0)
    return X, y


def _serve(names, protocols, tmp_path, **kw):
    from conftest import serve_parties

    services = {name: PartyService(name=name, protocol=protocols, data={}, out=tmp_path / name, secure=False,
                                   accept_coordinator_data=True, allow_seeded_noise=True, **kw) for name in names}
    peers, stop = serve_parties(services)
    return peers, services, stop


def _model(backend, seed=4):
    return ConsensusLogisticRegression(perturbation="pp", alpha=3.0, n_nodes=3, max_iter=4, batch=False, C=2.0,
                                       reg_weight=0.1, fallback_epsilon=0.6, random_state=seed, backend=backend)


def test_fallback_over_grpc_equals_in_process_and_each_node_ledger_prices_it(tmp_path):
    X, y = _data()
    names = [f"node{i}" for i in range(3)]
    peers, services, stop = _serve(names, [consensus_protocol.PROTOCOL, consensus_protocol.BASELINE_PROTOCOL], tmp_path, max_epsilon=80.0, delta=1e-5)
    try:
        remote = _model(GrpcBackend(peers, insecure=True, timeout=60)).fit(X, y)
    finally:
        stop()
    local = _model("inprocess").fit(X, y)
    assert remote.handed_over_ == local.handed_over_
    assert remote.dp_base_rate_ == pytest.approx(local.dp_base_rate_, rel=1e-12)
    assert remote.comparison_ == pytest.approx(local.comparison_, rel=1e-9)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-12)
    assert remote.privacy_.per_party == pytest.approx(local.privacy_.per_party, rel=1e-12)
    for name, svc in services.items():
        led = ledger_of(svc)
        base = [r for r in led["runs"] if r["protocol"] == "consensus-baseline"]
        assert len(base) == 1 and base[0]["priced"]["pure_epsilon"] == pytest.approx(0.6)
        # the node's own account = the coordinator's report: P_i(T) + ε_b + ε_c
        assert led["epsilon_spent"] == pytest.approx(remote.privacy_.per_party[name], rel=1e-9)
        steps = [json.loads(x) for x in svc.audit_path.read_text().splitlines()]
        assert [r["status"] for r in steps if r["method"] == "Step"].count("ok") == 4 + 2


def test_a_node_that_does_not_serve_the_fallback_is_named_before_any_round(tmp_path):
    X, y = _data(n=60)
    peers, services, stop = _serve([f"node{i}" for i in range(3)], [consensus_protocol.PROTOCOL], tmp_path)
    try:
        with pytest.raises(ProtocolError, match="do not serve protocol 'consensus-baseline'.*--protocol consensus-baseline"):
            _model(GrpcBackend(peers, insecure=True, timeout=60)).fit(X, y)
        for svc in services.values():
            assert '"method": "Setup"' not in svc.audit_path.read_text()
    finally:
        stop()


def _node(tmp_path, **policy):
    svc = PartyService(name="node0", protocol=[consensus_protocol.BASELINE_PROTOCOL], data={}, out=tmp_path, secure=False,
                       accept_coordinator_data=True, **policy)
    allowed = codec.allow_list(consensus_protocol.BASELINE_PROTOCOL.types)

    def call(method, body):
        return codec.decode(svc.handle(method, codec.encode(body, allowed=allowed), ""), allowed=allowed)
    return svc, call


def _setup(call, eps=(0.25, 0.25), rounds=2):
    X, y = _data(n=40)
    call("Setup", {"protocol": consensus_protocol.BASELINE_PROTOCOL.name, "party": "node0", "index": 0, "rounds": rounds,
                   "setup": {"name": "node0", "X": X, "y": np.where(y > 0, 1.0, -1.0), "eps_count": eps[0],
                             "eps_compare": eps[1]}})


@pytest.mark.parametrize("bad, match", [
    ({"stage": "count"}, "second 'count' release"),
    ({"stage": "compare", "p_min": 0.9}, "p_min=0.9 must be in"),
    ({"stage": "compare", "margin_clip": -1.0}, "margin clip L=-1.0"),
    ({"stage": "compare", "f": np.array([np.nan, 0, 0, 0])}, "finite numbers"),
    ({"stage": "compare", "f": np.zeros(3)}, "finite numbers"),
    ({"stage": "vote"}, "unknown stage"),
])
def test_a_node_refuses_requests_that_break_the_sensitivity_argument(tmp_path, bad, match):
    svc, call = _node(tmp_path, max_epsilon=10.0, delta=1e-5)
    try:
        _setup(call)
        call("Step", {"round": 0, "inbox": consensus_baseline.Request("count")})
        spent = svc.budget.spent
        req = {"stage": "compare", "f": np.zeros(4), "p": 0.5, "margin_clip": consensus_baseline.MARGIN_CLIP, "p_min": consensus_baseline.P_MIN, **bad}
        with pytest.raises(_Refused, match=match):
            call("Step", {"round": 1, "inbox": consensus_baseline.Request(**req)})
        assert svc.budget.spent == spent  # nothing released, nothing charged
        assert '"status": "refused"' in svc.audit_path.read_text()
    finally:
        svc.close()


def test_the_fallback_is_priced_at_setup_and_refused_beyond_the_budget(tmp_path):
    svc, call = _node(tmp_path, max_epsilon=0.4, delta=1e-5)
    try:
        with pytest.raises(_Refused, match="above its operator's cap"):
            _setup(call, eps=(0.25, 0.25))  # ε_b + ε_c = 0.5 > 0.4
        _setup(call, eps=(0.15, 0.2))
        call("Step", {"round": 0, "inbox": consensus_baseline.Request("count")})
        call("Step", {"round": 1, "inbox": consensus_baseline.Request("compare", np.zeros(4), 0.5)})
        assert svc.budget.spent == pytest.approx(0.35)
        with pytest.raises(_Refused, match="non-finite|finite ε > 0"):
            _setup(call, eps=(0.0, 0.2))
    finally:
        svc.close()
