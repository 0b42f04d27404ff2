"""The rounds' raw mutual-TLS channel (``backends/tls_rounds.py``): the same numbers, the same identities, the same
refusals and audit lines as the gRPC path; a fallback to the gRPC stream where a party does not offer it.

Parties are in-thread gRPC servers with their round channel (``make_server(..., rounds="auto")``) on 127.0.0.1.
"""

from __future__ import annotations

import socket
import ssl
import struct

import numpy as np
import pytest

pytest.importorskip("grpc")

from dpadmm.algorithms.vertical import (coordinator as vertical_coordinator,  # noqa: E402
                                        messages as vertical_messages, party as vertical_party,
                                        protocol as vertical_protocol)
from dpadmm.algorithms.vertical.messages import Setup  # noqa: E402
from dpadmm.backends import PartySpec  # noqa: E402
from dpadmm.backends.grpc_backend import GrpcBackend  # noqa: E402
from dpadmm.backends.grpc_party import PartyService  # noqa: E402
from dpadmm.backends.grpc_stream import StreamError, frame  # noqa: E402
from dpadmm.backends.grpc_tls import TLSFiles  # noqa: E402
from dpadmm.backends.tls_rounds import MAX_FRAME, RoundClient, client_context, exchange, parse_listen  # noqa: E402
from dpadmm.exceptions import InvalidParameterError, PartyFailureError  # noqa: E402
from dpadmm.kernels.losses import get_loss  # noqa: E402
from dpadmm.kernels.regularizers import L2  # noqa: E402
from dpadmm.protocol import PartyData  # noqa: E402
from conftest import a9a_party_files, audit_records, make_pki, serve_parties  # noqa: E402

N = 300
NAMES = ("party1", "party2")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), NAMES)  # "other": another CA issuing the same names


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return a9a_party_files(tmp_path_factory.mktemp("data"), N)


def _serve(pki, data, tmp_path, rounds="auto"):
    _, _, paths = data
    services = {name: PartyService(name=name, protocol=vertical_protocol.PROTOCOL, data={"train": str(path)}, out=tmp_path / name,
                                   allow=("coordinator",)) for name, path in zip(NAMES, paths)}
    peers, stop = serve_parties(services, lambda name: TLSFiles.load(tls_dir=pki / "good" / name), rounds=rounds)
    return peers, services, stop


@pytest.fixture
def parties(pki, data, tmp_path):
    peers, services, stop = _serve(pki, data, tmp_path)
    yield peers, services
    stop()


def _backend(peers, pki, who="coordinator", ca="good", **kw):
    return GrpcBackend(peers, tls=TLSFiles.load(tls_dir=pki / ca / who), timeout=kw.pop("timeout", 20.0),
                       connect_timeout=2.0, **kw)


def _specs(blocks):
    ids = np.arange(N)
    return [PartySpec.of(vertical_protocol.PROTOCOL, name, Setup(
                name=name, D=PartyData("train", {"ids": ids, "index": m, "n_features": B.shape[1]}, (N, B.shape[1])),
                options={"lam_sum": N * 1e-3, "reg": L2(), "private": None, "bound": None, "damping": 0.5,
                         "eval_blocks": {}}), owner=name)
            for m, (name, B) in enumerate(zip(NAMES, blocks), start=1)]


def _fit(be, data, T=6):
    blocks, labels, _ = data
    be.start(_specs(blocks))
    hub = vertical_messages.CoordinatorConfig(labels=labels, loss=get_loss("logistic"), lam=1e-3, rho=0.05, party_names=NAMES)
    st, inb = vertical_coordinator.init_coordinator(hub)
    for t in range(T):
        res = be.step(inb, t)
        st, inb, _ = vertical_coordinator.coordinator_step(hub, st, {n: r[0] for n, r in res.items()}, rng=None)
    be.close()
    return st.z


def _in_process(data, T=6):
    blocks, labels, _ = data
    hub = vertical_messages.CoordinatorConfig(labels=labels, loss=get_loss("logistic"), lam=1e-3, rho=0.05, party_names=NAMES)
    st, inb = vertical_coordinator.init_coordinator(hub)
    cfgs = {n: vertical_party.make_party(n, B.astype(float), lam_sum=N * 1e-3, reg=L2(), damping=0.5) for n, B in zip(NAMES, blocks)}
    states = {n: c[1] for n, c in cfgs.items()}
    for _ in range(T):
        outs = {}
        for n in NAMES:
            states[n], outs[n], _ = vertical_party.party_step(cfgs[n][0], states[n], inb[n], rng=None)
        st, inb, _ = vertical_coordinator.coordinator_step(hub, st, outs, rng=None)
    return st.z


_audit = audit_records


def _round_port(service):
    return service.round_port


def _raw(port, pki, who="coordinator", ca="good", server_name="party1"):
    """A raw TLS client socket to a round channel as ``who`` (a certificate of CA ``ca``, trusting the good CA)."""
    mine = TLSFiles.load(tls_dir=pki / ca / who, ca=pki / "good" / "ca.pem")
    ctx = client_context(mine)
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return ctx.wrap_socket(sock, server_hostname=server_name)


def _closed_by_party(sock) -> bool:
    """The party closed the connection (EOF, a reset, or a TLS alert on the next read)."""
    try:
        sock.sendall(struct.pack(">I", 3) + b"\x04Step")
        return sock.recv(16) == b""
    except (ssl.SSLError, OSError):
        return True


# ----------------------------------------------------------------------------- the same numbers
def test_fit_over_the_round_channel_equals_in_process_and_is_audited_as_on_grpc(parties, pki, data):
    peers, services = parties
    be = _backend(peers, pki)
    info = be.hello()
    assert all(info[n]["rounds"]["port"] == services[n].round_port > 0 for n in NAMES)  # advertised: listening
    z = _fit(be, data)
    assert be.round_transport_ == {"party1": "tls", "party2": "tls"}
    z0 = _in_process(data)
    assert np.max(np.abs(z - z0)) <= 1e-12 * (1 + np.max(np.abs(z0)))
    steps = [r for r in _audit(services["party2"]) if r["method"] == "Step"]
    assert len(steps) == 6 and all(r["status"] == "ok" and r["peer"] == "coordinator" for r in steps)
    assert {"name": "outbox.share", "shape": [N], "dtype": "float64", "bytes": 8 * N} in steps[0]["reply"]
    # the same bytes over the gRPC stream: the same rounds
    be = _backend(peers, pki, round_transport="grpc")
    z1 = _fit(be, data)
    assert be.round_transport_ == {} and np.array_equal(z, z1)


def test_hello_advertises_the_round_channel_only_while_it_listens(pki, data, tmp_path):
    peers, services, stop = _serve(pki, data, tmp_path / "off", rounds=None)
    try:
        be = _backend(peers, pki)
        assert all("rounds" not in v for v in be.hello().values())
        z = _fit(be, data, T=3)  # the fallback: the gRPC stream
        assert be.round_transport_ == {} and np.array_equal(z, _in_process(data, T=3))
    finally:
        stop()
    assert all(getattr(s, "round_port", None) is None for s in services.values())
    peers, services, stop = _serve(pki, data, tmp_path / "on")
    stop()  # the channel closed: no longer advertised
    assert all(getattr(s, "round_port", None) is None and "rounds" not in s._hello({}) for s in services.values())


def test_unreachable_round_port_falls_back_to_the_grpc_stream_and_unary_stays_unary(parties, pki, data):
    peers, services = parties
    be = _backend(peers, pki)
    be.hello()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    be.hello_["party2"]["rounds"] = {"port": dead}
    with pytest.warns(RuntimeWarning, match="party 'party2'.s round channel .* unreachable"):
        z = _fit(be, data, T=3)
    assert be.round_transport_ == {"party1": "tls", "party2": "grpc"} and np.array_equal(z, _in_process(data, T=3))
    be = _backend(peers, pki, stream=False)  # unary calls per round, as before
    assert np.array_equal(_fit(be, data, T=3), z) and be.round_transport_ == {}


# ----------------------------------------------------------------------------- identities
def test_round_port_of_another_party_fails_the_name_check_never_falls_back(parties, pki, data):
    peers, services = parties
    be = _backend(peers, pki)
    be.hello()
    be.hello_["party1"]["rounds"] = {"port": services["party2"].round_port}  # party2's certificate answers
    with pytest.raises(PartyFailureError, match="party 'party1' failed: TLS handshake"):
        _fit(be, data, T=1)
    assert "party1" not in be.round_transport_


def test_client_certificate_from_another_ca_is_refused_at_the_handshake_and_audited(parties, pki):
    peers, services = parties
    port = services["party1"].round_port
    try:
        sock = _raw(port, pki, ca="other")
    except (ssl.SSLError, OSError):
        sock = None  # refused within the handshake (TLS 1.2), or at the client's first read (TLS 1.3)
    assert sock is None or _closed_by_party(sock)
    recs = _audit(services["party1"], lambda r: r["method"] == "(TLS handshake)")
    refused = [r for r in recs if r["method"] == "(TLS handshake)"]
    assert refused and refused[0]["status"] == "refused" and "round channel, caller 127.0.0.1:" in refused[0]["detail"]
    assert not any(r["method"] == "Step" for r in recs)


def test_a_plaintext_caller_on_the_tls_port_is_refused_and_audited(parties):
    peers, services = parties
    with socket.create_connection(("127.0.0.1", services["party1"].round_port), timeout=5) as plain:
        plain.sendall(struct.pack(">I", 3) + b"\x04Step" + b"\x00" * 300)
        try:
            got = plain.recv(64)
        except OSError:
            got = b""
        assert b"\x00\x00\x00" not in got[:4] or got == b""  # no reply frame; at most a TLS alert, then EOF
    recs = _audit(services["party1"], lambda r: r["method"] == "(TLS handshake)")
    assert any(r["method"] == "(TLS handshake)" and r["status"] == "refused" and r["peer"] == "" for r in recs)
    assert not any(r["method"] == "Step" for r in recs)


def test_a_name_not_on_the_allow_list_is_refused_and_audited(parties, pki):
    peers, services = parties
    sock = _raw(services["party1"].round_port, pki, who="party2")  # a valid certificate of the party's own CA
    assert _closed_by_party(sock)
    recs = _audit(services["party1"], lambda r: r["method"] == "(TLS handshake)")
    refused = [r for r in recs if r["method"] == "(TLS handshake)"]
    assert refused and refused[0]["peer"] == "party2" and "refuses caller 'party2': not on its allow list" in \
        refused[0]["detail"]
    assert not any(r["method"] == "Step" for r in recs)


# ----------------------------------------------------------------------------- frames
@pytest.mark.parametrize("header", [struct.pack(">I", MAX_FRAME + 1), struct.pack(">I", 0), b"\x00\x00"])
def test_a_frame_over_the_cap_or_a_malformed_length_is_refused_without_harm(parties, pki, data, header):
    peers, services = parties
    sock = _raw(services["party1"].round_port, pki)
    sock.sendall(header)
    if len(header) < 4:
        sock.close()  # cut short
    else:
        assert sock.recv(16) == b""  # the party closed the connection
    recs = _audit(services["party1"], lambda r: r["method"] == "(round channel)")
    bad = [r for r in recs if r["method"] == "(round channel)"]
    assert bad and bad[0]["status"] == "refused" and bad[0]["peer"] == "coordinator"
    assert ("outside 1.." in bad[0]["detail"]) if len(header) == 4 else ("cut short" in bad[0]["detail"])
    # the party still serves: a whole fit on its round channel
    be = _backend(peers, pki)
    assert np.array_equal(_fit(be, data, T=2), _in_process(data, T=2)) and be.round_transport_["party1"] == "tls"


def test_only_step_travels_on_the_round_channel(parties, pki):
    peers, services = parties
    conn = RoundClient.open("127.0.0.1", services["party1"].round_port, "party1",
                            client_context(TLSFiles.load(tls_dir=pki / "good" / "coordinator")), 5.0)
    try:
        got = exchange({"party1": conn}, {"party1": frame("Setup", b"")}, 5.0)["party1"]
        assert isinstance(got, StreamError) and got.status == "UNIMPLEMENTED"
        # a Step before Setup that is not a dpadmm message: refused, and the connection stays open
        got = exchange({"party1": conn}, {"party1": frame("Step", b"not a message")}, 5.0)["party1"]
        assert isinstance(got, StreamError) and got.status == "INVALID_ARGUMENT" and not conn.broken
    finally:
        conn.close()
    recs = _audit(services["party1"])
    assert any(r["method"] == "Session/Setup" and r["status"] == "refused" for r in recs)
    assert any(r["method"] == "Step" and r["status"] == "refused" for r in recs)


def test_rounds_listen_values():
    assert parse_listen("auto", "0.0.0.0:7001") == ("0.0.0.0", 0)
    assert parse_listen("10.0.0.5:7101", "127.0.0.1:7001") == ("10.0.0.5", 7101)
    assert parse_listen("[::1]:7101", "127.0.0.1:7001") == ("::1", 7101)
    assert parse_listen("off", "x:1") is None and parse_listen(None, "x:1") is None
    for bad in ("7101", "host:", "host:99999", "host:port"):
        with pytest.raises(InvalidParameterError, match="--rounds-listen must be"):
            parse_listen(bad, "127.0.0.1:7001")


def test_cli_usage_error_for_rounds_listen(tmp_path, capsys):
    from dpadmm.cli import main

    code = main(["party", "serve", "--protocol", "selftest", "--name", "party1", "--out", str(tmp_path / "o"),
                 "--insecure", "--no-budget", "--rounds-listen", "nowhere"])
    err = capsys.readouterr().err
    assert code == 2 and "--rounds-listen must be auto, off or HOST:PORT" in err and len(err.strip().splitlines()) == 1


def test_rounds_port_in_use_is_one_clear_error(tmp_path, capsys):
    from dpadmm.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["party", "serve", "--protocol", "selftest", "--name", "party1", "--out", str(tmp_path / "o"),
                     "--insecure", "--no-budget", "--listen", "127.0.0.1:0", "--rounds-listen", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot listen for rounds on 127.0.0.1:{port}" in err and "--rounds-listen" in err


def test_insecure_round_channel_is_plain_tcp_with_the_same_numbers(data, tmp_path):
    _, _, paths = data
    services = {name: PartyService(name=name, protocol=vertical_protocol.PROTOCOL, data={"train": str(path)}, out=tmp_path / name,
                                   secure=False) for name, path in zip(NAMES, paths)}
    peers, stop = serve_parties(services, None, rounds="auto")
    try:
        be = GrpcBackend(peers, insecure=True, timeout=20.0, connect_timeout=2.0)
        z = _fit(be, data, T=3)
        assert be.round_transport_ == {"party1": "tls", "party2": "tls"}  # the round channel (plain TCP here)
        assert np.array_equal(z, _in_process(data, T=3))
    finally:
        stop()
