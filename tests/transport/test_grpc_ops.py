"""Operating a party: provisioning one party at a time, the CSR flow, refusals in the audit log
(unknown methods, TLS handshakes), state-change logging, unreachable parties, Hello's requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")

from dpadmm.algorithms.vertical import protocol as vs  # noqa: E402
from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends import selftest  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, make_server  # noqa: E402
from dpadmm.backends.grpc_tls import TLSFiles, make_request, provision, sign_request  # noqa: E402
from dpadmm.exceptions import DataFileError, InvalidParameterError, PartyFailureError  # noqa: E402


def _serve(tmp_path, tls_dir, name="party1", **kw):
    svc = PartyService(name=name, protocol=kw.pop("protocol", selftest.PROTOCOL), data={}, out=tmp_path / name,
                       allow=("coordinator",), **kw)
    srv, port = make_server(svc, "127.0.0.1:0", TLSFiles.load(tls_dir=tls_dir))
    srv.start()
    return svc, srv, f"127.0.0.1:{port}"


def test_provision_one_party_at_a_time_and_refuse_a_taken_name(tmp_path):
    provision(["coordinator"], tmp_path / "ca")
    ca = (tmp_path / "ca" / "ca.pem").read_bytes()
    provision(["party1"], tmp_path / "ca")  # the same CA signs the later party
    assert (tmp_path / "ca" / "party1" / "ca.pem").read_bytes() == ca
    with pytest.raises(InvalidParameterError, match="already holds a certificate for 'party1'"):
        provision(["party1"], tmp_path / "ca")
    svc, srv, addr = _serve(tmp_path, tmp_path / "ca" / "party1")
    try:
        be = GrpcBackend({"party1": addr}, tls=TLSFiles.load(tls_dir=tmp_path / "ca" / "coordinator"))
        assert be.hello()["party1"]["name"] == "party1"
        be.close()
    finally:
        srv.stop(0).wait()
        svc.close()
    summary = json.loads((tmp_path / "ca" / "deployment.json").read_text())
    assert set(summary["parties"]) == {"coordinator", "party1"}


def test_csr_flow_the_key_never_leaves_the_organisation(tmp_path):
    provision(["coordinator"], tmp_path / "ca")
    org = tmp_path / "bank"
    csr = make_request("party1", org)
    key = (org / "key.pem").read_bytes()
    info = sign_request(csr, tmp_path / "ca")
    assert info["name"] == "party1" and not (tmp_path / "ca" / "party1" / "key.pem").exists()
    assert oct(os.stat(org / "key.pem").st_mode & 0o777) == "0o600"
    for f in ("cert.pem", "ca.pem"):  # what the CA hands back
        (org / f).write_bytes((tmp_path / "ca" / "party1" / f).read_bytes())
    assert (org / "key.pem").read_bytes() == key
    svc, srv, addr = _serve(tmp_path, org)
    try:
        be = GrpcBackend({"party1": addr}, tls=TLSFiles.load(tls_dir=tmp_path / "ca" / "coordinator"))
        assert be.hello()["party1"]["name"] == "party1"  # mutual TLS with the organisation's own key
        be.close()
    finally:
        srv.stop(0).wait()
        svc.close()
    with pytest.raises(InvalidParameterError, match="already holds a certificate"):
        sign_request(csr, tmp_path / "ca")


def test_csr_refusals(tmp_path):
    provision(["coordinator"], tmp_path / "ca")
    csr = make_request("party2", tmp_path / "org")
    pem = csr.read_text().splitlines()
    body = "".join(pem[1:-1])
    import base64

    der = bytearray(base64.b64decode(body))
    der[-5] ^= 0xFF  # a flipped bit in the signature
    bad = tmp_path / "tampered.csr"
    bad.write_text(pem[0] + "\n" + base64.encodebytes(bytes(der)).decode() + pem[-1] + "\n")
    with pytest.raises((InvalidParameterError, DataFileError), match="signature|not a PEM"):
        sign_request(bad, tmp_path / "ca")
    (tmp_path / "junk.csr").write_text("hello")
    with pytest.raises(DataFileError, match="not a PEM certificate signing request"):
        sign_request(tmp_path / "junk.csr", tmp_path / "ca")
    with pytest.raises(DataFileError, match="no CA"):
        sign_request(csr, tmp_path / "no-ca")
    with pytest.raises(InvalidParameterError, match="already holds a key"):
        make_request("party2", tmp_path / "org")
    with pytest.raises(InvalidParameterError, match="party name"):
        make_request("bad name!", tmp_path / "org2")


def test_unknown_method_is_refused_and_audited(tmp_path):
    provision(["coordinator", "party1"], tmp_path / "pki")
    lines = []
    svc, srv, addr = _serve(tmp_path, tmp_path / "pki" / "party1", echo=lines.append)
    try:
        tls = TLSFiles.load(tls_dir=tmp_path / "pki" / "coordinator")
        ch = grpc.secure_channel(addr, grpc.ssl_channel_credentials(tls.ca, tls.key, tls.cert),
                                 options=[("grpc.ssl_target_name_override", "party1")])
        with pytest.raises(grpc.RpcError) as err:
            ch.unary_unary("/dpadmm.Party/FetchModel")(codec.encode({}), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED and "serves no method" in err.value.details()
        ch.close()
    finally:
        srv.stop(0).wait()
        svc.close()
    recs = [json.loads(x) for x in svc.audit_path.read_text().splitlines()]
    assert any(r["method"] == "/dpadmm.Party/FetchModel" and r["status"] == "refused" and r["peer"] == "coordinator"
               for r in recs)
    assert any("refused unknown method /dpadmm.Party/FetchModel from coordinator" in x for x in lines)


def test_hello_advertises_only_the_requests_a_party_serves(tmp_path):
    provision(["coordinator", "party1"], tmp_path / "pki")
    out = {}
    for requests in (None, ["score"]):
        svc, srv, addr = _serve(tmp_path, tmp_path / "pki" / "party1", protocol=vs.PROTOCOL, requests=requests)
        try:
            be = GrpcBackend({"party1": addr}, tls=TLSFiles.load(tls_dir=tmp_path / "pki" / "coordinator"))
            out[str(requests)] = be.hello()["party1"]["requests"]
            be.close()
        finally:
            srv.stop(0).wait()
            svc.close()
    assert "refit" in vs.PROTOCOL.handlers and out["None"] == ["rank", "score"] and out["['score']"] == ["score"]


def test_an_unreachable_party_is_named_after_the_connect_timeout(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    be = GrpcBackend({"party2": f"127.0.0.1:{port}"}, insecure=True, connect_timeout=1.0)
    assert GrpcBackend({"p": "127.0.0.1:1"}, insecure=True).connect_timeout == 5.0  # the default: seconds, not 30
    with pytest.raises(PartyFailureError, match=r"party 'party2' failed: unreachable at 127\.0\.0\.1:\d+: no answer "
                                                r"to Hello within 1 s"):
        be.hello()
    be.close()


@pytest.mark.slow
def test_party_serve_logs_state_changes_and_refused_handshakes(tmp_path):
    """A separate `dpadmm party serve` process: a wrong-CA caller leaves an audit record and one log line;
    a run logs connected / started / ended; no heartbeat lines."""
    provision(["coordinator", "party1"], tmp_path / "pki")
    provision(["coordinator", "party1"], tmp_path / "other")
    log = tmp_path / "party.log"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    env.pop("GRPC_VERBOSITY", None)
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "dpadmm", "party", "serve", "--name", "party1", "--protocol",
                                 "selftest", "--listen", "127.0.0.1:0", "--tls", str(tmp_path / "pki" / "party1"),
                                 "--out", str(tmp_path / "party1"), "--allow-seeded-noise", "--no-budget"],
                                stdout=fh, stderr=subprocess.STDOUT, env=env)
    try:
        for _ in range(300):
            text = log.read_text()
            if " serving " in text:
                break
            time.sleep(0.1)
        port = text.split("127.0.0.1:")[1].split()[0]
        # a caller that trusts the party's CA but presents a certificate from another CA: the party refuses it
        tls = TLSFiles.load(tls_dir=tmp_path / "other" / "coordinator", ca=tmp_path / "pki" / "ca.pem")
        bad = GrpcBackend({"party1": f"127.0.0.1:{port}"}, tls=tls, connect_timeout=1.0)
        with pytest.raises(PartyFailureError, match="TLS handshake"):
            bad.hello()
        bad.close()
        from dpadmm.backends.base import PartySpec

        be = GrpcBackend({"party1": f"127.0.0.1:{port}"}, tls=TLSFiles.load(tls_dir=tmp_path / "pki" / "coordinator"))
        import numpy as np

        toy = selftest.PROTOCOL
        be.start([PartySpec.of(toy, "party1", toy.setup_type(name="party1", size=3))], noise_seed=0)
        be.step({"party1": selftest.Broadcast(0, np.zeros(3))}, 0)
        be.close()
        for _ in range(50):
            text = log.read_text()
            if "run finished" in text:
                break
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
    text = log.read_text()
    assert "refused a TLS handshake" in text and "connected: coordinator" in text
    assert "run started by coordinator: protocol selftest" in text
    assert "run finished: selftest (a selftest run writes no model)" in text and "not a completed run" not in text
    assert "elapsed" not in text and "I1" not in text  # neither a heartbeat nor gRPC's own log lines
    recs = [json.loads(x) for x in (tmp_path / "party1" / "audit.jsonl").read_text().splitlines()]
    assert any(r["method"] == "(TLS handshake)" and r["status"] == "refused" for r in recs)


def test_a_second_server_on_a_served_port_is_refused_with_one_line(tmp_path):
    """gRPC binds with SO_REUSEPORT by default on Linux: a second party server on a port already served bound
    without an error and the kernel split the connections between the two (a flaky p2p test saw two nodes on one
    port answer each other's handshakes). Servers now bind without it, and the second one says why it cannot."""
    provision(["coordinator", "party1", "party2"], tmp_path / "pki")
    svc, srv, address = _serve(tmp_path, tmp_path / "pki" / "party1")
    try:
        other = PartyService(name="party2", protocol=selftest.PROTOCOL, data={}, out=tmp_path / "party2",
                             allow=("coordinator",))
        with pytest.raises(InvalidParameterError, match=f"cannot listen on {address}: the address is in use"):
            make_server(other, address, TLSFiles.load(tls_dir=tmp_path / "pki" / "party2"))
        other.close()
        last = json.loads((tmp_path / "party2" / "audit.jsonl").read_text().splitlines()[-1])
        assert (last["method"], last["status"]) == ("Listen", "error") and "address is in use" in last["detail"]
    finally:
        srv.stop(0).wait()
        svc.close()
