"""The round channel's TLS contexts, frame header and addresses (:mod:`tls_rounds`, both sides).

A context is TLS ≥ 1.2 built from the deployment's certificate, key and CA (no system roots), a peer certificate
required and verified; the party's side refuses renegotiation, the coordinator's checks the party's name.
"""

from __future__ import annotations

import os
import shutil
import ssl
import struct
import tempfile

from ..exceptions import InvalidParameterError
from .grpc_wire import MAX_MESSAGE

HEADER = struct.Struct(">I")
MAX_FRAME = MAX_MESSAGE  # the gRPC path's message cap
HANDSHAKE_TIMEOUT = 10.0  # seconds a caller has to complete TLS (then the socket is closed)
MAX_CONNECTIONS = 64  # open connections at once (a party serves one coordinator)
AUDIT_METHOD = "(TLS handshake)"  # the method of the gRPC path's refused-handshake records
CHANNEL = "(round channel)"  # the method of a refused frame length



def _load_chain(ctx: ssl.SSLContext, tls) -> None:
    """Load the PEM certificate + key (held as bytes by ``TLSFiles``) into ``ctx``: ``ssl`` reads them only
    from files, so they go through a private (0700) temporary directory, removed at once."""
    d = tempfile.mkdtemp(prefix="dpadmm-tls-")
    try:
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        for path, data in ((cert, tls.cert), (key, tls.key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(cert, key)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _context(tls, side) -> ssl.SSLContext:
    ctx = ssl.SSLContext(side)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # 1.3 is negotiated whenever both sides have it
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=tls.ca.decode("ascii"))  # the deployment's CA only (no system roots)
    _load_chain(ctx, tls)
    return ctx


def server_context(tls) -> ssl.SSLContext:
    """The party's side: its certificate, a client certificate of its CA required; no renegotiation (a TLS 1.2
    caller cannot re-handshake, e.g. with another certificate, after its name was checked — as gRPC's servers)."""
    ctx = _context(tls, ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    return ctx


def client_context(tls) -> ssl.SSLContext:
    """The coordinator's side: its certificate; the party's verified against the CA and (``server_hostname``)
    its name checked — ``PROTOCOL_TLS_CLIENT`` checks the host name against the certificate's SAN."""
    ctx = _context(tls, ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = True
    return ctx


def common_name(ssl_sock) -> str:
    """The verified common name of the peer's certificate ('' if none) — as ``grpc_party.peer_name``."""
    cert = ssl_sock.getpeercert() if ssl_sock is not None else None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return ""


def parse_listen(value: str | None, listen: str) -> tuple[str, int] | None:
    """``--rounds-listen``: ``auto`` (the ``--listen`` host, a free port), ``off`` / None, or ``HOST:PORT``."""
    if value is None or value.strip().lower() == "off":
        return None
    value = value.strip()
    if value.lower() == "auto":
        return _host(listen.rsplit(":", 1)[0]), 0
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidParameterError(f"--rounds-listen must be auto, off or HOST:PORT (e.g. 0.0.0.0:7101), got {value!r}.")
    return _host(host), int(port)


def _host(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host
