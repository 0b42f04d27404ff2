"""Peer-to-peer consensus over mutual TLS: nodes talk only to their graph neighbours, the numbers equal
the routed in-process run, and a node refuses messages from anyone but its neighbours."""

from __future__ import annotations

import json

import numpy as np
import pytest

grpc = pytest.importorskip("grpc")

from dpadmm import engine  # noqa: E402
from dpadmm.algorithms.consensus import (messages as consensus_messages, protocol as consensus_protocol,  # noqa: E402
                                         router as consensus_router, schedules as consensus_schedules)
from dpadmm.backends import InProcessBackend, PartySpec  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_p2p import NodeService, run_p2p  # noqa: E402
from dpadmm.backends.grpc_party import make_server  # noqa: E402
from dpadmm.backends.grpc_tls import TLSFiles, provision  # noqa: E402
from dpadmm.data.graphs import adjacency  # noqa: E402
from dpadmm.exceptions import PartyFailureError  # noqa: E402
from conftest import free_ports  # noqa: E402

N, T = 4, 6
EDGES = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]  # node 1 and node 3 are not neighbours


def _problem(perturbation="none"):
    import networkx as nx

    rng = np.random.default_rng(7)
    Xs = [rng.normal(size=(30, 5)) / 3 for _ in range(N)]
    ys = [np.where(x @ np.ones(5) + 0.3 * rng.normal(size=30) > 0, 1.0, -1.0) for x in Xs]
    G = nx.Graph()
    G.add_nodes_from(range(N))
    G.add_edges_from(EDGES)
    A, V = adjacency(G)
    theta = consensus_schedules.schedule_table(1.0, 1.0, n_nodes=N, rounds=T, name="theta")
    alpha = np.full((N, T), 5.0 if perturbation != "none" else np.inf)
    opts = {"C": 1.0, "reg": 0.1 / N, "perturbation": perturbation, "newton_tol": 1e-12}
    Setup = consensus_protocol.PROTOCOL.setup_type
    specs = [PartySpec.of(consensus_protocol.PROTOCOL, f"node{i}", Setup(
                 names=[f"node{i}"], X_list=[Xs[i]], y_list=[ys[i]],
                 options=dict(opts, degree=V[[i]], eta=theta[[i]], theta=theta[[i]], alpha=alpha[[i]])))
             for i in range(N)]
    return specs, A


def _in_process(specs, A, seed):
    groups = tuple((s.name, np.array([i])) for i, s in enumerate(specs))
    hub = engine.Hub(consensus_messages.RouterConfig(A=A, blocks=groups, n_nodes=N, dim=5), consensus_router.init_router, consensus_router.router_step,
                     consensus_router.router_metrics)
    res = engine.run(hub=hub, parties=specs, backend=InProcessBackend(), rounds=T, noise_seed=seed, monitor=True,
                     stop_on_convergence=False)
    return res.history["objective"]


@pytest.fixture
def nodes(tmp_path):
    names = [f"node{i}" for i in range(N)]
    provision(["coordinator", *names], tmp_path / "pki")
    ports, servers, services = {}, [], {}
    # fixed ports first: each node's operator is given its neighbours' addresses
    ports.update(zip(names, free_ports(len(names))))
    for i, name in enumerate(names):
        nbrs = {f"node{j}": f"127.0.0.1:{ports[f'node{j}']}" for e in EDGES for j in e if i in e and j != i}
        tls = TLSFiles.load(tls_dir=tmp_path / "pki" / name)
        svc = NodeService(name=name, protocol=consensus_protocol.PROTOCOL, data={}, out=tmp_path / name, allow=("coordinator",),
                          accept_coordinator_data=True, allow_seeded_noise=True, neighbours=nbrs, tls=tls,
                          exchange_timeout=30.0)
        srv, port = make_server(svc, f"127.0.0.1:{ports[name]}", tls)
        srv.start()
        servers.append(srv)
        services[name] = svc
    peers = {n: f"127.0.0.1:{p}" for n, p in ports.items()}
    yield peers, services, tmp_path / "pki"
    for srv in servers:
        srv.stop(0).wait()
    for svc in services.values():
        svc.close()


@pytest.mark.parametrize("perturbation", ["none", "pp"])
def test_p2p_consensus_equals_the_routed_in_process_run(nodes, perturbation):
    peers, services, pki = nodes
    specs, A = _problem(perturbation)
    ref = _in_process(specs, A, seed=3)
    be = GrpcBackend(peers, tls=TLSFiles.load(tls_dir=pki / "coordinator"), timeout=30.0)
    try:
        if perturbation != "none":
            for svc in services.values():
                svc.allow_monitoring = True  # the operators opt in to public per-round metrics of a private run
        out = run_p2p(be, specs, T, noise_seed=3)
    finally:
        be.close()
    np.testing.assert_allclose(out["objective"], ref, rtol=1e-9, atol=0)
    # the coordinator sent no broadcast: its only messages were Hello/Setup/Run/Poll/Finish
    for name, svc in services.items():
        recs = [json.loads(x) for x in svc.audit_path.read_text().splitlines()]
        exch = [r for r in recs if r["method"] == "Exchange"]
        assert exch and all(r["peer"] in svc.neighbours and r["status"] == "ok" for r in exch)
        assert {r["peer"] for r in recs if r["method"] != "Exchange" and r.get("peer")} == {"coordinator"}


def test_a_node_refuses_messages_from_non_neighbours_and_impersonation(nodes):
    peers, services, pki = nodes
    node1 = TLSFiles.load(tls_dir=pki / "node1")
    ch = grpc.secure_channel(peers["node3"], grpc.ssl_channel_credentials(node1.ca, node1.key, node1.cert),
                             options=[("grpc.ssl_target_name_override", "node3")])
    msg = codec.encode({"from": "node1", "round": 1, "f": np.zeros(5)})
    with pytest.raises(grpc.RpcError) as err:  # node1 is not node3's neighbour
        ch.unary_unary("/dpadmm.Party/Exchange")(msg, timeout=10)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "not one of its neighbours" in err.value.details()
    ch.close()
    ch = grpc.secure_channel(peers["node2"], grpc.ssl_channel_credentials(node1.ca, node1.key, node1.cert),
                             options=[("grpc.ssl_target_name_override", "node2")])
    forged = codec.encode({"from": "node3", "round": 1, "f": np.zeros(5)})  # node1 speaking for node3
    with pytest.raises(grpc.RpcError) as err:
        ch.unary_unary("/dpadmm.Party/Exchange")(forged, timeout=10)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "speaks only for itself" in err.value.details()
    ch.close()
    coord = TLSFiles.load(tls_dir=pki / "coordinator")  # nor may the coordinator inject a broadcast
    ch = grpc.secure_channel(peers["node0"], grpc.ssl_channel_credentials(coord.ca, coord.key, coord.cert),
                             options=[("grpc.ssl_target_name_override", "node0")])
    with pytest.raises(grpc.RpcError) as err:
        ch.unary_unary("/dpadmm.Party/Exchange")(msg, timeout=10)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    ch.close()
    for name in ("node3", "node2", "node0"):
        assert '"method": "Exchange", "status": "refused"' in services[name].audit_path.read_text()


def test_a_node_whose_neighbour_list_disagrees_fails_the_run_naming_it(nodes):
    peers, services, pki = nodes
    services["node3"].neighbours.pop("node2")  # node3's operator forgot node2: node2's broadcasts are refused
    specs, _ = _problem()
    be = GrpcBackend(peers, tls=TLSFiles.load(tls_dir=pki / "coordinator"), timeout=30.0)
    for svc in services.values():
        svc.exchange_timeout = 3.0
    try:
        with pytest.raises(PartyFailureError, match="node"):
            run_p2p(be, specs, T, noise_seed=3)
    finally:
        be.close()
