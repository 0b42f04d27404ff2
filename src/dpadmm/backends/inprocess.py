"""In-process backend: every party's step runs in the caller's process, one after another.

A *simulation*: the parties share the driver's memory, so nothing is private from the driver
here (``collects_models`` is True; estimators may read a simulated party's state and model with
:meth:`InProcessBackend.local_state` / :meth:`~InProcessBackend.local_model`). Every party runs in the party runtime,
as on every backend (:func:`~dpadmm.backends.base.host_party`): each has its own generator (OS entropy unless a seed
is given), serves its rounds in order, answers only declared handlers and checkpoints its own state. The simulated
parties of one protocol with a ``batch_step`` are stepped together (:func:`~dpadmm.runtime.local.step_together`, the
runtime option their simulation policy allows). A party given a policy (``policies={name: PartyPolicy(...)}``,
``party_dir=DIR``) runs under it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..exceptions import PartyFailureError, ProtocolError
from ..privacy.policy import PolicyRefusal
from ..runtime.local import step_together
from .base import Backend, PartySpec, host_party, refusal_at_caller


def _failure(name: str, what: str, exc: Exception) -> PartyFailureError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    reason = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    err = PartyFailureError(f"party {name!r} failed: {reason} (during {what})")
    err.party, err.reason, err.round = name, f"{reason} (during {what})", None
    return err


class InProcessBackend(Backend):
    """The default backend: no serialisation, no copies; same step functions as every backend.

    An exception raised by a party's function surfaces as :class:`PartyFailureError` naming the
    party (the engine adds the round), chained to the original exception. ``batch=False`` steps the parties one by
    one even where their protocol could step them together (the same numbers; for tests and profiling).
    """

    name = "inprocess"

    def __init__(self, *, policies=None, party_dir=None, batch: bool = True) -> None:
        self.batch = bool(batch)  # step a protocol's simulated parties together (Protocol.batch_step) when it can
        self.hosts: dict = {}
        self._set_policies(policies, party_dir)
        self._rounds = 0

    @property
    def collects_models(self) -> bool:
        return not self.operators  # a party under its operator's policy keeps its model (as in a deployment)

    def start(self, specs: Sequence[PartySpec], *, noise_seed: int | None = None, rounds: int | None = None) -> None:
        self._check_operators(specs)
        self._end_hosts(completed=False)
        self._rounds = 0
        for i, spec in enumerate(specs):
            try:
                self.hosts[spec.name] = host_party(spec, i, noise_seed, rounds, self.operators.get(spec.name))
            except PolicyRefusal as exc:
                self._end_hosts(completed=False)
                raise refusal_at_caller(spec.name, "setup", str(exc)) from None
            except ProtocolError:
                self._end_hosts(completed=False)
                raise
            except Exception as exc:
                self._end_hosts(completed=False)
                raise _failure(spec.name, "setup", exc) from exc

    def _each(self, what: str, fn, names=None) -> dict[str, Any]:
        out = {}
        for name in (self.hosts if names is None else names):
            try:
                out[name] = fn(self.hosts[name])
            except PolicyRefusal as exc:
                raise refusal_at_caller(name, what, str(exc)) from None
            except ProtocolError:
                raise
            except Exception as exc:
                raise _failure(name, what, exc) from exc
        return out

    def step(self, inboxes: Mapping[str, Any], round_: int) -> dict[str, tuple[Any, list]]:
        out = step_together(list(self.hosts.values()), inboxes, round_) if self.batch else None
        if out is None:
            out = self._each("step", lambda h: h.step(inboxes[h.name], round_))
        self._rounds = int(round_) + 1
        return out

    def local_state(self, name: str):
        return self._local(name).state

    def local_model(self, name: str):
        host = self._local(name)
        return host.runtime.protocol.model(host.cfg, host.state)

    def _local(self, name: str):
        host = self.hosts.get(name)
        if host is None or not host.simulation:
            raise ProtocolError(f"party {name!r} is not a simulated party of this run (a party under its operator's "
                                "policy keeps its state and model).")
        return host

    def diagnose(self) -> dict[str, dict]:
        out = self._each("diagnose", lambda h: h.diagnose())
        return {k: v for k, v in out.items() if v is not None}

    def request(self, name: str, handler: str, *args) -> Any:
        return self._each(f"request {handler!r}", lambda h: h.request(handler, *args), [name])[name]

    def checkpoint(self, directory, round_: int) -> None:
        self._each("checkpoint", lambda h: h.checkpoint(directory, round_))

    def restore(self, directory, round_: int) -> dict[str, list]:
        out = self._each("restore", lambda h: h.restore(directory, round_))
        return {name: again for name, again in out.items() if again}  # releases made again (hosted parties)

    def _end_hosts(self, completed: bool) -> None:
        hosts, self.hosts = self.hosts, {}
        for host in hosts.values():
            try:
                host.close(completed)
            except Exception:
                pass

    def close(self) -> None:
        """End the runs of the parties hosted under a policy (each writes its final model if the run completed);
        the others stay readable, as before (a simulation's parties are the driver's)."""
        hosted = {n: h for n, h in self.hosts.items() if not h.simulation}
        for host in hosted.values():
            try:
                host.close(self._rounds > 0)
            except Exception:
                pass
        self.hosts = {n: h for n, h in self.hosts.items() if n not in hosted}
