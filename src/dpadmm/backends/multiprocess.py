"""Process backend: one OS process per party, standard library ``multiprocessing`` with pipes.

Every party lives in its own worker process. The worker runs the party's ``setup`` itself (so a
party can load its own file), keeps ``(cfg, state)`` in its memory, and answers commands sent
over a private pipe: ``step`` (inbox + round number in, outbox + privacy events out),
``diagnose``, ``request`` (a handler the party declared), ``checkpoint``/``restore`` (the party
writes and reads its own state file) and ``close``. A party given a policy (``policies=``, ``party_dir=``) is
hosted in its worker by the party runtime (:func:`~dpadmm.backends.base.host_party`): its refusals reach the
caller as the gRPC client's :class:`~dpadmm.exceptions.ProtocolError`. The party's generator is made inside the worker
(the party runtime, :func:`~dpadmm.backends.base.host_party`): no seed or generator crosses the pipe unless the user
asked for a seeded simulation. This backend is one trust domain (the party's setup is pickled to
it); for parties of different organisations use the gRPC backend.

Failures surface at the caller as :class:`~dpadmm.exceptions.PartyFailureError` naming the
party (the engine adds the round):

- the party's function raises → the worker reports the exception, the other parties' replies
  are collected, and the error is raised (the backend stays usable);
- the worker process dies (killed, segfault, ``os._exit``) → detected at once through the
  process sentinel, all workers are shut down, the error is raised;
- no answer within ``timeout`` seconds → all workers are shut down, the error is raised.

The default start method is ``forkserver`` on Linux (workers are forked from a clean server
process that has imported numpy/scipy/dpadmm once, so start-up is fast and no driver state —
threads, locks, other parties' data — is inherited) and ``spawn`` elsewhere.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Mapping, Sequence

from threadpoolctl import threadpool_limits

from ..exceptions import InvalidParameterError, PartyFailureError, ProtocolError
from .base import Backend, PartySpec, host_party, refusal_at_caller

# the worker's own module too: a worker forked from the server starts with the party runtime (and the privacy
# package under it) already imported, rather than importing it once per party
_PRELOAD = ["numpy", "scipy.sparse", "dpadmm", "dpadmm.privacy", "dpadmm.data", "dpadmm.engine",
            "dpadmm.backends.multiprocess"]


def party_failure(party: str | None, reason: str) -> PartyFailureError:
    """A :class:`PartyFailureError` carrying ``party`` and ``reason`` (the engine adds ``round``)."""
    msg = f"party {party!r} failed: {reason}" if party is not None else reason
    exc = PartyFailureError(msg)
    exc.party = party
    exc.reason = reason
    exc.round = None
    return exc


def take_reply(reply: tuple, name: str, what: str, results: dict, error: Exception | None) -> Exception | None:
    """A worker's reply ``("ok", value)``, ``("refused", reason)`` or ``("error", reason, traceback)`` to ``what``:
    the value goes into ``results[name]``; returns the call's error, the first refusal or failure (process and Ray
    workers reply alike)."""
    if reply[0] == "ok":
        results[name] = reply[1]
    elif error is None and reply[0] == "refused":
        error = refusal_at_caller(name, what, reply[1])
    elif error is None:
        error = party_failure(name, f"{reply[1]} (during {what})")
        error.remote_traceback = reply[2]
    return error


def _describe(exc: BaseException) -> str:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _died_hint(what: str) -> str:
    if what == "setup":
        return ("if this runs from a script, guard its entry point with `if __name__ == '__main__':` "
                "(workers start with forkserver/spawn and re-import the main module)")
    return "resume from the last checkpoint"


# ----------------------------------------------------------------------------- worker side
def _worker(conn, name: str, threads: int | None = None) -> None:  # pragma: no cover - runs in the child
    """The worker loop: ``(cmd, *payload)`` in, ``("ok", value)`` or ``("error", text, tb)`` out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when workers stop
    if threads:
        try:  # one BLAS/OpenMP pool per party, sized so that parties do not oversubscribe the cores
            threadpool_limits(limits=int(threads))
        except Exception:
            pass
    host = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the driver went away
        cmd = msg[0]
        if cmd == "close":
            if host is not None:
                try:
                    host.close(bool(msg[1]) if len(msg) > 1 else False)
                except Exception:
                    pass
            conn.send(("ok", None))
            return
        try:
            if cmd == "setup":
                host = host_party(msg[1], msg[2], msg[3], msg[4], msg[5])
                value = None
            elif cmd == "step":
                value = host.step(msg[1], msg[2])
            elif cmd == "diagnose":
                value = host.diagnose()
            elif cmd == "request":
                value = host.request(msg[1], *msg[2])
            elif cmd == "checkpoint":
                value = host.checkpoint(msg[1], msg[2])
            elif cmd == "restore":
                value = host.restore(msg[1], msg[2])
            else:
                raise ProtocolError(f"party {name!r} refused command {cmd!r}: not part of the protocol.")
            reply = ("ok", value)
        except ProtocolError as exc:  # a refused request: the caller gets the same ProtocolError
            reply = ("refused", str(exc), "")
        except Exception as exc:  # report, keep serving
            reply = ("error", _describe(exc), traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as exc:  # e.g. an unpicklable result
            conn.send(("error", f"cannot send the result of {cmd}: {_describe(exc)}", traceback.format_exc()))


# ----------------------------------------------------------------------------- driver side
class ProcessBackend(Backend):
    """One OS process per party; the same step functions as every backend.

    Parameters
    ----------
    timeout : seconds a party may take to answer one command (``step``, ``diagnose``, …) before
        the run fails with :class:`PartyFailureError` (> 0). A dead worker is detected at once.
    setup_timeout : seconds for a party's ``setup`` (loading and factorising its data); default
        ``max(timeout, 300)``.
    start_method : ``"forkserver"`` (default on Linux), ``"spawn"`` (default elsewhere) or ``"fork"``.
    threads : BLAS/OpenMP threads per party process (default 1, as Ray does for its actors; ``None``
        keeps the library default). With many parties on few cores, more threads oversubscribe the
        machine: 20 parties × 2 OpenBLAS threads on 2 cores made a round ~100× slower.
    """

    name = "process"

    def __init__(self, *, timeout: float = 120.0, setup_timeout: float | None = None,
                 start_method: str | None = None, threads: int | None = 1, policies=None, party_dir=None) -> None:
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got timeout={timeout!r}.")
        if start_method is None:
            start_method = "forkserver" if sys.platform.startswith("linux") else "spawn"
        if start_method not in mp.get_all_start_methods():
            raise InvalidParameterError(f"start_method must be one of {mp.get_all_start_methods()}, "
                                        f"got start_method={start_method!r}.")
        self.timeout = float(timeout)
        self.setup_timeout = float(setup_timeout) if setup_timeout is not None else max(self.timeout, 300.0)
        self.start_method = start_method
        self.threads = threads
        self._ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            self._ctx.set_forkserver_preload(_PRELOAD)
        self._procs: dict[str, Any] = {}
        self._conns: dict[str, Any] = {}
        self._has_diag: dict[str, bool] = {}
        self._pids: dict[str, int] = {}
        self._closed = False
        self._rounds = 0
        self._set_policies(policies, party_dir)

    # -------------------------------------------------------------- plumbing
    @property
    def pids(self) -> dict[str, int]:
        """Process id of every party's worker (for monitoring and fault-injection tests)."""
        return dict(self._pids)

    def _send(self, name: str, msg: tuple) -> None:
        try:
            self._conns[name].send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            self._procs[name].join(0.5)
            code = self._procs[name].exitcode
            self._shutdown(force=True)
            raise party_failure(name, f"its process died (exit code {code}); {_died_hint(msg[0])}.") from None

    def _gather(self, names: Sequence[str], what: str, timeout: float | None = None) -> dict[str, Any]:
        """Collect one reply per party in ``names``; raise the first failure (all replies drained)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        pending = {self._conns[n]: n for n in names}
        sentinels = {self._procs[n].sentinel: n for n in names}
        results: dict[str, Any] = {}
        error: Exception | None = None
        while pending:
            remaining = deadline - time.monotonic()
            ready = wait(list(pending) + [s for s, n in sentinels.items() if n in pending.values()],
                         timeout=max(remaining, 0.0))
            if not ready:
                late = sorted(pending.values())
                self._shutdown(force=True)
                raise party_failure(late[0], f"no answer to {what} within timeout={self._fmt(deadline, timeout)} s "
                                             f"(still waiting for {late}); the party may hang — raise the "
                                             "timeout if its step is legitimately slow.")
            for obj in ready:
                if obj in pending:
                    conn, name = obj, pending[obj]
                else:
                    name = sentinels[obj]
                    conn = self._conns[name]
                    if conn not in pending:
                        continue
                    if not conn.poll():  # died without a reply
                        proc = self._procs[name]
                        proc.join(0.1)
                        code = proc.exitcode
                        self._shutdown(force=True)
                        raise party_failure(name, f"its process died (exit code {code}) during {what}; "
                                                  f"{_died_hint(what)}.")
                try:
                    reply = conn.recv()
                except (EOFError, OSError):
                    self._procs[name].join(0.5)
                    code = self._procs[name].exitcode
                    self._shutdown(force=True)
                    raise party_failure(name, f"its process died (exit code {code}) during {what}; "
                                              f"{_died_hint(what)}.") from None
                del pending[conn]
                error = take_reply(reply, name, what, results, error)
        if error is not None:
            raise error
        return results

    def _fmt(self, deadline, timeout) -> str:
        return f"{self.timeout if timeout is None else timeout:g}"

    def _check_open(self):
        if self._closed:
            raise PartyFailureError("the process backend is closed (a party failed or close() was called); "
                                    "start a new run.")

    # -------------------------------------------------------------- Backend interface
    def start(self, specs: Sequence[PartySpec], *, noise_seed: int | None = None, rounds: int | None = None) -> None:
        """Start one worker per party and run its setup there (a closed backend can be started again)."""
        self._check_operators(specs)
        self._closed = False
        self._rounds = 0
        self._procs, self._conns, self._has_diag, self._pids = {}, {}, {}, {}
        for spec in specs:
            parent, child = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(target=_worker, args=(child, spec.name, self.threads),
                                     name=f"dpadmm-party-{spec.name}",
                                     daemon=True)
            proc.start()
            child.close()
            self._procs[spec.name] = proc
            self._pids[spec.name] = proc.pid
            self._conns[spec.name] = parent
            self._has_diag[spec.name] = spec.diagnose is not None
        for i, spec in enumerate(specs):
            self._send(spec.name, ("setup", spec, i, noise_seed, rounds, self.operators.get(spec.name)))
        try:
            self._gather([s.name for s in specs], "setup", timeout=self.setup_timeout)
        except PartyFailureError:
            self._shutdown(force=True)
            raise
        except ProtocolError:  # a party refused the run: the others end theirs (their runtimes close)
            self._shutdown(force=False)
            raise

    def step(self, inboxes: Mapping[str, Any], round_: int) -> dict[str, tuple[Any, list]]:
        self._check_open()
        names = list(self._procs)
        for name in names:
            self._send(name, ("step", inboxes[name], round_))
        out = self._gather(names, "step")
        self._rounds = int(round_) + 1
        return out

    def diagnose(self) -> dict[str, dict]:
        self._check_open()
        names = [n for n in self._procs if self._has_diag[n]]
        for name in names:
            self._send(name, ("diagnose",))
        return self._gather(names, "diagnose")

    def request(self, name: str, handler: str, *args) -> Any:
        self._check_open()
        self._send(name, ("request", handler, args))
        return self._gather([name], f"request {handler!r}")[name]

    def _all(self, cmd: str, *payload) -> None:
        self._check_open()
        for name in self._procs:
            self._send(name, (cmd, *payload))
        self._gather(list(self._procs), cmd)

    def checkpoint(self, directory, round_: int) -> None:
        self._all("checkpoint", str(directory), round_)

    def restore(self, directory, round_: int) -> dict[str, list]:
        self._check_open()
        for name in self._procs:
            self._send(name, ("restore", str(directory), round_))
        out = self._gather(list(self._procs), "restore")
        return {name: again for name, again in out.items() if again}  # releases made again (hosted parties)

    def close(self) -> None:
        """Ask every worker to exit, then join; terminate/kill the ones that do not."""
        if not self._closed:
            self._shutdown(force=False)

    def _shutdown(self, force: bool) -> None:
        if self._closed and not self._procs:
            return
        self._closed = True
        if not force:
            for name, conn in self._conns.items():
                if self._procs[name].is_alive():
                    try:
                        conn.send(("close", self._rounds > 0))
                    except Exception:
                        pass
            deadline = time.monotonic() + 5.0
            for proc in self._procs.values():
                proc.join(max(deadline - time.monotonic(), 0.0))
        for proc in self._procs.values():
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
        for conn in self._conns.values():
            try:
                conn.close()
            except Exception:
                pass
        for proc in self._procs.values():
            try:
                proc.close()
            except Exception:
                pass
        self._procs, self._conns = {}, {}

    def __del__(self):  # pragma: no cover - best effort
        try:
            if not self._closed and self._procs:
                self._shutdown(force=True)
        except Exception:
            pass
