"""A party in its own organisation: a gRPC server that serves one declared protocol over mutual TLS.

``dpadmm party serve`` runs :func:`serve`. The party

- listens on one port (the coordinator dials it; the party needs no outbound access), plus, for the
  rounds' Step frames, its round channel (:mod:`tls_rounds`, ``--rounds-listen``), and accepts
  a call only over mutual TLS from a client certificate issued by the CA it trusts whose common
  name is on its allow list (``--allow coordinator``); ``--insecure`` (plaintext, no identities)
  exists for local tests only;
- serves exactly the protocol it was started for (``--protocol vertical-sharing``): ``Hello``,
  ``Setup`` (options as data; it reads its *own* files, given at start-up as ``--data KEY=FILE``,
  and factorises once), ``Step``, the protocol's declared ``Request`` handlers (e.g. ``score``),
  ``Diagnose`` (monitoring — refused in a private run unless started with ``--allow-monitoring``),
  ``Checkpoint``/``Restore`` (its own state, in its own directory) and ``Finish`` (it writes its
  final local model to its own directory; the model never leaves the party);
- refuses anything else with a clear error on both sides: a pickle or any non-dpadmm encoding,
  an undeclared type, an unknown method (gRPC ``UNIMPLEMENTED``), an undeclared request such as
  the model;
- draws its noise from its own OS entropy (unless the coordinator asks for a seeded simulation,
  which the run's report then says);
- appends one JSON line per call to ``OUT/audit.jsonl``: time, caller, method, status, and the
  names, shapes, dtypes and byte sizes of what it was sent and what it answered — never values;
- follows its operator's :class:`~dpadmm.privacy.policy.PartyPolicy` whatever the coordinator sends:
  every privacy-relevant Setup field is checked against it (the protocol's ``policy`` hooks) and
  the run the coordinator declares at Setup (its rounds) is priced against the party's own budget
  (``--max-epsilon E --delta D``, :class:`~dpadmm.privacy.party_ledger.PartyBudget`, recorded in
  the organisation's ledger store per data set, across runs and servers) and refused up front if it would overspend; each round is
  let through only within that declaration. Nothing is released before these checks.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # errors reach the user as one line of ours, not gRPC's C-core log

from ..privacy.party_ledger import PartyBudget, released_since  # noqa: F401 (re-exported)
from ..privacy.policy import PolicyRefusal as _Refused
from ..runtime import codec
from ..runtime.host import CHECKPOINT_NAME, PartyRuntime, atomic_write as _atomic_write  # noqa: F401 (re-exported)
from ..runtime.rounds import (  # noqa: F401 (re-exported: their old names)
    SeededGenerator as _SeededGenerator, all_zero as _all_zero, free_release as _free_release,
    holds_arrays as _holds_arrays,
)
from .grpc_server import make_server, peer_name, serve  # noqa: F401 (re-exported: the CLI and tests import them here)
from .grpc_wire import (  # noqa: F401 (re-exported: their old home)
    CHANNEL_OPTIONS, DEFAULT_MAX_MESSAGE, MAX_MESSAGE, METHODS, SERVICE, STREAM_WINDOW, WIRE_VERSION,
)
from .memory import TRIM_ABOVE, release_soon


class PartyService(PartyRuntime):
    """The party runtime (:class:`~dpadmm.runtime.host.PartyRuntime`) behind the wire: a call's bytes are checked
    (the caller's verified name on the allow list), decoded with the codec (the protocol's declared types only),
    served by the runtime and its reply encoded — one audit line either way.

    ``allow``: the certificate names a call is accepted from (``secure``: mutual TLS; False: ``--insecure``, no
    identities); every other argument is the runtime's (its operator's policy, files and directory).
    """

    methods = METHODS  # the unary methods it serves (a peer-to-peer node adds its own)
    round_port: int | None = None  # its round channel's port while it listens (:mod:`tls_rounds`)
    #: the most bytes one message to it may hold (``party serve --max-message-mb``); longer ones are refused by gRPC
    #: and the round channel from their length, before they are read
    max_message: int = DEFAULT_MAX_MESSAGE

    def __init__(self, *, allow: tuple[str, ...] = (), secure: bool = True, **runtime):
        super().__init__(**runtime)
        self.allow = tuple(allow)
        self.secure = secure

    def handle(self, method: str, payload: bytes, peer: str) -> bytes:
        """Serve one call: identity and decoding checks, then the runtime; raises ``_Refused``/Exception."""
        if len(payload) > TRIM_ABOVE:
            release_soon()  # its memory goes back to the system once the call has returned (issue 36)
        try:
            if self.secure and peer not in self.allow:
                raise _Refused(f"party {self.name!r} refuses caller {peer!r}: not on its allow list {list(self.allow)}")
            try:
                request = codec.decode(payload, allowed=self.allowed_types)
            except codec.DecodeError as exc:
                raise _Refused(f"party {self.name!r} {exc}", "INVALID_ARGUMENT") from None
        except _Refused as exc:
            self.refused(peer, method, exc, None, len(payload))
            raise
        return self.call(method, request, peer, nbytes=len(payload), encode=self._encode)

    def _encode(self, reply) -> bytes:
        return codec.encode(reply, allowed=self.allowed_types)

    def _hello(self, req):
        hello = dict(super()._hello(req), version=WIRE_VERSION)
        if self.round_port:  # set only while its round channel listens (tls_rounds)
            hello["rounds"] = {"port": int(self.round_port)}
        return hello
