"""The party's gRPC server: :class:`~dpadmm.backends.grpc_party.PartyService` behind one port (unary methods and
the rounds' stream, :mod:`grpc_stream`), plus its raw TLS round channel (:mod:`tls_rounds`).

:func:`make_server` builds a threaded server (tests, benchmarks); :func:`serve` runs gRPC's asyncio server until
interrupted or, with ``once``, until the coordinator sends Finish (``dpadmm party serve``). A refusal reaches the
caller as its status code (PERMISSION_DENIED, INVALID_ARGUMENT, FAILED_PRECONDITION) and its one line; an error as
INTERNAL with the exception's type and first line.
"""

from __future__ import annotations

import asyncio
from concurrent import futures

from ..exceptions import InvalidParameterError
from ..privacy.policy import PolicyRefusal as _Refused
from .grpc_ops import unknown_method_handler
from .grpc_stream import STREAM_METHOD, stream_handler
from .grpc_wire import DEFAULT_MAX_MESSAGE, SERVICE, peer_name, server_options
from .tls_rounds import start_round_server


class _WithRounds:
    """A threaded gRPC server and the party's round channel (:mod:`tls_rounds`), started and stopped together."""

    def __init__(self, server, rounds):
        self._server, self.rounds = server, rounds

    def stop(self, grace):
        self.rounds.close()
        return self._server.stop(grace)

    def __getattr__(self, key):
        return getattr(self._server, key)


def _bind(server, service, listen: str, tls, grpc) -> int:
    """Bind ``server`` (threaded or asyncio) to ``listen``, mutual TLS with ``tls``; the port, or one line saying
    why not — also in ``service``'s audit log, whose Start line is already written, so the log says this start
    never served. Without SO_REUSEPORT (:func:`~.grpc_wire.server_options`) a port already served is refused
    here: grpcio raises ``RuntimeError`` ("Failed to bind"), older releases return 0."""
    try:
        if tls is None:
            port = server.add_insecure_port(listen)
        else:
            creds = grpc.ssl_server_credentials([(tls.key, tls.cert)], root_certificates=tls.ca,
                                                require_client_auth=True)
            port = server.add_secure_port(listen, creds)
    except RuntimeError:
        port = 0
    if port == 0:
        reason = (f"cannot listen on {listen}: the address is in use or not this machine's (give --listen HOST:PORT "
                  "with a free port)")
        service.audit("", "Listen", "error", reason)
        raise InvalidParameterError(reason)
    return port


def make_server(service, listen: str, tls=None, *, max_workers: int = 4, rounds: str | None = None):
    """A started-not-yet gRPC server bound to ``listen`` serving ``service``; returns (server, port).

    ``rounds``: also serve the rounds' raw TLS channel (``"auto"`` or ``"HOST:PORT"``, :mod:`tls_rounds`; it
    listens at once, on threads of its own, and the Hello reply announces it); None: rounds on the gRPC stream.
    """
    import grpc  # noqa: PLC0415 (heavy: imported when a server starts, not at the CLI's start-up)

    codes = {"PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
             "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
             "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION}

    def method(name):
        def call(payload, context):
            try:
                return service.handle(name, payload, peer_name(context) if service.secure else "")
            except _Refused as exc:
                context.abort(codes.get(exc.code, grpc.StatusCode.PERMISSION_DENIED), str(exc))
            except Exception as exc:
                first = str(exc).splitlines()[0] if str(exc) else ""
                context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {first}" if first
                              else type(exc).__name__)
        return grpc.unary_unary_rpc_method_handler(call)

    handler = grpc.method_handlers_generic_handler(SERVICE, {**{m: method(m) for m in service.methods},
                                                             STREAM_METHOD: stream_handler(service, aio=False)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                         handlers=(handler, unknown_method_handler(service, aio=False)),
                         options=server_options(getattr(service, "max_message", DEFAULT_MAX_MESSAGE)),
                         maximum_concurrent_rpcs=None)
    port = _bind(server, service, listen, tls, grpc)
    round_server = start_round_server(service, tls, rounds, listen)
    if round_server is not None:
        server = _WithRounds(server, round_server)
    return server, port


def serve(service, listen: str, tls=None, *, once: bool = False, ready=None,
          rounds: str | None = None) -> None:
    """Serve until interrupted (or, with ``once``, until the coordinator sends Finish).

    ``rounds`` (``"auto"``, ``"HOST:PORT"`` or None/``"off"``): also serve the rounds' ``Step`` frames on a raw
    mutual-TLS channel (:mod:`tls_rounds`, on threads of its own); ``ready(port)`` is called once both listen
    (``service.round_port`` is then the round channel's port, None without one).

    Runs gRPC's asyncio server: each call is handled on the event loop's thread (one party serves
    one coordinator, calls are sequential), saving the thread hand-off of the threaded server —
    the dominant per-call cost when many parties share few cores.
    """
    import grpc  # noqa: PLC0415 (heavy: imported when a server starts, not at the CLI's start-up)

    codes = {"PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
             "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
             "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION}

    def method(name):
        async def call(payload, context):
            try:
                return service.handle(name, payload, peer_name(context) if service.secure else "")
            except _Refused as exc:
                await context.abort(codes.get(exc.code, grpc.StatusCode.PERMISSION_DENIED), str(exc))
            except Exception as exc:
                first = str(exc).splitlines()[0] if str(exc) else ""
                await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {first}" if first
                                    else type(exc).__name__)
        return grpc.unary_unary_rpc_method_handler(call)

    async def main():
        server = grpc.aio.server(options=server_options(getattr(service, "max_message", DEFAULT_MAX_MESSAGE)))
        served = {**{m: method(m) for m in service.methods},
                  STREAM_METHOD: stream_handler(service, aio=True)}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, served),
                                         unknown_method_handler(service, aio=True)))
        port = _bind(server, service, listen, tls, grpc)
        await server.start()
        try:
            round_server = start_round_server(service, tls, rounds, listen)
        except Exception:
            await server.stop(None)
            raise
        if ready is not None:
            ready(port)
        try:
            while True:
                await asyncio.sleep(0.2)
                if service.finished.is_set():
                    if once:
                        await asyncio.sleep(0.2)  # let the Finish reply go out
                        break
                    service.finished.clear()
        finally:
            if round_server is not None:
                round_server.close()
            await server.stop(1.0)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
