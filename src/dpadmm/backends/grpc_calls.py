"""The coordinator's calls to its parties over gRPC (and the raw TLS round channel): the plumbing under
:class:`~dpadmm.backends.grpc_backend.GrpcBackend`.

One asyncio event loop on a thread of the backend's own carries every gRPC call (concurrent calls to all parties
from one thread); a round's ``Step`` frames go on each party's round channel (:mod:`tls_rounds`) when it offers
one, else on its persistent gRPC stream (:mod:`grpc_stream`), else as unary calls. A reply that does not decode, a
refusal, a deadline or a lost party becomes one error naming the party (:meth:`GrpcCalls._error`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import threading
import warnings
from typing import Any, Mapping

from ..exceptions import InvalidParameterError, MissingDependencyError, PartyFailureError
from ..runtime import codec
from .base import refusal_at_caller
from .grpc_stream import STREAM_METHOD, STREAMED, StreamError, frame, parse_reply
from .grpc_wire import CHANNEL_OPTIONS, MAX_MESSAGE, METHODS, SERVICE
from .tls_round_client import RoundClient, exchange
from .tls_context import client_context


def _import_grpc():
    try:
        import grpc  # noqa: F401, PLC0415 (heavy: imported at the first call, not at the CLI's start-up)
    except ImportError:  # pragma: no cover - grpcio is a dependency
        raise MissingDependencyError("the grpc backend needs grpcio: pip install 'grpcio>=1.60'.") from None
    return grpc


def parse_peers(items) -> dict[str, str]:
    """``["party1=host:port", ...]`` (or one comma-separated string) → ``{"party1": "host:port"}``."""
    if isinstance(items, str):
        items = [items]
    out: dict[str, str] = {}
    for item in items or []:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part or not part.split("=", 1)[1].strip().rsplit(":", 1)[-1].isdigit():
                raise InvalidParameterError(f"--peer must look like NAME=HOST:PORT (e.g. party1=10.0.0.5:7001), "
                                            f"got {part!r}.")
            name, addr = (s.strip() for s in part.split("=", 1))
            if name in out:
                raise InvalidParameterError(f"--peer {name} is given twice.")
            out[name] = addr
    return out


STREAM_MAX_BYTES = MAX_MESSAGE  # every round's message travels on the party's stream (its window: STREAM_WINDOW)


class _Malformed:
    """A reply that did not decode (the party is reported as failed, naming the reason)."""

    def __init__(self, error: Exception):
        self.error = error


def _broadcast_key(inbox) -> tuple:
    """Equal for two inboxes that encode to the same bytes: the same object, or the same declared message type
    whose fields are the same array objects and equal exact scalars (a hub that builds one message per party
    around one broadcast array). Only compared within one round, while every inbox is alive (ids are unique)."""
    if isinstance(inbox, tuple) and hasattr(type(inbox), "_fields"):
        values = tuple(inbox)
    elif dataclasses.is_dataclass(inbox) and not isinstance(inbox, type):
        values = tuple(getattr(inbox, f.name) for f in dataclasses.fields(inbox))
    else:
        return ("id", id(inbox))
    parts = []
    for v in values:
        t = type(v)
        if t is float:
            parts.append((t, v.hex()))  # exact, and -0.0 differs from 0.0
        elif v is None or t in (bool, int, str):
            parts.append((t, v))
        else:  # arrays and anything else: the same object
            parts.append(("id", id(v)))
    return (type(inbox), tuple(parts))


def _failure(name: str, reason: str) -> PartyFailureError:
    exc = PartyFailureError(f"party {name!r} failed: {reason}")
    exc.party, exc.reason, exc.round = name, reason, None
    return exc


class GrpcCalls:
    """Calls to the parties of a :class:`~dpadmm.backends.grpc_backend.GrpcBackend` (its state: peers, TLS
    identity, timeouts, channels, streams and round channels)."""

    # ------------------------------------------------------------------ plumbing
    def _run(self, coro):
        """Run ``coro`` on the backend's event-loop thread (gRPC asyncio: concurrent calls to all parties
        from one thread — about half the per-call cost of thread-backed futures) and wait for it."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="dpadmm-grpc", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _submit(self, coro):
        """Start ``coro`` on the backend's event-loop thread; returns its concurrent future."""
        self._run(asyncio.sleep(0))  # the loop, started if need be
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _channel(self, name: str):
        grpc = _import_grpc()
        if name not in self.peers:
            raise InvalidParameterError(f"no address for party {name!r}; pass --peer {name}=HOST:PORT "
                                        f"(known: {sorted(self.peers)}).")
        if name not in self._channels:
            addr = self.peers[name]

            async def make():
                if self.insecure:
                    return grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
                creds = grpc.ssl_channel_credentials(root_certificates=self.tls.ca, private_key=self.tls.key,
                                                     certificate_chain=self.tls.cert)
                # TLS checks that the party's certificate was issued for NAME (not for the host's address)
                return grpc.aio.secure_channel(addr, creds,
                                               options=CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", name)])

            ch = self._run(make())
            self._channels[name] = ch
            self._calls[name] = {m: ch.unary_unary(f"/{SERVICE}/{m}") for m in (*METHODS, "Run", "Poll")}  # + p2p
        return self._calls[name]

    def _error(self, name: str, what: str, err, timeout: float) -> Exception:
        grpc = _import_grpc()
        code = err.code() if hasattr(err, "code") else None
        details = (err.details() if hasattr(err, "details") else str(err)) or ""
        debug = err.debug_error_string() if hasattr(err, "debug_error_string") else ""
        text = f"{details} {debug}".lower()
        addr = self.peers.get(name, "?")
        if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED):
            return refusal_at_caller(name, what, details)
        self._failed = True  # a failed run: parties write no final model
        self._dead.add(name)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return _failure(name, f"no answer to {what} within timeout={timeout:g} s from {addr}; the party may hang "
                                  "or be unreachable — raise --timeout if its step is legitimately slow.")
        if code == grpc.StatusCode.UNAVAILABLE:
            refused_tls = what == "Hello" and not self.insecure and "socket closed" in text  # closed before any call
            if refused_tls or any(k in text for k in ("handshake", "ssl", "certificate", "tsi_", "alert", "verification",
                                                      "unauthenticated")):
                return _failure(name, f"TLS handshake with {addr} failed (mutual TLS refused: a certificate not issued "
                                      f"for {name!r} by the CA this side trusts, or ours not trusted by it).")
            return _failure(name, f"unreachable at {addr} during {what} (connection refused or lost: is `dpadmm party "
                                  "serve` running there?); restart it and resume from the last checkpoint.")
        first = details.splitlines()[0] if details else str(code)
        return _failure(name, f"{first} (during {what})")

    def _drop_stream(self, name: str) -> None:
        call = self._streams.pop(name, None)
        if call is not None:
            call.cancel()

    async def _on_stream(self, name: str, method: str, payload: bytes) -> bytes:
        """One request frame on party ``name``'s persistent stream (opened at its first round) and its reply
        (the caller bounds the round's time)."""
        grpc = _import_grpc()
        call = self._streams.get(name)
        if call is None:
            call = self._channels[name].stream_stream(f"/{SERVICE}/{STREAM_METHOD}")()
            self._streams[name] = call
        try:
            await call.write(frame(method, payload))
            data = await call.read()
        except Exception:
            self._streams.pop(name, None)
            raise
        if data is grpc.aio.EOF:
            self._streams.pop(name, None)
            code = await call.code()
            raise StreamError(code.name if code != grpc.StatusCode.OK else "UNAVAILABLE",
                              (await call.details()) or "the party closed its stream")
        return parse_reply(data)

    def _close_streams(self) -> None:
        for call in self._streams.values():
            try:
                self._loop.call_soon_threadsafe(call.cancel)
            except Exception:
                pass
        for conn in self._rconns.values():
            conn.close()
        self._streams, self._rconns = {}, {}

    def _tls_rounds(self, name: str) -> bool:
        """Party ``name``'s rounds go on its raw TLS round channel (it announced one, and it was reachable)."""
        return (self.round_transport == "tls" and name not in self._rounds_off
                and isinstance((self.hello_.get(name) or {}).get("rounds"), dict))

    def _drop_rounds(self, name: str) -> None:
        conn = self._rconns.pop(name, None)
        if conn is not None:
            conn.close()

    def _open_rounds(self, names, timeout: float) -> None:
        """Connect to the round channel (:mod:`tls_rounds`) of each party in ``names`` (at its first round). A
        certificate that is not the party's (or a party that refuses ours) fails the run, as on gRPC; an
        unreachable round port sends that party's rounds to its gRPC stream instead (with a warning)."""
        if not self.insecure and self._rctx is None:
            self._rctx = client_context(self.tls)
        for name in names:
            host, port = self.peers[name].rsplit(":", 1)[0], self.hello_[name]["rounds"].get("port")
            try:
                self._rconns[name] = RoundClient.open(host, int(port), name, self._rctx,
                                                      min(self.connect_timeout, timeout))
            except ssl.SSLError as exc:  # incl. a certificate not issued for `name` by the CA: never a fallback
                raise self._error(name, "step", StreamError("UNAVAILABLE", f"TLS handshake on the round channel "
                                                                           f"failed ({exc})"), timeout) from None
            except (OSError, TypeError, ValueError) as exc:
                self._rounds_off.add(name)
                self.round_transport_[name] = "grpc"
                warnings.warn(f"party {name!r}'s round channel at {host}:{port} is unreachable from here "
                              f"({type(exc).__name__}: {exc}); its rounds go on its gRPC stream (open that port to "
                              "this side, or start the party with --rounds-listen off).", RuntimeWarning, stacklevel=4)
                continue
            self.round_transport_[name] = "tls"

    def _call(self, name: str, method: str, body: dict, timeout: float, what: str | None = None):
        return self._call_all({name: body}, method, timeout, what or method)[name]

    def _call_all(self, bodies: Mapping[str, dict], method: str, timeout: float, what: str) -> dict[str, Any]:
        """Send one call per party concurrently; decode the replies; raise the first failure (all replies
        are collected first, so the parties stay in step)."""
        calls = {name: self._channel(name)[method] for name in bodies}
        payloads, once = {}, {}
        for name, body in bodies.items():
            allowed = self._allowed.get(name) or codec.allow_list()
            # a round's broadcast (the same message for every party: one object, e.g. vertical sharing's s̃ − z, or
            # one message per party around the same arrays) is encoded once per protocol, not once per party
            key = ((_broadcast_key(body["inbox"]), body.get("round"), id(allowed))
                   if method == "Step" and isinstance(body, dict) and set(body) == {"round", "inbox"} else None)
            if key is not None and key in once:
                payloads[name] = once[key]
                continue
            payloads[name] = codec.encode(body, allowed=allowed)
            if key is not None:
                once[key] = payloads[name]

        # the rounds' messages: one frame each way on the party's stream (a unary call per round with stream=False)
        on_stream = {n: self.stream and method in STREAMED and len(payloads[n]) <= STREAM_MAX_BYTES for n in bodies}
        # ... or on its raw TLS round channel (tls_rounds: connected at its first round, driven from this thread)
        if any(on_stream.values()) and self.round_transport == "tls":
            fresh = [n for n in bodies if on_stream[n] and n not in self._rconns and self._tls_rounds(n)]
            if fresh:
                self._open_rounds(fresh, timeout)
        on_tls = [n for n in bodies if on_stream[n] and n in self._rconns]
        others = [n for n in bodies if n not in on_tls]

        def decode(n, data):
            try:
                return codec.decode(data, allowed=self._allowed.get(n) or codec.allow_list())
            except codec.DecodeError as err:
                return _Malformed(err)

        async def one(n):
            """Party ``n``'s reply, decoded as soon as it arrives (while other parties are still answering)."""
            data = await (self._on_stream(n, method, payloads[n]) if on_stream[n]
                          else calls[n](payloads[n], timeout=timeout))
            return decode(n, data)

        async def gather():
            if any(on_stream[n] for n in others):  # one deadline for the round (per-party timers cost more)
                tasks = [asyncio.ensure_future(one(n)) for n in others]
                done, pending = await asyncio.wait(tasks, timeout=timeout)
                out = []
                for n, task in zip(others, tasks):
                    if task in pending:
                        task.cancel()
                        self._drop_stream(n)
                        out.append(StreamError("DEADLINE_EXCEEDED", "no answer on the stream"))
                    else:
                        out.append(task.exception() or task.result())
                return out
            return await asyncio.gather(*[one(n) for n in others], return_exceptions=True)

        got: dict[str, Any] = {}
        pending = self._submit(gather()) if others else None  # the gRPC parties on the event loop, meanwhile ...
        if on_tls:  # ... the round channels from this thread: one select loop, replies decoded as they arrive
            conns = {n: self._rconns[n] for n in on_tls}
            got.update(exchange(conns, {n: frame(method, payloads[n]) for n in on_tls}, timeout, on_reply=decode))
            for n in on_tls:
                if conns[n].broken:  # lost, out of step after a deadline, or malformed: a new connection next time
                    self._drop_rounds(n)
        if pending is not None:
            got.update(zip(others, pending.result()))
        out, error = {}, None
        for name, reply in ((n, got[n]) for n in bodies):
            if isinstance(reply, _Malformed):
                error = error or _failure(name, f"sent a malformed reply to {what}: {reply.error}")
            elif isinstance(reply, BaseException):  # grpc.aio.AioRpcError, StreamError
                error = error or self._error(name, what, reply, timeout)
            else:
                out[name] = reply
        if error is not None:
            raise error
        return out
