"""A persistent bidirectional stream per party for the rounds (the hot path of the gRPC backend).

A unary call costs gRPC a new HTTP/2 stream, headers, and a trip through the server's call
dispatch every round. Here the coordinator opens one ``Session`` stream per party at the first
round and keeps it for the whole run: each round is one frame each way. A frame carries the same
method and the same encoded message as the unary call (:mod:`grpc_codec`), and the party serves
it through the same :meth:`PartyService.handle` — identity (the stream's verified certificate
name), allow list, decoding, refusals, budget and audit log are unchanged. Only ``Step`` travels
on the stream; everything else stays unary.

Frames: request ``len(method) (1 byte) | method (ASCII) | message``; reply ``0 | message`` on
success, ``1 | CODE | "\\n" | reason`` for a refusal (``CODE`` a gRPC status name), ``2 | reason``
for an error in the party's step. A refusal or an error leaves the stream open (the coordinator
decides); a dead party ends it (the coordinator sees the stream's error, as for a unary call).
"""

from __future__ import annotations

from ..privacy.policy import PolicyRefusal as _Refused  # grpc_party's _Refused (imported here once, not per frame)
from .grpc_wire import peer_name

STREAM_METHOD = "Session"
STREAMED = ("Step",)

OK, REFUSED, ERROR = b"\x00", b"\x01", b"\x02"


def frame(method: str, payload: bytes) -> bytes:
    m = method.encode("ascii")
    return bytes([len(m)]) + m + payload


def unframe(data: bytes) -> tuple[str, bytes]:
    n = data[0]
    return data[1:1 + n].decode("ascii", errors="replace"), data[1 + n:]


def serve_frame(service, data: bytes, peer: str) -> bytes:
    """One request frame → one reply frame (never raises: a bad frame is refused in the reply)."""
    try:
        method, payload = unframe(bytes(data))
    except Exception:
        return REFUSED + b"INVALID_ARGUMENT\nmalformed stream frame"
    if method not in STREAMED:
        service.audit(peer, f"{STREAM_METHOD}/{method}", "refused", "only Step travels on the stream")
        return REFUSED + f"UNIMPLEMENTED\nparty {service.name!r} serves only {list(STREAMED)} on its stream".encode()
    try:
        return OK + service.handle(method, payload, peer)
    except _Refused as exc:
        return REFUSED + f"{exc.code}\n{exc}".encode()
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        return ERROR + (f"{type(exc).__name__}: {first}" if first else type(exc).__name__).encode()


def stream_handler(service, *, aio: bool):
    """The party's ``Session`` method (stream-stream)."""
    import grpc  # noqa: PLC0415 (heavy: imported when a server starts, not at the CLI's start-up)

    if aio:
        async def session(requests, context):  # read/write on the context: no async generator per frame
            peer = peer_name(context) if service.secure else ""
            while True:
                data = await context.read()
                if data is grpc.aio.EOF:
                    return
                await context.write(serve_frame(service, data, peer))
    else:
        def session(requests, context):
            peer = peer_name(context) if service.secure else ""
            for data in requests:
                yield serve_frame(service, data, peer)
    return grpc.stream_stream_rpc_method_handler(session)


class StreamError(Exception):
    """A refusal or step error the party sent back on the stream (code, reason)."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.status = code
        self.reason = reason

    def code(self):
        import grpc  # noqa: PLC0415 (heavy; a StreamError is read where gRPC is already loaded)

        return getattr(grpc.StatusCode, self.status, grpc.StatusCode.INTERNAL)

    def details(self):
        return self.reason


def parse_reply(data: bytes) -> bytes:
    """The message of a reply frame, or :class:`StreamError` for a refusal / an error."""
    data = bytes(data)
    tag, body = data[:1], data[1:]
    if tag == OK:
        return body
    text = body.decode("utf-8", errors="replace")
    if tag == REFUSED:
        code, _, reason = text.partition("\n")
        raise StreamError(code, reason)
    raise StreamError("INTERNAL", text)
