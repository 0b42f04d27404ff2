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
from dpadmm.backends.grpc_party import PartyService  # noqa: E402
from conftest import ledger_of  # noqa: E402


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
        led = ledger_of(svc)
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


def _p2p_nodes(tmp_path, n_nodes, files=None):
    """One ``NodeService`` per node of a ring, each given its two neighbours' addresses (insecure loopback);
    ``files``: each node's own training file (it then accepts no coordinator data)."""
    from dpadmm.backends.grpc_p2p import NodeService
    from dpadmm.backends.grpc_party import make_server
    from conftest import free_ports

    ports = dict(enumerate(free_ports(n_nodes)))  # fixed ports first: each node's operator is given its neighbours'
    servers, services = [], []
    for i in range(n_nodes):
        nbrs = {f"node{j}": f"127.0.0.1:{ports[j]}" for j in {(i - 1) % n_nodes, (i + 1) % n_nodes}}
        svc = NodeService(name=f"node{i}", protocol=[PROTOCOL], data={} if files is None else {"train": files[i]},
                          out=tmp_path / f"node{i}", secure=False, accept_coordinator_data=files is None,
                          allow_seeded_noise=True, max_epsilon=5.0, delta=1e-5,
                          neighbours=nbrs, exchange_timeout=30.0)
        srv, _ = make_server(svc, f"127.0.0.1:{ports[i]}", None)
        srv.start()
        servers.append(srv)
        services.append(svc)

    def stop():
        for srv in servers:
            srv.stop(0).wait()
        for svc in services:
            svc.close()
    return {f"node{i}": f"127.0.0.1:{p}" for i, p in ports.items()}, services, stop


def test_gossip_peer_to_peer_equals_in_process_with_declared_bounds(tmp_path):
    """Each node sums its two neighbours' broadcasts itself (no round message through the coordinator): the
    model, every node's model and the per-node ε equal the routed in-process run at the same seed."""
    X, y = _data()
    bounds = (X.min(axis=0) - 1.0, X.max(axis=0) + 1.0)
    peers, services, stop = _p2p_nodes(tmp_path, 4)
    try:
        backend = GrpcBackend(peers, insecure=True, timeout=60, peer_to_peer=True)
        remote = ConsensusLogisticRegression(epsilon=2.0, n_nodes=4, topology="ring", rounds=6, random_state=4,
                                             bounds=bounds, backend=backend).fit(X, y)
    finally:
        stop()
    local = ConsensusLogisticRegression(epsilon=2.0, n_nodes=4, topology="ring", rounds=6, random_state=4,
                                        bounds=bounds).fit(X, y)
    np.testing.assert_allclose(remote.coefs_, local.coefs_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(remote.intercepts_, local.intercepts_, rtol=1e-9, atol=1e-12)
    assert remote.privacy_.per_party == pytest.approx(local.privacy_.per_party, rel=1e-9)
    assert not np.allclose(remote.coefs_[0], remote.coefs_[2])  # node0 and node2 are not neighbours: models differ
    for svc in services:  # no range rounds with declared bounds: T gradient sums, priced by each node
        led = ledger_of(svc)
        assert led["releases"] == 6 and led["epsilon_spent"] <= 2.0 + 1e-9
        recs = [json.loads(x) for x in (svc.out / "audit.jsonl").read_text().splitlines()]
        assert not any(r["method"] == "Step" for r in recs)  # no round went through the coordinator


def test_gossip_peer_to_peer_without_declared_bounds_is_refused_before_any_release(tmp_path):
    X, y = _data()
    backend = GrpcBackend({"node0": "127.0.0.1:1", "node1": "127.0.0.1:2", "node2": "127.0.0.1:3"}, insecure=True,
                          timeout=5, peer_to_peer=True)
    from dpadmm.exceptions import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="peer-to-peer gossip run needs declared column bounds"):
        _model(backend).fit(X, y)


def test_cli_gossip_over_grpc_peer_to_peer_equals_in_process(tmp_path, capsys):
    """``dpadmm consensus --epsilon 1 --bounds FILE --backend grpc --peer-to-peer``: the same model.npz and ε as the
    in-process CLI run at the same seed; without --bounds it is one line, exit 2."""
    from sklearn.datasets import dump_svmlight_file

    from conftest import run_cli

    X, y = _data(n=400)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=False)
    (tmp_path / "bounds.csv").write_text("lo,hi\n1985,2015\n0,200\n0,1\n")
    base = ["consensus", "gossip", "--data", tmp_path / "train.svm", "--epsilon", 1, "--bounds", tmp_path / "bounds.csv",
            "--nodes", 4, "--topology", "ring", "--iterations", 6, "--seed", 3, "--quiet"]
    peers, services, stop = _p2p_nodes(tmp_path, 4)
    try:
        code, _, err = run_cli([*base, "--backend", "grpc", "--peer-to-peer", "--insecure",
                                *[f"--peer={n}={a}" for n, a in peers.items()], "--out", tmp_path / "p2p"], capsys)
    finally:
        stop()
    assert code == 0, err
    code, _, err = run_cli([*base, "--out", tmp_path / "inproc"], capsys)
    assert code == 0, err
    a, b = (np.load(tmp_path / d / "model.npz") for d in ("p2p", "inproc"))
    np.testing.assert_allclose(a["coefs"], b["coefs"], rtol=1e-9, atol=1e-12)
    p2p, ref = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("p2p", "inproc"))
    assert p2p["config"]["peer_to_peer"] is True and p2p["config"]["backend"] == "grpc"
    assert p2p["final"]["privacy_per_node"] == pytest.approx(ref["final"]["privacy_per_node"], rel=1e-9)
    code, _, err = run_cli([*base[:6], *base[8:], "--backend", "grpc", "--peer-to-peer", "--insecure",
                            *[f"--peer={n}={a}" for n, a in peers.items()]], capsys)
    assert code == 2 and "--peer-to-peer with --epsilon needs --bounds FILE" in err, err


def test_each_node_reads_its_own_file_and_the_model_equals_in_process(tmp_path):
    """Natural nodes over gRPC: every node serves its own CSV (``party serve --data train=FILE``, no coordinator
    data); the coordinator sends only references; the model equals the in-process fit on the same node lists."""
    import pandas as pd
    from conftest import serve_parties

    from dpadmm.cli._consensus_nodes import remote_nodes
    from dpadmm.protocol import PartyData

    X, y = _data(n=300)
    parts = [slice(0, 60), slice(60, 170), slice(170, 300)]  # uneven natural nodes
    names = [f"node{i}" for i in range(3)]
    files = {}
    for nm, sl in zip(names, parts):
        files[nm] = tmp_path / f"{nm}.csv"
        pd.DataFrame({"year": X[sl, 0], "amount": X[sl, 1], "flag": X[sl, 2], "y": y[sl]}).to_csv(files[nm], index=False)
    services = {nm: PartyService(name=nm, protocol=[PROTOCOL], data={"train": files[nm]}, out=tmp_path / nm,
                                 secure=False, allow_seeded_noise=True, max_epsilon=5.0, delta=1e-5)
                for nm in names}
    peers, stop = serve_parties(services)
    try:
        backend = GrpcBackend(peers, insecure=True, timeout=60)
        Xs = remote_nodes(backend)
        assert all(isinstance(x, PartyData) for x in Xs) and [x.shape for x in Xs] == [(60, 3), (110, 3), (130, 3)]
        remote = _model(backend).fit(Xs, None)
    finally:
        stop()
    local = _model("inprocess").fit([X[sl] for sl in parts], [np.where(y[sl] > 0, 1, -1) for sl in parts])
    # the rounds are the same (one plan); then each node validates the shared model against the DP base rate on its
    # own rows, as the nodes' declared stage (algorithms/gossip/validation.py): the slice is spent, as in the simulation
    np.testing.assert_allclose(remote.coefs_, local.coefs_, rtol=1e-9, atol=1e-12)  # the nodes' consensus models
    np.testing.assert_allclose(remote.intercepts_, local.intercepts_, rtol=1e-9, atol=1e-12)
    assert remote.handed_over_ == local.handed_over_ == "dp-base-rate"  # 300 rows: the comparison cannot be won
    assert remote.privacy_.per_party == pytest.approx(local.privacy_.per_party, rel=1e-9)
    assert remote.privacy_.epsilon <= 2.0 + 1e-9
    assert not any("no DP validation" in n for n in remote.privacy_.notes)
    np.testing.assert_array_equal(remote.node_sizes_, [60, 110, 130])
    for i, nm in enumerate(names):  # each node chose its own model on its own rows, as the simulation did
        z = np.load(tmp_path / nm / "model.npz")
        assert str(z["choice"]) == local.node_choice_[i]
        np.testing.assert_allclose(z["recalibrated"], np.append(local.node_coefs_[i], local.node_intercepts_[i]),
                                   rtol=1e-8, atol=1e-10)


def test_cli_peer_to_peer_nodes_each_serve_their_own_file(tmp_path, capsys):
    """``dpadmm consensus --backend grpc --peer-to-peer --own-files``: each node serves its own CSV and the coordinator
    holds none; the model equals the in-process ``--node`` run on the same files at the same seed."""
    import pandas as pd

    from conftest import run_cli

    X, y = _data(n=400)
    files = []
    for i, sl in enumerate([slice(0, 70), slice(70, 160), slice(160, 290), slice(290, 400)]):
        files.append(tmp_path / f"node{i}.csv")
        pd.DataFrame({"year": X[sl, 0], "amount": X[sl, 1], "flag": X[sl, 2], "y": y[sl]}).to_csv(files[-1], index=False)
    (tmp_path / "bounds.csv").write_text("lo,hi\n1985,2015\n0,200\n0,1\n")
    base = ["consensus", "gossip", "--epsilon", 1, "--bounds", tmp_path / "bounds.csv", "--topology", "ring", "--seed", 3,
            "--quiet"]
    peers, services, stop = _p2p_nodes(tmp_path, 4, files)
    try:
        code, _, err = run_cli([*base, "--backend", "grpc", "--peer-to-peer", "--own-files", "--insecure",
                                *[f"--peer={n}={a}" for n, a in peers.items()], "--out", tmp_path / "p2p"], capsys)
    finally:
        stop()
    assert code == 0, err
    code, _, err = run_cli([*base, *[a for f in files for a in ("--node", f)], "--out", tmp_path / "inproc"], capsys)
    assert code == 0, err
    a, b = (np.load(tmp_path / d / "model.npz") for d in ("p2p", "inproc"))
    np.testing.assert_allclose(a["coefs"], b["coefs"], rtol=1e-9, atol=1e-12)
    m = json.loads((tmp_path / "p2p" / "metrics.json").read_text())
    assert m["config"]["nodes"] == 4 and (m["config"]["node_size_min"], m["config"]["node_size_max"]) == (70, 130)
    ref = json.loads((tmp_path / "inproc" / "metrics.json").read_text())
    # each node validated the shared model on its own rows (the declared stage): the same hand-over as the simulation's
    # and the slice in the per-node ε, which each node's own ledger recomputes
    assert m["final"]["handed_over"] == ref["final"]["handed_over"]
    assert m["final"]["privacy_per_node"] == pytest.approx(ref["final"]["privacy_per_node"], rel=1e-9)
    for svc in services:
        assert ledger_of(svc)["epsilon_spent"] == pytest.approx(m["final"]["privacy_per_node"][svc.name], rel=1e-6)
    own = np.load(tmp_path / "inproc" / "node_models.npz")
    for i in range(4):  # each node chose on its own rows what the simulation chose for it
        assert str(np.load(tmp_path / f"node{i}" / "model.npz")["choice"]) == str(own["choice"][i])
    code, _, err = run_cli([*base, "--own-files", "--node", files[0], "--node", files[1]], capsys)
    assert code == 2 and "--own-files" in err and err.count("error:") == 1
