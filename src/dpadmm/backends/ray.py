"""Ray backend: one Ray actor per party (optional extra ``pip install "dpadmm[ray]"``).

Each party is an actor that runs the party's ``setup`` itself (so its data is loaded on the node
it lives on), keeps ``(cfg, state)`` and its own generator in the actor
(the party runtime, :func:`~dpadmm.backends.base.host_party`); the driver only sends inboxes and round numbers and
receives outboxes, privacy events, declared replies and (when monitoring) diagnostics — the same
payloads as the process backend, through Ray's object store.

Placement: ``party_resources={"party2": "org_b"}`` asks Ray to place party2's actor on a node
started with ``ray start ... --resources '{"org_b": 1}'``, so parties can live on different
machines (each actor takes a tiny fraction of the resource, so several parties may share a node).
``address="auto"`` or ``"HOST:PORT"`` joins an existing cluster; without it a local Ray instance is
started (and stopped again by :meth:`RayBackend.close`).

Loopback. A local instance binds every port to 127.0.0.1: ``ray.init`` is given ``_node_ip_address="127.0.0.1"``
and — because Ray's ``ray.init`` replaces a loopback node address with the machine's network address
(``services.resolve_ip_for_localhost``), after which its GCS, raylet and workers listen on every interface — that
replacement is suspended for the call; the node address Ray ends up with is checked, and a local instance on any
other address is stopped and refused (:class:`~dpadmm.exceptions.PartyFailureError`).
``tests/transport/test_ray_loopback.py`` lists the listening sockets of every process of a local run.
Joining a cluster (``address``), :func:`security_note` says how its traffic is secured — Ray's TLS
(``RAY_USE_TLS=1`` with ``RAY_TLS_SERVER_CERT``, ``RAY_TLS_SERVER_KEY``, ``RAY_TLS_CA_CERT`` on every node and the
driver) and its token authentication (``RAY_AUTH_MODE``) — and the CLI prints it (docs/howto/backends.md).

Authentication: Ray ≥ 2.5x enables token authentication by default. Set ``RAY_AUTH_MODE`` the same
way on every node and the driver (``token``, with the same token file ``~/.ray/auth_token`` or
``RAY_AUTH_TOKEN`` everywhere; or ``disabled`` for isolated test clusters). A Ray cluster is one
trust domain: every node can run code on every other node. For parties run by different
organisations, use this backend for simulation and single-organisation deployments only.

Failures surface as :class:`~dpadmm.exceptions.PartyFailureError` naming the party (the engine adds
the round): an exception inside the party's function, a dead actor (``ActorDiedError``), or no
answer within ``timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import time
import traceback
from typing import Any, Mapping, Sequence

from ..exceptions import InvalidParameterError, MissingDependencyError, PartyFailureError, ProtocolError
from .base import Backend, PartySpec, host_party
from .multiprocess import _describe, party_failure, take_reply

INSTALL_HINT = 'pip install "dpadmm[ray]"'
LOOPBACK = "127.0.0.1"
log = logging.getLogger("dpadmm.backends.ray")


def _truthy(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


def security_note(address: str, environ: Mapping[str, str] | None = None) -> str:
    """One line on how the traffic to and from the Ray cluster at ``address`` is secured, from the variables Ray reads
    (the driver's; every node must set the same): its TLS (``RAY_USE_TLS``) and token authentication
    (``RAY_AUTH_MODE``)."""
    env = os.environ if environ is None else environ
    if _truthy(env.get("RAY_USE_TLS")):
        files = ", ".join(f"{k}={env.get(k) or '(unset)'}" for k in ("RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY",
                                                                       "RAY_TLS_CA_CERT"))
        tls = f"gRPC over mutual TLS (RAY_USE_TLS=1; {files})"
    else:
        tls = ("NOT encrypted: RAY_USE_TLS is not set, so Ray's gRPC traffic (every party's messages and objects) "
               "crosses the network in plaintext; set RAY_USE_TLS=1 and RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY, "
               "RAY_TLS_CA_CERT on every node and here")
    mode = (env.get("RAY_AUTH_MODE") or "").strip().lower()
    auth = ("NO authentication (RAY_AUTH_MODE=disabled): whoever reaches the cluster's ports runs code in every party"
            if mode == "disabled" else
            f"token authentication (RAY_AUTH_MODE={mode or 'unset: Ray’s default, token'})")
    return (f"Ray cluster at {address}: transport {tls}; {auth}. A Ray cluster is one trust domain: every node can "
            "run code in every party.")


def _is_loopback(host: str | None) -> bool:
    try:
        return ipaddress.ip_address(str(host)).is_loopback
    except ValueError:
        return str(host) == "localhost"


@contextlib.contextmanager
def _keep_loopback_node_address(ray):
    """While ``ray.init`` runs: Ray's replacement of a loopback node address by the machine's network address
    suspended (loopback stays loopback; any other address is resolved as Ray does)."""
    services = getattr(getattr(ray, "_private", None), "services", None)
    real = getattr(services, "resolve_ip_for_localhost", None)
    if real is None:
        yield
        return
    services.resolve_ip_for_localhost = lambda host: host if _is_loopback(host) else real(host)
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = real


def import_ray():
    """Import Ray with usage statistics off, or raise :class:`MissingDependencyError` with the hint."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray  # noqa: PLC0415 (optional extra: imported only when a Ray backend is made)
    except ImportError:
        raise MissingDependencyError(f"the Ray backend needs Ray, which is not installed; install it with "
                                     f"`{INSTALL_HINT}`.") from None
    return ray


class _PartyActor:
    """The actor hosting one party (wrapped by ``ray.remote`` when the backend starts)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.host = None

    def _run(self, fn, *args):
        try:
            return ("ok", fn(*args))
        except ProtocolError as exc:
            return ("refused", str(exc), "")
        except Exception as exc:
            return ("error", _describe(exc), traceback.format_exc())

    def setup(self, spec: PartySpec, index: int, noise_seed, rounds=None, operator=None):
        def go():
            self.host = host_party(spec, index, noise_seed, rounds, operator)
        return self._run(go)

    def close(self, completed: bool):
        if self.host is None:
            return ("ok", None)
        return self._run(lambda: self.host.close(completed))

    def step(self, inbox, round_):
        return self._run(lambda: self.host.step(inbox, round_))

    def diagnose(self):
        return self._run(lambda: self.host.diagnose())

    def request(self, handler, args):
        return self._run(lambda: self.host.request(handler, *args))

    def checkpoint(self, directory, round_):
        return self._run(lambda: self.host.checkpoint(directory, round_))

    def restore(self, directory, round_):
        return self._run(lambda: self.host.restore(directory, round_))

    def where(self):
        """Node id and process id of this actor (for placement checks)."""
        import ray  # noqa: PLC0415 (optional extra: only inside a Ray actor)

        return ("ok", {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()})


class RayBackend(Backend):
    """One Ray actor per party; the same step functions as every backend.

    Parameters
    ----------
    address : ``None`` (start a local Ray instance on 127.0.0.1 unless Ray is already initialised),
        ``"auto"`` or ``"HOST:PORT"`` of a running cluster (``ray start --head``).
    party_resources : ``{party name: custom resource name}`` pinning parties to the nodes that
        advertise that resource.
    timeout : seconds a party may take to answer one command before the run fails (> 0).
    setup_timeout : seconds for actor creation plus ``setup``; default ``max(timeout, 300)``.
    num_cpus : CPUs each actor reserves (0 lets many parties share a small machine).
    init_kwargs : extra keyword arguments for ``ray.init``.
    """

    name = "ray"

    def __init__(self, *, address: str | None = None, party_resources: Mapping[str, str] | None = None,
                 timeout: float = 120.0, setup_timeout: float | None = None, num_cpus: float = 0,
                 init_kwargs: Mapping[str, Any] | None = None, policies=None, party_dir=None) -> None:
        self._ray = import_ray()
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got timeout={timeout!r}.")
        self.address = address
        self.party_resources = dict(party_resources or {})
        self.timeout = float(timeout)
        self.setup_timeout = float(setup_timeout) if setup_timeout is not None else max(self.timeout, 300.0)
        self.num_cpus = num_cpus
        self.init_kwargs = dict(init_kwargs or {})
        self._actors: dict[str, Any] = {}
        self._has_diag: dict[str, bool] = {}
        self._owns_ray = False
        self._closed = False
        self.security_note_: str | None = None  # joining a cluster: how its traffic is secured (security_note)
        self.placement_: dict[str, dict] = {}
        self._rounds = 0
        self._set_policies(policies, party_dir)

    # -------------------------------------------------------------- plumbing
    def _ensure_ray(self) -> None:
        ray = self._ray
        if ray.is_initialized():
            return
        kwargs = {"include_dashboard": False, "configure_logging": False, "log_to_driver": False}
        local = self.address is None
        if local:
            kwargs["_node_ip_address"] = LOOPBACK
        else:
            kwargs["address"] = self.address
        kwargs.update(self.init_kwargs)
        try:
            with _keep_loopback_node_address(ray) if local else contextlib.nullcontext():
                ray.init(**kwargs)
        except Exception as exc:  # connection / auth problems
            where = f"the cluster at address={self.address!r}" if self.address else "a local Ray instance"
            raise PartyFailureError(f"cannot start or join {where} ({_describe(exc)}); check the address "
                                    "and that RAY_AUTH_MODE/the auth token match the cluster's.") from None
        self._owns_ray = True
        if local:
            node = ray.util.get_node_ip_address()
            if not _is_loopback(node) and _is_loopback(kwargs.get("_node_ip_address")):
                ray.shutdown()
                self._owns_ray = False
                raise PartyFailureError(f"the local Ray instance came up on {node}, not on {LOOPBACK}: its ports would "
                                        "be reachable from the network; refused (this Ray version does not keep a "
                                        "loopback node address).")
        else:
            self.security_note_ = security_note(self.address)
            log.warning(self.security_note_)

    def _gather(self, refs: Mapping[str, Any], what: str, timeout: float | None = None) -> dict[str, Any]:
        ray = self._ray
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        pending = {ref: name for name, ref in refs.items()}
        results: dict[str, Any] = {}
        error: Exception | None = None
        while pending:
            remaining = deadline - time.monotonic()
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(remaining, 0.0))
            if not ready:
                late = sorted(pending.values())
                self._shutdown()
                raise party_failure(late[0], f"no answer to {what} within timeout={limit:g} s (still waiting for "
                                             f"{late}); the party may hang — raise the timeout if its step is "
                                             "legitimately slow.")
            for ref in ready:
                name = pending.pop(ref)
                try:
                    reply = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self._shutdown()
                    raise party_failure(name, f"its actor died during {what} ({type(exc).__name__}); resume from "
                                              "the last checkpoint.") from None
                except ray.exceptions.RayError as exc:
                    self._shutdown()
                    raise party_failure(name, f"Ray failed during {what}: {_describe(exc)}") from None
                error = take_reply(reply, name, what, results, error)
        if error is not None:
            raise error
        return results

    def _check_open(self):
        if self._closed:
            raise PartyFailureError("the Ray backend is closed (a party failed or close() was called); "
                                    "start a new run.")

    # -------------------------------------------------------------- Backend interface
    def start(self, specs: Sequence[PartySpec], *, noise_seed: int | None = None, rounds: int | None = None) -> None:
        """Start one worker per party and run its setup there (a closed backend can be started again)."""
        unknown = sorted(set(self.party_resources) - {spec.name for spec in specs})
        if unknown:
            names = [spec.name for spec in specs]
            raise InvalidParameterError(
                f"party_resources (--ray-resources) names {', '.join(map(repr, unknown))}, which is not a party of this "
                f"run; its parties are {', '.join(names)} (give NAME=RESOURCE for those).")
        self._check_operators(specs)
        self._closed = False
        self._rounds = 0
        self._actors, self._has_diag = {}, {}
        self._ensure_ray()
        ray = self._ray
        actor_cls = ray.remote(_PartyActor)
        for spec in specs:
            opts: dict[str, Any] = {"num_cpus": self.num_cpus, "max_restarts": 0, "max_task_retries": 0}
            res = self.party_resources.get(spec.name)
            if res is not None:
                opts["resources"] = {res: 0.001}
            self._actors[spec.name] = actor_cls.options(**opts).remote(spec.name)
            self._has_diag[spec.name] = spec.diagnose is not None
        refs = {spec.name: self._actors[spec.name].setup.remote(spec, i, noise_seed, rounds,
                                                                self.operators.get(spec.name))
                for i, spec in enumerate(specs)}
        try:
            self._gather(refs, "setup", timeout=self.setup_timeout)
            self.placement_ = self._gather({n: a.where.remote() for n, a in self._actors.items()}, "where")
        except PartyFailureError:
            self._shutdown()
            raise
        except ProtocolError:  # a party refused the run: the others end theirs (their runtimes close)
            self._shutdown(end_runs=True)
            raise

    def step(self, inboxes: Mapping[str, Any], round_: int) -> dict[str, tuple[Any, list]]:
        self._check_open()
        out = self._gather({n: a.step.remote(inboxes[n], round_) for n, a in self._actors.items()}, "step")
        self._rounds = int(round_) + 1
        return out

    def diagnose(self) -> dict[str, dict]:
        self._check_open()
        return self._gather({n: a.diagnose.remote() for n, a in self._actors.items() if self._has_diag[n]},
                            "diagnose")

    def request(self, name: str, handler: str, *args) -> Any:
        self._check_open()
        return self._gather({name: self._actors[name].request.remote(handler, args)}, f"request {handler!r}")[name]

    def checkpoint(self, directory, round_: int) -> None:
        self._check_open()
        self._gather({n: a.checkpoint.remote(str(directory), round_) for n, a in self._actors.items()}, "checkpoint")

    def restore(self, directory, round_: int) -> dict[str, list]:
        self._check_open()
        out = self._gather({n: a.restore.remote(str(directory), round_) for n, a in self._actors.items()}, "restore")
        return {name: again for name, again in out.items() if again}  # releases made again (hosted parties)

    def placement(self) -> dict[str, dict]:
        """``{party: {"node_id": …, "pid": …}}`` — where every party's actor runs."""
        self._check_open()
        return self._gather({n: a.where.remote() for n, a in self._actors.items()}, "where")

    def close(self) -> None:
        """End the hosted parties' runs, kill the actors; stop Ray if this backend started it."""
        if not self._closed:
            self._shutdown(end_runs=True)

    def _shutdown(self, end_runs: bool = False) -> None:
        self._closed = True
        ray = self._ray
        if end_runs and self.operators:  # parties under a policy end their run (final model, ledger, audit log)
            refs = [a.close.remote(self._rounds > 0) for n, a in self._actors.items() if n in self.operators]
            try:
                if refs:
                    ray.wait(refs, num_returns=len(refs), timeout=min(self.timeout, 10.0))
            except Exception:  # a dead actor: its run ends with it (its journal is read back at its next start)
                pass
        for actor in self._actors.values():
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self._actors.clear()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False
