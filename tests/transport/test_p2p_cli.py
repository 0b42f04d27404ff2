"""``dpadmm consensus --backend grpc --peer-to-peer``: the CLI runs consensus peer to peer over loopback mutual
TLS. Its numbers equal the in-process run's at the same seed; every node spoke only to its graph neighbours
(its audit log) and refuses a non-neighbour; a node whose operator's neighbour list disagrees with
``--topology`` refuses the run; usage errors are one line, exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

grpc = pytest.importorskip("grpc")

from conftest import free_ports, run_cli  # noqa: E402
from dpadmm.algorithms.consensus import protocol as consensus_protocol  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends.grpc_p2p import NodeService  # noqa: E402
from dpadmm.backends.grpc_party import make_server  # noqa: E402
from dpadmm.backends.grpc_tls import TLSFiles, provision  # noqa: E402

N = 4  # ring: node0–node1–node2–node3–node0; node0 and node2 are not neighbours


def _ring(i: int) -> list[int]:
    return sorted({(i - 1) % N, (i + 1) % N})


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    provision(["coordinator", *[f"node{i}" for i in range(N)]], root)
    return root


@pytest.fixture(scope="module")
def libsvm(tmp_path_factory):
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(5)
    X = rng.normal(size=(240, 6))
    X /= 1.5 * np.linalg.norm(X, axis=1, keepdims=True)  # ||x|| <= 1 ([Zhang, Thm 4.1])
    y = np.where(X @ np.arange(1.0, 7.0) + 0.3 * rng.normal(size=240) > 0, 1, 0)
    path = tmp_path_factory.mktemp("data") / "train.svm"
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return path


def _nodes(pki, tmp_path, neighbours=_ring, **kw):
    ports = dict(enumerate(free_ports(N)))  # each node's operator is given its neighbours' addresses: fixed first
    servers, services = [], {}
    for i in range(N):
        name = f"node{i}"
        svc = NodeService(name=name, protocol=[consensus_protocol.PROTOCOL, consensus_protocol.BASELINE_PROTOCOL], data={}, out=tmp_path / name, allow=("coordinator",),
                          accept_coordinator_data=True, allow_seeded_noise=True, exchange_timeout=30.0,
                          neighbours={f"node{j}": f"127.0.0.1:{ports[j]}" for j in neighbours(i)},
                          tls=TLSFiles.load(tls_dir=pki / name), **kw)
        srv, _ = make_server(svc, f"127.0.0.1:{ports[i]}", TLSFiles.load(tls_dir=pki / name))
        srv.start()
        servers.append(srv)
        services[name] = svc
    return [f"--peer=node{i}=127.0.0.1:{ports[i]}" for i in range(N)], servers, services


def _stop(servers, services):
    for srv in servers:
        srv.stop(0).wait()
    for svc in services.values():
        svc.close()


COMMON = ["--nodes", N, "--topology", "ring", "--iterations", 8, "--seed", 0, "--quiet", "--C", 2.0,
          "--reg-weight", 0.1]


@pytest.mark.slow
@pytest.mark.parametrize("private", [False, True])
def test_cli_peer_to_peer_equals_in_process_and_nodes_talk_only_to_neighbours(pki, libsvm, tmp_path, private):
    extra = ["--perturbation", "pp", "--alpha", 5, "--fallback-epsilon", 0.4] if private else []  # + DP base rate
    peers, servers, services = _nodes(pki, tmp_path)
    try:
        code, _, err = run_cli(["consensus", "madmm", "--data", libsvm, *COMMON, *extra, "--backend", "grpc", "--peer-to-peer",
                                *peers, "--tls", pki / "coordinator", "--out", tmp_path / "p2p"])
        assert code == 0, err
        # a non-neighbour (node0 → node2) is refused, and the refusal is in node2's audit log
        n0 = TLSFiles.load(tls_dir=pki / "node0")
        addr = peers[2].split("=", 2)[2]
        ch = grpc.secure_channel(addr, grpc.ssl_channel_credentials(n0.ca, n0.key, n0.cert),
                                 options=[("grpc.ssl_target_name_override", "node2")])
        with pytest.raises(grpc.RpcError) as exc:
            ch.unary_unary("/dpadmm.Party/Exchange")(codec.encode({"from": "node0", "round": 1, "f": np.zeros(6)}),
                                                     timeout=10)
        ch.close()
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        _stop(servers, services)
    code, _, err = run_cli(["consensus", "madmm", "--data", libsvm, *COMMON, *extra, "--out", tmp_path / "inproc"])
    assert code == 0, err
    p2p, ref = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("p2p", "inproc"))
    assert p2p["config"]["peer_to_peer"] is True and p2p["config"]["backend"] == "grpc"
    # a private run without --monitor keeps no training loss (issue 35): its released quantities are compared
    assert ("train_loss" in ref["history"]) is (not private) and ("train_loss" in p2p["history"]) is (not private)
    if not private:
        np.testing.assert_allclose(p2p["history"]["train_loss"]["mean"], ref["history"]["train_loss"]["mean"],
                                   rtol=1e-9, atol=0)
    keys = ("consensus_error_mean",) + (() if private else ("objective_mean", "train_loss_mean"))
    for key in keys:
        np.testing.assert_allclose(p2p["final"][key], ref["final"][key], rtol=1e-9, atol=1e-15)
    if private:  # the fallback's two releases went as declared messages to the coordinator, priced at each node
        assert p2p["final"]["privacy_per_node"] == pytest.approx(ref["final"]["privacy_per_node"], rel=1e-12)
        assert p2p["final"]["handed_over"] == ref["final"]["handed_over"]
        assert p2p["final"]["dp_base_rate"] == pytest.approx(ref["final"]["dp_base_rate"], rel=1e-12)
    a, b = (np.load(tmp_path / d / "model.npz") for d in ("p2p", "inproc"))
    np.testing.assert_allclose(a["coefs"], b["coefs"], rtol=1e-9, atol=1e-12)
    for i in range(N):  # each node: Exchange only from its neighbours, every other call from the coordinator
        recs = [json.loads(x) for x in (tmp_path / f"node{i}" / "audit.jsonl").read_text().splitlines()]
        exch = [r for r in recs if r["method"] == "Exchange" and r["status"] == "ok"]
        assert exch and {r["peer"] for r in exch} == {f"node{j}" for j in _ring(i)}
        assert {r["peer"] for r in recs if r["method"] not in ("Exchange", "Start") and r.get("peer")} == {"coordinator"}
        # no consensus round went through the coordinator (only the fallback's two declared releases)
        assert sum(r["method"] == "Step" for r in recs) == (2 if private else 0)
    refused = [json.loads(x) for x in (tmp_path / "node2" / "audit.jsonl").read_text().splitlines()]
    assert any(r["method"] == "Exchange" and r["status"] == "refused" and r["peer"] == "node0" for r in refused)


@pytest.mark.slow
def test_a_node_whose_neighbours_disagree_with_the_topology_refuses_the_run(pki, libsvm, tmp_path, capsys):
    def complete(i):
        return [j for j in range(N) if j != i]

    peers, servers, services = _nodes(pki, tmp_path, neighbours=complete)  # operators list every node; --topology ring
    try:
        code, _, err = run_cli(["consensus", "madmm", "--data", libsvm, *COMMON, "--backend", "grpc", "--peer-to-peer", *peers,
                                "--tls", pki / "coordinator", "--out", tmp_path / "bad"], capsys)
    finally:
        _stop(servers, services)
    assert code != 0 and "the coordinator's graph gives it neighbours" in err and "--neighbour" in err
    assert not (tmp_path / "bad" / "metrics.json").exists()


def test_peer_to_peer_needs_the_grpc_backend(libsvm, capsys):
    code, _, err = run_cli(["consensus", "madmm", "--data", libsvm, "--nodes", 4, "--peer-to-peer"], capsys)
    assert code == 2 and "--peer-to-peer needs --backend grpc" in err
