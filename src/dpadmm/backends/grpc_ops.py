"""Operations of a party process: what its operator sees in its log and its audit trail.

- **Refused handshakes.** A caller whose certificate is not from the party's CA (or has no
  certificate) never reaches the application: TLS fails inside gRPC's C core, which says so only in
  its own log. :func:`capture_handshake_refusals` reads that log (the process's file descriptor 2,
  at ``GRPC_VERBOSITY=INFO``), turns each ``Handshake failed`` into one audit record
  (``method: "(TLS handshake)"``, ``status: "refused"``, the TLS reason) and one log line, and drops
  gRPC's other diagnostics; everything else written to stderr passes through unchanged. The C
  core does not say which address failed, so the record names none.
- **Unknown methods.** :func:`unknown_method_handler` answers every method outside the party's
  service with ``UNIMPLEMENTED`` *and* an audit record naming the method and the caller.
- **State changes.** :func:`state_line` is what ``party serve`` logs for a call that changed its
  state — a new caller connected, a run started (Setup), resumed (Restore), ended (Finish) —
  instead of a heartbeat.
"""

from __future__ import annotations

import os
import re
import sys
import threading

from ..runtime.audit import state_line  # noqa: F401 (re-exported: its old home; the runtime logs state changes)
from .grpc_wire import SERVICE, peer_name

_GRPC_LOG = re.compile(r"^[IWEFD]\d{4} \d")  # gRPC C-core log lines: I1124 01:53:09.742879 ...


def capture_handshake_refusals(on_refusal):
    """Route fd 2 through a reader that reports ``Handshake failed`` lines to ``on_refusal(reason)``.

    Must run before gRPC is imported (it sets ``GRPC_VERBOSITY=INFO`` unless the operator chose a
    level). Python's own ``sys.stderr`` keeps writing to the original stderr. Returns a function that
    undoes the capture (a no-op when the operator set ``GRPC_VERBOSITY`` to another level).
    """
    level = os.environ.get("GRPC_VERBOSITY", "").upper()
    if level not in ("", "NONE", "INFO", "DEBUG"):
        return lambda: None
    os.environ["GRPC_VERBOSITY"] = "INFO" if level in ("", "NONE") else level
    real = os.dup(2)
    saved = os.dup(2)
    r, w = os.pipe()
    os.dup2(w, 2)
    os.close(w)
    old_stderr = sys.stderr
    sys.stderr = os.fdopen(os.dup(real), "w", buffering=1, encoding="utf-8", errors="replace")

    def pump():
        with os.fdopen(r, "rb") as fh:
            for raw in fh:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                if "Handshake failed" in line:
                    reason = line.split("] ", 1)[-1].strip()
                    try:
                        on_refusal(reason)
                    except Exception:  # the log must never take the party down
                        pass
                elif _GRPC_LOG.match(line) or line.startswith("WARNING: All log messages before absl"):
                    continue
                else:
                    os.write(real, raw)

    threading.Thread(target=pump, name="dpadmm-grpc-log", daemon=True).start()

    def restore():
        try:
            sys.stderr.flush()
        except Exception:
            pass
        sys.stderr = old_stderr
        os.dup2(saved, 2)  # the pipe's last writer closes: the reader thread ends
        os.close(saved)

    return restore


def unknown_method_handler(service, *, aio: bool):
    """A gRPC generic handler that refuses (and audits) any method outside ``service``'s."""
    import grpc  # noqa: PLC0415 (heavy: imported when a server starts, not at the CLI's start-up)

    served = service.methods
    known = {f"/{SERVICE}/{m}" for m in (*served, "Session")}

    def record(method, context):
        peer = peer_name(context) if service.secure else ""
        detail = f"party {service.name!r} serves no method {method} (only {', '.join(served)})"
        service.audit(peer, method, "refused", detail)
        if service.echo is not None:
            service.echo(f"refused unknown method {method} from {peer or '(insecure)'}")
        return detail

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):
            if details.method in known:
                return None
            method = details.method
            if aio:
                async def call(payload, context):
                    await context.abort(grpc.StatusCode.UNIMPLEMENTED, record(method, context))
            else:
                def call(payload, context):
                    context.abort(grpc.StatusCode.UNIMPLEMENTED, record(method, context))
            return grpc.unary_unary_rpc_method_handler(call)

    return Handler()
