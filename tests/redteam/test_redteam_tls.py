"""Red team of the rounds' raw mutual-TLS channel (``backends/tls_rounds.py``), docs/redteam-tls-2026-11-24.md.

Real sockets against a real :class:`RoundServer` (and, where the two channels meet, the party's gRPC server):
identities (other CAs, self-signed, crafted certificates of the deployment's CA, a party posing as the coordinator),
TLS versions, framing (lengths, cut-short frames, pipelining, half-close, declared-but-absent bytes), methods, the
round order across both channels, the connection cap, the channel's lifecycle. Tests named ``test_rt_f*`` are the
findings (each failed on the code before its fix); the others are attacks that held.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import threading
import time
import tracemalloc
import warnings

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.backends import grpc_codec as codec  # noqa: E402
from dpadmm.backends import selftest  # noqa: E402
from dpadmm.backends import refusal_log, tls_rounds  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService, make_server  # noqa: E402
from dpadmm.backends.grpc_stream import frame  # noqa: E402
from dpadmm.backends.grpc_tls import TLSFiles, provision  # noqa: E402
from dpadmm.backends.tls_rounds import MAX_FRAME, RoundClient, RoundServer, client_context  # noqa: E402
from dpadmm.exceptions import PartyFailureError, ProtocolError  # noqa: E402
from conftest import audit_records  # noqa: E402

SIZE = 4


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    provision(["coordinator", "p1", "p2"], root / "good")
    provision(["coordinator", "p1"], root / "other")  # another CA issuing the same names
    return root


def _crafted(pki, tmp_path, names, *, san=None, issuer="ca", self_signed=False, client_auth=True, expired=False):
    """A certificate with the common names ``names`` (in order; [] for none) and SAN ``san``, signed by the good
    CA (``issuer="ca"``), by party p2's *leaf* key (``issuer="p2"``: a party minting itself a certificate) or by
    itself; returns TLSFiles trusting the good CA (with the chain for a leaf-issued certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    good = pki / "good"
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, n) for n in names])
    if self_signed:
        signer, issuer_name = key, subject
    elif issuer == "ca":
        signer = serialization.load_pem_private_key((good / "ca.key").read_bytes(), None)
        issuer_name = x509.load_pem_x509_certificate((good / "ca.pem").read_bytes()).subject
    else:
        signer = serialization.load_pem_private_key((good / issuer / "key.pem").read_bytes(), None)
        issuer_name = x509.load_pem_x509_certificate((good / issuer / "cert.pem").read_bytes()).subject
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=3 if expired else 0)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client_auth else [])
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in san]), critical=False)
    pem = b.sign(signer, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    if issuer != "ca" and not self_signed:
        pem += (good / issuer / "cert.pem").read_bytes()
    keypem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    return TLSFiles(pem, keypem, (good / "ca.pem").read_bytes(), names[0] if names else "")


def _service(tmp_path, name="p1", **kw):
    kw.setdefault("allow", ("coordinator",))
    return PartyService(name=name, protocol=selftest.PROTOCOL, data={}, out=tmp_path / name, **kw)


@pytest.fixture
def party(pki, tmp_path):
    """Party p1: its gRPC server and its round channel (mutual TLS, allow list ["coordinator"])."""
    svc = _service(tmp_path)
    srv, port = make_server(svc, "127.0.0.1:0", TLSFiles.load(tls_dir=pki / "good" / "p1"), rounds="auto")
    srv.start()
    yield svc, f"127.0.0.1:{port}", srv
    srv.stop(0).wait()
    svc.close()


_audit = audit_records


def _tls(port, tls, server_name="p1", **ctx_kw):
    ctx = client_context(tls)
    for k, v in ctx_kw.items():
        setattr(ctx, k, v)
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname=server_name)


def _coordinator(pki):
    return TLSFiles.load(tls_dir=pki / "good" / "coordinator")


def _refused_at_handshake(port, tls, **kw) -> bool:
    """The party refuses this client: within the handshake, or (TLS 1.3: the client's handshake ends first) by
    closing the connection instead of answering a frame."""
    try:
        sock = _tls(port, tls, **kw)
    except (ssl.SSLError, OSError):
        return True
    try:
        sock.sendall(struct.pack(">I", 5) + b"\x04Step")
        return sock.recv(16) == b""
    except (ssl.SSLError, OSError):
        return True
    finally:
        sock.close()


def _ask(sock, method, payload=b""):
    """One frame on a raw round-channel socket; the reply frame (b"" if the party closed)."""
    data = frame(method, payload)
    sock.sendall(struct.pack(">I", len(data)) + data)
    return _read_reply(sock)


def _read_reply(sock):
    head = b""
    while len(head) < 4:
        got = sock.recv(4 - len(head))
        if not got:
            return b""
        head += got
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        got = sock.recv(n - len(body))
        if not got:
            break
        body += got
    return body


def _step_payload(svc, round_):
    return codec.encode({"round": round_, "inbox": selftest.Broadcast(round_ + 1, np.zeros(SIZE))},
                        allowed=svc.allowed_types)


def _started(pki, addr, **kw):
    _, specs = selftest.toy_specs(1, SIZE)
    be = GrpcBackend({"p1": addr}, tls=_coordinator(pki), timeout=10.0, connect_timeout=5.0, **kw)
    be.hello()
    be.start(specs)
    return be


def _conn_threads():
    return [t for t in threading.enumerate() if t.name == "dpadmm-rounds-conn" and t.is_alive()]


# =============================================================================== findings (fixed here)
def test_rt_f1_stopping_the_party_closes_its_open_tls_connections(party, pki, tmp_path):
    """F1: ``RoundServer.close`` shut down ``conn`` — the raw socket, which ``wrap_socket`` had detached (fd −1) — so an
    open TLS connection survived the party's stop and the next frame on it was still served by the service."""
    svc, addr, srv = party
    sock = _tls(svc.round_port, _coordinator(pki))
    assert _ask(sock, "Step", b"x")[:1] == b"\x01"  # connected and served (refused: not a message)
    before = len(_audit(svc))
    srv.stop(0).wait()  # the party stops (the fixture's stop is then a no-op)
    assert svc.round_port is None
    got = _ask(sock, "Step", _step_payload(svc, 0))
    assert got == b""  # EOF: the connection was closed, nothing served after the stop
    sock.close()
    time.sleep(0.2)
    assert len(_audit(svc)) == before  # no line: no frame reached the service after its stop


def test_rt_f2_a_declared_length_is_not_allocated_before_the_bytes_arrive(party, pki):
    """F2: ``_recv_exactly`` allocated ``bytearray(n)`` for the declared length ``n`` (≤ 1 GiB) before reading: an
    allowed caller holding 64 connections, each declaring 1 GiB and sending nothing, cost the party 64 GiB."""
    svc, addr, srv = party
    declared = 64 << 20  # 64 MiB declared, 100 bytes sent, then the caller goes away
    sock = _tls(svc.round_port, _coordinator(pki))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        sock.sendall(struct.pack(">I", declared) + b"\x04Step" + b"\x00" * 95)
        sock.close()
        recs = _audit(svc, lambda r: "cut short" in r.get("detail", ""))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert any(f"(100 of {declared} bytes)" in r.get("detail", "") for r in recs)
    assert peak < declared // 8, f"the party allocated {peak} bytes for 100 received"


def test_large_frames_arrive_whole_in_pieces(party, pki):
    """The chunked receive of F2's fix: a frame of several MiB (pieces of RECV_CHUNK) is served as one frame."""
    svc, addr, srv = party
    be = _started(pki, addr)
    try:
        with _tls(svc.round_port, _coordinator(pki)) as sock:
            body = b"\xff" * ((3 << 20) + 17)  # not a message
            got = _ask(sock, "Step", body)
            assert got[:1] == b"\x01" and b"INVALID_ARGUMENT" in got
            got = _ask(sock, "Step", _step_payload(svc, 0))  # and the connection is still in step
            assert got[:1] == b"\x00"
    finally:
        be.close()
    steps = [r for r in _audit(svc) if r["method"] == "Step"]
    assert [r["status"] for r in steps] == ["refused", "ok"] and steps[0]["request_bytes"] > 3 << 20


def test_rt_f3_server_context_refuses_renegotiation(pki):
    """F3 (hardening): the server context did not forbid TLS 1.2 renegotiation (OpenSSL 3 refuses a client's by
    default, 1.1.1 does not) although the caller's name is read once, after the first handshake."""
    ctx = tls_rounds.server_context(TLSFiles.load(tls_dir=pki / "good" / "p1"))
    assert ctx.options & ssl.OP_NO_RENEGOTIATION
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2 and ctx.verify_mode == ssl.CERT_REQUIRED


def test_rt_f4_silent_callers_cannot_lock_the_coordinator_out(party, pki, monkeypatch):
    """F4: MAX_CONNECTIONS callers that connect and never handshake (no certificate needed) held every slot for up to
    HANDSHAKE_TIMEOUT each, and the coordinator's connection was closed unaudited — its run failed ("TLS handshake
    on the round channel failed", never a fallback). Now the oldest unfinished handshake makes room (audited)."""
    svc, addr, srv = party
    monkeypatch.setattr(tls_rounds, "MAX_CONNECTIONS", 4)
    silent = [socket.create_connection(("127.0.0.1", svc.round_port), timeout=10) for _ in range(4)]
    try:
        deadline = time.monotonic() + 10
        while len(srv.rounds._open) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        be = _started(pki, addr)
        try:
            out = be.step({"p1": selftest.Broadcast(1, np.zeros(SIZE))}, 0)
            assert be.round_transport_ == {"p1": "tls"} and np.array_equal(out["p1"][0].x, np.full(SIZE, 0.5))
        finally:
            be.close()
    finally:
        for s in silent:
            s.close()
    recs = _audit(svc, lambda r: "still in its handshake" in r.get("detail", ""))
    assert any(r["method"] == "(TLS handshake)" and "still in its handshake" in r.get("detail", "") for r in recs)


def test_rt_f5_a_caller_refused_at_the_connection_cap_is_audited(party, pki, monkeypatch):
    """F5: a connection closed at MAX_CONNECTIONS left no audit line (every other refusal does)."""
    svc, addr, srv = party
    monkeypatch.setattr(tls_rounds, "MAX_CONNECTIONS", 1)
    with _tls(svc.round_port, _coordinator(pki)) as held:  # handshake done: not evictable
        assert _ask(held, "Step", b"x")[:1] == b"\x01"
        with socket.create_connection(("127.0.0.1", svc.round_port), timeout=10) as extra:
            assert extra.recv(16) == b""
        recs = _audit(svc, lambda r: "connections open" in r.get("detail", ""))
    assert any(r["method"] == "(round channel)" and r["status"] == "refused" and "1 connections open" in r["detail"]
               for r in recs)


# =============================================================================== identities that held
@pytest.mark.parametrize("who", ["other-ca", "self-signed", "no-cn", "two-cns-first-not-allowed", "p2-minted",
                                 "san-coordinator-cn-p2", "server-auth-only", "expired"])
def test_identities_the_party_refuses_and_audits(party, pki, tmp_path, who):
    svc, addr, srv = party
    tls = {
        "other-ca": lambda: TLSFiles.load(tls_dir=pki / "other" / "coordinator", ca=pki / "good" / "ca.pem"),
        "self-signed": lambda: _crafted(pki, tmp_path, ["coordinator"], san=["coordinator"], self_signed=True),
        "no-cn": lambda: _crafted(pki, tmp_path, [], san=["coordinator"]),
        "two-cns-first-not-allowed": lambda: _crafted(pki, tmp_path, ["p2", "coordinator"]),
        "p2-minted": lambda: _crafted(pki, tmp_path, ["coordinator"], issuer="p2"),  # a leaf (CA:FALSE) as issuer
        "san-coordinator-cn-p2": lambda: _crafted(pki, tmp_path, ["p2"], san=["coordinator"]),
        "server-auth-only": lambda: _crafted(pki, tmp_path, ["coordinator"], san=["coordinator"], client_auth=False),
        "expired": lambda: _crafted(pki, tmp_path, ["coordinator"], san=["coordinator"], expired=True),
    }[who]()
    assert _refused_at_handshake(svc.round_port, tls)
    recs = _audit(svc, lambda r: r["method"] == "(TLS handshake)")
    assert any(r["method"] == "(TLS handshake)" and r["status"] == "refused" for r in recs)
    assert not any(r["method"] == "Step" for r in recs)
    # and the gRPC path agrees: this identity is refused there too
    be = GrpcBackend({"p1": addr}, tls=tls, timeout=5.0, connect_timeout=3.0)
    with pytest.raises((PartyFailureError, ProtocolError), match="refuses caller|handshake|UNAVAILABLE|failed"):
        be.hello()
    be.close()


def test_a_crafted_certificate_the_grpc_path_accepts_is_accepted_alike(party, pki, tmp_path):
    """Both channels read the *first* common name (gRPC: ``x509_common_name``; here ``getpeercert``): a CA-issued
    certificate with CNs ["coordinator", "p2"] is the coordinator on both — never one on one channel, another on the
    other."""
    svc, addr, srv = party
    tls = _crafted(pki, tmp_path, ["coordinator", "p2"])
    be = GrpcBackend({"p1": addr}, tls=tls, timeout=5.0, connect_timeout=3.0)
    assert be.hello()["p1"]["name"] == "p1"
    be.close()
    with _tls(svc.round_port, tls) as sock:
        assert _ask(sock, "Step", b"x")[:1] == b"\x01"
    assert [r["peer"] for r in _audit(svc) if r["method"] == "Step"] == ["coordinator"]


def test_no_client_certificate_is_refused(party, pki):
    svc, addr, srv = party
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=(pki / "good" / "ca.pem").read_text())
    try:
        sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", svc.round_port), timeout=10),
                               server_hostname="p1")
        sock.sendall(struct.pack(">I", 5) + b"\x04Step")
        assert sock.recv(16) == b""
    except (ssl.SSLError, OSError):
        pass
    assert any(r["method"] == "(TLS handshake)" for r in _audit(svc, lambda r: r["method"] == "(TLS handshake)"))


@pytest.mark.parametrize("version", ["TLSv1", "TLSv1_1"])
def test_a_tls_downgrade_is_refused(party, pki, version):
    svc, addr, srv = party
    v = getattr(ssl.TLSVersion, version)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0/1.1: deprecated — the point of the test
            ok = _refused_at_handshake(svc.round_port, _coordinator(pki), minimum_version=v, maximum_version=v)
    except ssl.SSLError:  # this OpenSSL cannot even offer it: no downgrade possible either
        ok = True
    assert ok
    assert any(r["method"] == "(TLS handshake)" for r in _audit(svc, lambda r: r["method"] == "(TLS handshake)"))


def test_the_coordinator_refuses_a_party_answering_with_another_valid_name(pki, tmp_path):
    """A MITM party: p2's valid certificate (same CA) on the port the coordinator dials for p1 — the client side checks
    the name (SAN), so the connection fails; never a Step to the wrong party."""
    svc = _service(tmp_path, "p2")
    rogue = RoundServer(svc, TLSFiles.load(tls_dir=pki / "good" / "p2"))
    port = rogue.start("127.0.0.1", 0)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            RoundClient.open("127.0.0.1", port, "p1", client_context(_coordinator(pki)), 5.0)
        # a certificate of the right CA whose CN is p1 but SAN is not: the SAN decides (no CN fallback)
        rogue2 = RoundServer(svc, _crafted(pki, tmp_path, ["p1"], san=["p2"]))
        port2 = rogue2.start("127.0.0.1", 0)
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                RoundClient.open("127.0.0.1", port2, "p1", client_context(_coordinator(pki)), 5.0)
        finally:
            rogue2.close()
    finally:
        rogue.close()
        svc.close()


def test_a_secure_party_behind_a_plaintext_round_channel_still_serves_no_one(pki, tmp_path):
    """Misconfiguration: a secure service (allow list) given a RoundServer without TLS — every frame arrives with
    peer '' and PartyService.handle refuses it (its own allow-list check), audited."""
    svc = _service(tmp_path)
    rs = RoundServer(svc, None)
    port = rs.start("127.0.0.1", 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            got = _ask(sock, "Step", _step_payload(svc, 0))
            assert got[:1] == b"\x01" and b"refuses caller ''" in got
    finally:
        rs.close()
        svc.close()
    assert any(r["method"] == "Step" and r["status"] == "refused" for r in _audit(svc))


# =============================================================================== frames and methods that held
@pytest.mark.parametrize("n", [0, MAX_FRAME + 1, 2 ** 32 - 1])
def test_lengths_outside_the_cap_close_the_connection_audited(party, pki, n):
    svc, addr, srv = party
    with _tls(svc.round_port, _coordinator(pki)) as sock:
        sock.sendall(struct.pack(">I", n))
        assert sock.recv(16) == b""
    recs = _audit(svc, lambda r: r["method"] == "(round channel)")
    assert any(f"frame length {n} outside" in r.get("detail", "") for r in recs)


@pytest.mark.parametrize("method", ["Setup", "Finish", "Checkpoint", "Restore", "Request", "Hello", "Diagnose",
                                    "Session", "step", "", "Ünïcode", "X" * 255])
def test_only_step_is_served_every_other_method_refused_and_audited(party, pki, method):
    svc, addr, srv = party
    with _tls(svc.round_port, _coordinator(pki)) as sock:
        m = method.encode("utf-8")
        data = bytes([len(m)]) + m + b"payload"
        sock.sendall(struct.pack(">I", len(data)) + data)
        got = _read_reply(sock)
        assert got[:1] == b"\x01" and b"UNIMPLEMENTED" in got
        assert _ask(sock, "Step", b"x")[:1] == b"\x01"  # still in step afterwards
    recs = _audit(svc)
    assert any(r["method"].startswith("Session/") and r["status"] == "refused" for r in recs)
    assert svc.cfg is None and not any(r["method"] in ("Setup", "Finish", "Checkpoint", "Request") for r in recs)


def test_a_step_before_setup_is_refused(party, pki):
    svc, addr, srv = party
    with _tls(svc.round_port, _coordinator(pki)) as sock:
        got = _ask(sock, "Step", _step_payload(svc, 0))
    assert got[:1] == b"\x01" and b"FAILED_PRECONDITION" in got
    assert any(r["method"] == "Step" and r["status"] == "refused" and "Setup first" in r["detail"]
               for r in _audit(svc))


def test_pipelined_frames_and_a_half_closed_socket(party, pki):
    """50 frames in one write are answered in order; a caller that half-closes (no more frames) still gets its
    replies, then EOF."""
    svc, addr, srv = party
    be = _started(pki, addr)
    try:
        with _tls(svc.round_port, _coordinator(pki)) as sock:
            frames = [frame("Step", _step_payload(svc, t)) for t in range(3)] + [frame("Step", b"x")] * 47
            sock.sendall(b"".join(struct.pack(">I", len(f)) + f for f in frames))
            replies = [_read_reply(sock) for _ in frames]
            assert [r[:1] for r in replies] == [b"\x00"] * 3 + [b"\x01"] * 47
            sock.sendall(struct.pack(">I", len(frames[-1])) + frames[-1])
            socket.socket.shutdown(sock, socket.SHUT_WR)  # TCP half-close after the last frame
            assert _read_reply(sock)[:1] == b"\x01"
            try:
                assert sock.recv(16) == b""  # then the party closes (EOF, or an alert for the cut TLS stream)
            except (ssl.SSLError, OSError):
                pass
        assert svc.rounds == 3
    finally:
        be.close()


def test_cut_short_frames_are_refused_audited_and_the_party_keeps_serving(party, pki):
    svc, addr, srv = party
    for partial in (b"\x00\x00", struct.pack(">I", 100) + b"\x04Step"):
        with _tls(svc.round_port, _coordinator(pki)) as sock:
            sock.sendall(partial)
        _audit(svc, lambda r: f"({len(partial) if len(partial) < 4 else len(partial) - 4} of" in r.get("detail", ""))
    details = [r.get("detail", "") for r in _audit(svc) if r["method"] == "(round channel)"]
    assert any("(2 of 4 bytes)" in d for d in details) and any("(5 of 100 bytes)" in d for d in details)
    with _tls(svc.round_port, _coordinator(pki)) as sock:
        assert _ask(sock, "Step", b"x")[:1] == b"\x01"


# =============================================================================== both channels, one round order
def test_a_round_is_served_once_across_both_channels_and_concurrent_connections(party, pki):
    """The round order and the ledger live in PartyService.handle under its lock: a round served on the TLS channel is
    refused on the gRPC stream (and vice versa); the same round sent at once on several connections of both
    channels is served exactly once."""
    svc, addr, srv = party
    be = _started(pki, addr)  # Setup over gRPC; rounds over the TLS channel
    grpc_be = GrpcBackend({"p1": addr}, tls=_coordinator(pki), timeout=10.0, connect_timeout=5.0,
                          round_transport="grpc")
    grpc_be.hello()
    grpc_be._specs, grpc_be._allowed = be._specs, be._allowed  # the same run, its rounds on the gRPC stream
    inbox = {"p1": selftest.Broadcast(1, np.zeros(SIZE))}
    try:
        be.step(inbox, 0)
        with pytest.raises(ProtocolError, match="rounds are served once"):
            grpc_be.step(inbox, 0)  # round 0 again, on the other channel
        grpc_be.step(inbox, 1)
        with pytest.raises(ProtocolError, match="rounds are served once"):
            be.step(inbox, 1)
        # round 2 at once: 4 raw TLS connections and the gRPC stream
        socks = [_tls(svc.round_port, _coordinator(pki)) for _ in range(4)]
        results, go = [], threading.Barrier(5)

        def tls_one(s):
            go.wait()
            results.append(_ask(s, "Step", _step_payload(svc, 2))[:1] == b"\x00")

        def grpc_one():
            go.wait()
            try:
                grpc_be.step(inbox, 2)
                results.append(True)
            except (PartyFailureError, ProtocolError):
                results.append(False)

        threads = [threading.Thread(target=tls_one, args=(s,)) for s in socks] + [threading.Thread(target=grpc_one)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for s in socks:
            s.close()
        assert sorted(results) == [False] * 4 + [True] and svc.rounds == 3
    finally:
        be.close()
        grpc_be.close()
    steps = [r for r in _audit(svc) if r["method"] == "Step"]
    assert sum(r["status"] == "ok" for r in steps) == 3


# =============================================================================== audit content
def test_audit_lines_of_refusals_carry_no_values(party, pki):
    """A refused frame's audit line names the method, sizes and shapes — never the numbers the caller sent."""
    svc, addr, srv = party
    be = _started(pki, addr)
    try:
        secret = 123456.789012
        payload = codec.encode({"round": 7, "inbox": selftest.Broadcast(8, np.full(SIZE, secret))},
                               allowed=svc.allowed_types)
        with _tls(svc.round_port, _coordinator(pki)) as sock:
            assert _ask(sock, "Step", payload)[:1] == b"\x01"  # round 7 is out of order: refused
            assert _ask(sock, "Setup", payload)[:1] == b"\x01"
    finally:
        be.close()
    text = svc.audit_path.read_text()
    assert "123456" not in text and "refused round index 7" in text


# =============================================================================== lifecycle
def test_rt_f1_close_with_threads_blocked_in_reads_leaves_no_thread(pki, tmp_path):
    svc = _service(tmp_path)
    rs = RoundServer(svc, TLSFiles.load(tls_dir=pki / "good" / "p1"))
    port = rs.start("127.0.0.1", 0)
    before = len(_conn_threads())
    socks = [_tls(port, _coordinator(pki)) for _ in range(3)]
    socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))  # in its handshake
    for s in socks[:3]:
        assert _ask(s, "Step", b"x")[:1] == b"\x01"
    deadline = time.monotonic() + 10
    while len(_conn_threads()) < before + 4 and time.monotonic() < deadline:  # the silent one: accepted by now
        time.sleep(0.01)
    assert len(_conn_threads()) >= before + 4
    rs.close()
    for t in [t for t in threading.enumerate() if t.name == "dpadmm-rounds-conn"]:
        t.join(10)
    assert len(_conn_threads()) <= before
    for s in socks:
        s.close()
    svc.close()
    assert svc.round_port is None and "rounds" not in svc._hello({})


@pytest.mark.slow
def test_the_cli_party_exits_with_a_round_connection_open(pki, tmp_path):
    """`dpadmm party serve --once`: the coordinator's Finish ends the process even while a round connection (and a
    silent caller) are still open; no process is left behind."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    out = tmp_path / "party"
    proc = subprocess.Popen([sys.executable, "-m", "dpadmm", "party", "serve", "--protocol", "selftest", "--name", "p1",
                             "--tls", str(pki / "good" / "p1"), "--listen", "127.0.0.1:0", "--out", str(out),
                             "--no-budget", "--once"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        line = proc.stdout.readline()
        assert "serving selftest on 127.0.0.1:" in line, line + proc.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split()[0].rstrip(";"))
        rline = proc.stdout.readline()
        assert "round channel" in rline
        rport = int(rline.rsplit(":", 1)[1])
        held = _tls(rport, _coordinator(pki))
        silent = socket.create_connection(("127.0.0.1", rport), timeout=10)
        be = _started(pki, f"127.0.0.1:{port}")
        be.step({"p1": selftest.Broadcast(1, np.zeros(SIZE))}, 0)
        be.close()  # Finish
        assert proc.wait(30) == 0
        held.close()
        silent.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# =============================================================================== audit under load
def _plaintext_knocks(port, n):
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"\x00\x00\x00\x05\x04Step\x00")
            try:
                s.recv(64)
            except OSError:
                pass


def test_concurrent_refusals_leave_whole_json_lines(party, pki, monkeypatch):
    """Refusals written at once by several connection threads and the gRPC path: every audit line stays one whole JSON
    record (PartyService.audit takes no lock of its own). Every refusal is written here (no summary: interval 0)."""
    monkeypatch.setattr(refusal_log, "INTERVAL", 0.0)
    svc, addr, srv = party
    threads = [threading.Thread(target=_plaintext_knocks, args=(svc.round_port, 15)) for _ in range(4)]
    be = GrpcBackend({"p1": addr}, tls=_coordinator(pki), timeout=5.0, connect_timeout=3.0)
    be.hello()
    for t in threads:
        t.start()
    with _tls(svc.round_port, _coordinator(pki)) as sock:
        for _ in range(30):
            assert _ask(sock, "Step", b"x")[:1] == b"\x01"
    for t in threads:
        t.join(60)
    be.close()
    recs = _audit(svc)
    deadline = time.monotonic() + 10
    while sum(r["method"] == "(TLS handshake)" for r in recs) < 60 and time.monotonic() < deadline:
        time.sleep(0.05)
        recs = _audit(svc)  # each line parses as JSON (json.loads raises otherwise)
    assert sum(r["method"] == "(TLS handshake)" for r in recs) == 60
    assert sum(r["method"] == "Step" for r in recs) == 30


def test_rt_f6_an_unauthenticated_flood_does_not_grow_the_audit_log_without_bound(party):
    svc, addr, srv = party
    size0 = svc.audit_path.stat().st_size
    _plaintext_knocks(svc.round_port, 100)
    time.sleep(0.5)
    # the safe behaviour: repeated refusals from one address are summarised (e.g. one line per address and minute
    # with a count), so 100 knocks cost far less than 100 lines
    assert svc.audit_path.stat().st_size - size0 < 50 * 300


def test_rt_f6_summarised_refusals_are_counted_and_written_when_the_interval_ends(party):
    """Nothing is lost: the knocks held back are counted in the next line of that source and kind (after the interval),
    whose count plus the lines equals the knocks."""
    svc, addr, srv = party
    clock = [1000.0]
    lines0 = len(_audit(svc))
    srv.rounds._limit.clock = lambda: clock[0]  # the round channel's limiter reads this clock
    _plaintext_knocks(svc.round_port, 10)
    time.sleep(0.3)
    clock[0] += refusal_log.INTERVAL + 1
    _plaintext_knocks(svc.round_port, 1)
    deadline = time.monotonic() + 10
    while len(_audit(svc)) < lines0 + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    new = _audit(svc)[lines0:]
    assert len(new) == 2, new
    assert "and 9 earlier refusal(s) of this kind from 127.0.0.1" in new[1]["detail"], new[1]


# =============================================================================== handle under two channels
class _NoteBudget:
    """A stand-in for the party's ledger after Setup: every charge returns its own note (the real ``charge`` returns
    the budget decision written on the Step's audit line)."""

    def charge(self, events, *, private_step, round_):
        return {"allowed": True, "round": round_}

    def close_run(self):
        pass


def test_rt_f7_a_concurrent_call_cannot_change_a_steps_budget_line(party, pki, monkeypatch):
    """F7: with the round channel, ``handle`` runs on several threads at once (a thread per TLS connection beside gRPC's
    loop), but the Step's budget note crosses from ``_step`` (under the lock) to its audit line through the shared
    attribute ``self._budget_note``, which every call resets on entry without the lock: a call arriving between the
    lock's release and the audit line makes the Step's line carry no budget decision (or another call's). The ledger
    itself is right (charged under the lock); its audit trail is not."""
    svc, addr, srv = party
    be = _started(pki, addr)
    svc.budget = _NoteBudget()  # after Setup: a budgeted party's notes
    real = codec.encode
    armed = [True]

    def encode(obj, *a, **kw):  # the instant after the Step left the lock: another channel's call comes in
        on_round_channel = threading.current_thread().name == "dpadmm-rounds-conn"
        if armed and on_round_channel and isinstance(obj, dict) and "outbox" in obj:
            armed.clear()
            t = threading.Thread(target=lambda: pytest.raises(Exception, svc.handle, "Step", b"x", "coordinator"))
            t.start()
            t.join(10)
        return real(obj, *a, **kw)

    monkeypatch.setattr(codec, "encode", encode)
    try:
        with _tls(svc.round_port, _coordinator(pki)) as sock:
            assert _ask(sock, "Step", _step_payload(svc, 0))[:1] == b"\x00"
    finally:
        monkeypatch.setattr(codec, "encode", real)
        svc.budget = None
        be.close()
    ok = [r for r in _audit(svc) if r["method"] == "Step" and r["status"] == "ok"]
    assert len(ok) == 1 and ok[0].get("budget") == {"allowed": True, "round": 0}


def test_a_consensus_nodes_neighbour_is_refused_on_the_round_channel_and_exchange_is_not_served(pki, tmp_path):
    """A peer-to-peer node (``--neighbour``) accepts Exchange from its neighbours on gRPC; its round channel is the
    coordinator's only: the neighbour p2 (a valid certificate of the CA) is refused at the handshake, and an Exchange
    frame from the coordinator is refused (only Step travels there)."""
    from dpadmm.algorithms.consensus import protocol as gc
    from dpadmm.backends.grpc_p2p import NodeService

    tls = TLSFiles.load(tls_dir=pki / "good" / "p1")
    svc = NodeService(name="p1", protocol=gc.PROTOCOL, data={}, out=tmp_path / "p1", allow=("coordinator",),
                      accept_coordinator_data=True, neighbours={"p2": "127.0.0.1:1"}, tls=tls)
    rs = RoundServer(svc, tls)
    port = rs.start("127.0.0.1", 0)
    try:
        assert _refused_at_handshake(port, TLSFiles.load(tls_dir=pki / "good" / "p2"))
        with _tls(port, _coordinator(pki)) as sock:
            msg = codec.encode({"from": "p2", "round": 0, "f": np.zeros(2)}, allowed=codec.allow_list())
            got = _ask(sock, "Exchange", msg)
            assert got[:1] == b"\x01" and b"UNIMPLEMENTED" in got
    finally:
        rs.close()
        svc.close()
    recs = _audit(svc)
    assert any(r["method"] == "(TLS handshake)" and r["peer"] == "p2" for r in recs)
    assert any(r["method"] == "Session/Exchange" and r["status"] == "refused" for r in recs)
    assert not any(r["method"] == "Exchange" for r in recs) and not svc._inbox
