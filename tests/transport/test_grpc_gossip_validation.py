"""The gossip validation at deployed nodes (issue 38 item 4): nodes that serve their own files over gRPC (routed, or
peer to peer) answer the validation stage on their own rows under their own policy and ledger — the slice is priced
at Setup, booked before each value leaves, in the report's per-node ε, and a hostile coordinator's request is refused
with its reason."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

grpc = pytest.importorskip("grpc")

from dpadmm import ConsensusLogisticRegression  # noqa: E402
from dpadmm.algorithms.gossip import validation as val  # noqa: E402
from dpadmm.algorithms.gossip.protocol import PROTOCOL  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService  # noqa: E402
from dpadmm.exceptions import PartyFailureError, ProtocolError  # noqa: E402
from conftest import ledger_of  # noqa: E402

SIZES = (700, 900, 800, 600)


def _files(tmp_path, seed=2):
    """Four uneven natural nodes, one CSV each (a signal the comparison resolves at ε = 2)."""
    rng = np.random.default_rng(seed)
    files, Xs, ys = [], [], []
    for i, b in enumerate(SIZES):
        X = np.column_stack([rng.normal(size=b), rng.gamma(2.0, 20.0, b), rng.random(b) < 0.3]).astype(float)
        y = np.where(1.5 * X[:, 0] - 0.05 * (X[:, 1] - 40) + X[:, 2] + rng.normal(size=b) > 0, 1, -1)
        files.append(tmp_path / f"node{i}.csv")
        pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "y": y}).to_csv(files[-1], index=False)
        Xs.append(X)
        ys.append(y)
    return files, Xs, ys


BOUNDS = (np.array([-5.0, 0.0, 0.0]), np.array([5.0, 200.0, 1.0]))


def _model(backend, **kw):
    return ConsensusLogisticRegression(epsilon=2.0, n_nodes=4, topology="ring", rounds=8, random_state=4,
                                       backend=backend, **kw)


def _routed(tmp_path, files, max_epsilon=5.0):
    from conftest import serve_parties

    services = {f"node{i}": PartyService(name=f"node{i}", protocol=[PROTOCOL], data={"train": f},
                                         out=tmp_path / f"node{i}", secure=False, allow_seeded_noise=True,
                                         max_epsilon=max_epsilon, delta=1e-5) for i, f in enumerate(files)}
    peers, stop = serve_parties(services)
    return services, GrpcBackend(peers, insecure=True, timeout=60), stop


def test_peer_to_peer_nodes_validate_on_their_own_rows_and_book_the_slice(tmp_path):
    """Each node serves its own file peer to peer; after its rounds it answers the count and the comparison (the only
    rounds through the coordinator), books them in its own ledger, and the report's per-node ε — the rounds' plus the
    slice — is what each node's ledger recomputes, and the simulation's on the same node lists at the same seed."""
    from test_grpc_gossip import _p2p_nodes

    from dpadmm.cli._consensus_nodes import remote_nodes

    files, Xs, ys = _files(tmp_path)
    peers, services, stop = _p2p_nodes(tmp_path, 4, files)
    try:
        backend = GrpcBackend(peers, insecure=True, timeout=60, peer_to_peer=True)
        remote = _model(backend, bounds=BOUNDS).fit(remote_nodes(backend), None)
    finally:
        stop()
    local = _model("inprocess", bounds=BOUNDS).fit(Xs, ys)
    np.testing.assert_allclose(remote.coefs_, local.coefs_, rtol=1e-9, atol=1e-12)
    assert remote.handed_over_ == local.handed_over_ == "model"  # won by far more than the noise, both ways
    assert remote.comparison_ < 3 * remote.comparison_threshold_
    rep = remote.privacy_
    assert rep.per_party == pytest.approx(local.privacy_.per_party, rel=1e-9) and rep.epsilon <= 2.0 + 1e-9
    assert not any("no DP validation" in n for n in rep.notes)
    assert any(r["name"].startswith("model-vs-DP-base-rate") for r in rep.releases)
    eps_v = val.slice_epsilon(2.0, val.VALIDATION_SHARE, sum(SIZES), 4, 3)
    for svc in services:
        led = ledger_of(svc)
        assert led["pure_epsilon"] == pytest.approx(eps_v, rel=1e-12)  # ε_b + ε_c, booked by the node itself
        assert led["releases"] == 8 + 2
        assert led["epsilon_spent"] == pytest.approx(rep.per_party[svc.name], rel=1e-6)
        steps = [r for r in map(json.loads, (svc.out / "audit.jsonl").read_text().splitlines())
                 if r["method"] == "Step"]
        assert len(steps) == 2  # the validation's count and comparison: no gradient round through the coordinator


def test_a_node_prices_the_slice_at_setup(tmp_path):
    """A node whose operator's cap covers the rounds' ε but not the slice refuses the run at Setup, before any
    release (a deployed run used to leave the slice unspent and unpriced)."""
    files, _, _ = _files(tmp_path)
    services, backend, stop = _routed(tmp_path, files, max_epsilon=1.9)
    from dpadmm.cli._consensus_nodes import remote_nodes

    try:
        with pytest.raises((ProtocolError, PartyFailureError), match="above its operator's cap --max-epsilon"):
            _model(backend).fit(remote_nodes(backend), None)
    finally:
        stop()
    assert all(ledger_of(s)["releases"] == 0 for s in services.values())


def _hostile(kind):
    """A coordinator that tampers with the validation's requests (a wrapper of ``combine``'s delivery)."""
    keep = val.combine

    def combine(ask, names, n, w, **kw):
        def tampered(requests):
            req = next(iter(requests.values()))
            if req.stage == "compare":
                bad = {"nan-model": req._replace(w=np.full_like(req.w, np.nan)),
                       "wrong-shape": req._replace(w=req.w[:-1]),
                       "epsilon-above": req._replace(epsilon=2 * req.epsilon)}.get(kind)
                if bad is not None:
                    return ask({nm: bad for nm in names})
            if kind == "second-request" and req.stage == "compare":
                ask({nm: req for nm in names})
                return ask({nm: req._replace(w=req.w + 1.0) for nm in names})
            return ask(requests)
        return keep(tampered, names, n, w, **kw)
    return combine


@pytest.mark.parametrize("kind, reason", [
    ("nan-model", "refused the validation: the model must be 4 finite numbers"),
    ("wrong-shape", "refused the validation: the model must be 4 finite numbers"),
    ("epsilon-above", "refused the validation: the compare at epsilon="),
    ("second-request", "refused round 25 and sent nothing: the coordinator declared 24 rounds at Setup"),
])
def test_a_hostile_coordinator_request_is_refused_by_the_node(tmp_path, monkeypatch, kind, reason):
    """Routed, each node on its own file: a non-finite or wrongly shaped model, an ε above what the node declared and
    priced, or a second comparison (of another model) is refused by the node with its reason; the node's ledger holds
    only what it released."""
    from dpadmm.cli._consensus_nodes import remote_nodes

    monkeypatch.setattr(val, "combine", _hostile(kind))
    files, _, _ = _files(tmp_path)
    services, backend, stop = _routed(tmp_path, files)
    try:
        with pytest.raises((ProtocolError, PartyFailureError), match=reason):
            _model(backend).fit(remote_nodes(backend), None)
    finally:
        stop()
    eps_b, eps_c = val.split(val.slice_epsilon(2.0, val.VALIDATION_SHARE, sum(SIZES), 4, 3), sum(SIZES), 4)
    for svc in services.values():
        led = ledger_of(svc)
        assert led["releases"] == 14 + 8 + 1 + (kind == "second-request")  # the refused request released nothing
        want = eps_b + (eps_c if kind == "second-request" else 0.0)
        assert led["pure_epsilon"] == pytest.approx(want, rel=1e-12)
