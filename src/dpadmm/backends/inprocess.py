"""In-process backend: every party's step runs in the caller's process, one after another.

A *simulation*: the parties share the driver's memory, so nothing is private from the driver
here (``collects_models`` is True and estimators may collect local models for ``predict``). The
rules are still those of every backend: each party has its own generator (OS entropy unless a
seed is given), answers only declared handlers, and checkpoints its own state. A party given a policy
(``policies={name: PartyPolicy(...)}``, ``party_dir=DIR``) is hosted by the party runtime, as on every backend
(:func:`~dpadmm.backends.base.host_party`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..exceptions import PartyFailureError, ProtocolError
from ..privacy.policy import PolicyRefusal
from .base import Backend, PartyHost, PartySpec, host_party, refusal_at_caller


def _failure(name: str, what: str, exc: Exception) -> PartyFailureError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    reason = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    err = PartyFailureError(f"party {name!r} failed: {reason} (during {what})")
    err.party, err.reason, err.round = name, f"{reason} (during {what})", None
    return err


class InProcessBackend(Backend):
    """The default backend: no serialisation, no copies; same step functions as every backend.

    An exception raised by a party's function surfaces as :class:`PartyFailureError` naming the
    party (the engine adds the round), chained to the original exception.
    """

    name = "inprocess"

    def __init__(self, *, policies=None, party_dir=None) -> None:
        self.hosts: dict = {}
        self._set_policies(policies, party_dir)
        self._rounds = 0
        self._batch = None  # the protocol's batch step, when every party may take it (_together)

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
        self._batch = self._together()

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
        out = self._step_together(inboxes, round_)
        if out is None:
            out = self._each("step", lambda h: h.step(inboxes[h.name], round_))
        self._rounds = int(round_) + 1
        return out

    def _together(self):
        """The protocol's ``batch_step`` when every party is a plain simulation party (no policy: a party under its
        operator's policy is served by its runtime, round by round) of that one protocol with its declared step (a
        planted step, as an audit runs, goes alone) and its own single stream; else None."""
        hosts = list(self.hosts.values())
        protocol = hosts[0].spec.protocol if hosts else None
        if (len(hosts) < 2 or protocol is None or protocol.batch_step is None
                or any(type(h) is not PartyHost or h.spec.protocol is not protocol or h.spec.step is not protocol.step
                       or h.spec.streams for h in hosts)):
            return None
        return protocol.batch_step

    def _step_together(self, inboxes, round_: int):
        """Every party's step of this round at once (``Protocol.batch_step``): the same states, messages, noise (each
        party's own generator) and events as one by one; None when the protocol does not take the round. A failure
        inside it is left to the parties one by one, where it is reported as the failing party's."""
        batch = self._batch
        if batch is None:
            return None
        hosts = list(self.hosts.values())
        try:
            results = batch([h.cfg for h in hosts], [h.state for h in hosts], [inboxes[h.name] for h in hosts],
                            [h.rng(round_) for h in hosts])
        except Exception:  # noqa: BLE001 - stepped one by one next, where the failure is the party's
            return None
        if results is None:
            return None
        for h, (state, _, _) in zip(hosts, results):
            h.state = state
        return {h.name: (outbox, events) for h, (_, outbox, events) in zip(hosts, results)}

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
        hosts, self.hosts, self._batch = self.hosts, {}, None
        for host in hosts.values():
            try:
                host.close(completed)
            except Exception:
                pass

    def close(self) -> None:
        """End the runs of the parties hosted under a policy (each writes its final model if the run completed);
        the others stay readable, as before (a simulation's parties are the driver's)."""
        hosted = {n: h for n, h in self.hosts.items() if not isinstance(h, PartyHost)}
        for host in hosted.values():
            try:
                host.close(self._rounds > 0)
            except Exception:
                pass
        self.hosts = {n: h for n, h in self.hosts.items() if n not in hosted}
        self._batch = self._together()
