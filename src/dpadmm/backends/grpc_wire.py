"""The gRPC wire's constants, at the bottom of the gRPC modules (each imports them from here, none imports another
for them): the service name, its methods, the wire version, the message cap and the stream window."""

from __future__ import annotations

from .._limits import DEFAULT_MAX_MESSAGE, MAX_MESSAGE  # noqa: F401 (the message caps: one home, read by the CLI)

SERVICE = "dpadmm.Party"
METHODS = ("Hello", "Setup", "Step", "Request", "Diagnose", "Checkpoint", "Restore", "Finish")  # PartyRuntime.methods
WIRE_VERSION = 1
STREAM_WINDOW = 16 << 20
# both sides: message size caps; a 16 MiB initial HTTP/2 stream window (``lookahead_bytes``), so that a round's
# large message (vertical N-vectors, 260-520 kB) on the persistent stream is not held back by WINDOW_UPDATE round
# trips from the default 64 KiB window (measured: unary calls were faster than such a stream; with this window the
# stream is faster than unary calls)
CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE),
                   ("grpc.http2.lookahead_bytes", STREAM_WINDOW)]
#: a party's server: the channel options, and no SO_REUSEPORT (gRPC's default on Linux). With it a second server
#: bound to a port already served binds without an error and the kernel splits the connections between the two —
#: a party started twice, or two parties given one port, would answer each other's coordinators at random
SERVER_OPTIONS = [*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)]


def server_options(max_message: int = DEFAULT_MAX_MESSAGE) -> list:
    """A party's server options: :data:`SERVER_OPTIONS` with its cap on a received message (``max_message`` bytes)."""
    return [(k, int(max_message) if k == "grpc.max_receive_message_length" else v) for k, v in SERVER_OPTIONS]

GRPC_CODES = ("PERMISSION_DENIED", "INVALID_ARGUMENT", "FAILED_PRECONDITION")  # a refusal's status codes


def peer_name(context) -> str:
    """The verified common name of the caller's client certificate ('' without TLS)."""
    try:
        ctx = context.auth_context()
    except Exception:
        return ""
    cn = ctx.get("x509_common_name") or []
    return cn[0].decode() if cn else ""
