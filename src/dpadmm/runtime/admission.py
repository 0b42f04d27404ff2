"""Setup admission: what a party checks before it reads its data or releases anything.

In order (:meth:`PartyRuntime._setup <dpadmm.runtime.host.PartyRuntime>`): the protocol is one the party serves
and the message is for this party; data the coordinator sent where the party reads its own files is refused
(unless its operator simulates a deployment); a coordinator-chosen noise seed is refused (unless its operator
allows a seeded simulation); the protocol's ``policy.prepare`` imposes the party's own values; every
:class:`~dpadmm.protocol.PartyData` reference is replaced by the block read from the party's own file; the
protocol's setup runs; then :func:`admit`: a private-only party refuses a non-private run, the protocol's
``policy.check`` refuses any field that departs from the party's policy, the declared rounds must be a positive
integer within ``max_rounds``, and a budgeted party prices the whole declared run against its ledger
(:meth:`~dpadmm.privacy.party_ledger.PartyBudget.open_run`), refusing it up front if it would overspend.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import ProtocolError
from ..privacy.policy import PolicyRefusal as _Refused
from ..privacy.psi_admission import admit_psi, admit_rows
from ..protocol import PartyData
from ..protocol.spec import check_setup, setup_view
from .rounds import holds_arrays


def check_request(rt, req) -> tuple[tuple, int | None]:
    """The Setup message's protocol, party, setup record, data and seed against the party's rules; returns (the
    protocol's ``setup_type`` record, seed). Selects ``rt.protocol`` (a party may serve several). The setup arrives
    by name (``"setup"``: field → value), checked against the protocol's declared Setup type (an unknown or missing
    field, or a value of the wrong type, is refused naming the field)."""
    if req.get("protocol") not in rt.protocols:
        raise _Refused(f"party {rt.name!r} serves protocol {sorted(rt.protocols)}, not {req.get('protocol')!r}")
    rt.protocol = rt.protocols[req["protocol"]]
    if req.get("party") != rt.name:
        raise _Refused(f"this party is {rt.name!r}, not {req.get('party')!r}")
    setup_type = rt.protocol.setup_type
    if "setup" not in req:
        sent = " (positional 'args' are not accepted)" if "args" in req else ""
        raise _Refused(f"party {rt.name!r} refused Setup: it carries no 'setup' record{sent}; send the fields of "
                       f"{setup_type.__qualname__} by name ({', '.join(setup_type._fields)})", "INVALID_ARGUMENT")
    try:
        raw = check_setup(setup_type, req["setup"])
    except ProtocolError as exc:
        raise _Refused(f"party {rt.name!r} refused Setup: {exc}", "INVALID_ARGUMENT") from None
    for field in rt.protocol.data_fields:
        if not rt.accept_coordinator_data and holds_arrays(getattr(raw, field)):
            raise _Refused(f"party {rt.name!r} refused data sent by the coordinator (setup field {field}): it "
                           "reads its own files (--data KEY=FILE); a simulation can opt in with "
                           "--accept-coordinator-data")
    seed = req.get("noise_seed")
    if seed is not None and not rt.allow_seeded_noise:
        raise _Refused(f"party {rt.name!r} refused a coordinator-chosen noise seed (whoever knows it can remove "
                       "the noise); its operator can allow a reproducible simulation with --allow-seeded-noise")
    hooks = None if rt.simulation else rt.protocol.policy  # a simulation's driver is every party's operator
    if hooks is not None and hooks.prepare is not None:
        # the party's own values where it can impose them (a hook may answer with the fields in order)
        raw = setup_view(setup_type, hooks.prepare(raw, rt.policy))
    return raw, seed


def localise_setup(rt, setup):
    """The Setup record with every PartyData reference in its fields replaced by the party's own block."""
    return setup._replace(**{k: localise(rt, v) for k, v in zip(setup._fields, setup)})


def localise(rt, obj):
    """Replace every PartyData reference by the block read from the party's own file."""
    if isinstance(obj, PartyData):
        if obj.key not in rt.data:
            raise _Refused(f"party {rt.name!r} has no data {obj.key!r} (it was started with "
                           f"{sorted(rt.data)}; add --data {obj.key}=FILE)", "FAILED_PRECONDITION")
        # rows only through a PSI intersection this party took part in (data.psi: PSI is the only door)
        params = admit_rows(rt.name, obj.key, rt.data[obj.key], dict(obj.params, **rt.describe_options),
                            policy=rt.policy, store=rt.store, data_set=rt.data_set and rt.data_set.key)
        return rt.protocol.load(rt.data[obj.key], params)
    if isinstance(obj, list):
        return [localise(rt, v) for v in obj]
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a typed options record: its fields (e.g. eval blocks)
        return obj._replace(**{k: localise(rt, v) for k, v in zip(obj._fields, obj)})
    if isinstance(obj, tuple):
        return tuple(localise(rt, v) for v in obj)
    if isinstance(obj, dict):
        return {k: localise(rt, v) for k, v in obj.items()}
    return obj


def admit(rt, req, args) -> dict | None:
    """The party's policy on a set-up run, before anything is released: its checks, the declared rounds,
    and (with a budget) the price of the whole run against what is left (:mod:`dpadmm.privacy.policy`).
    Returns the budget decision (for the audit line), or None."""
    if rt.protocol.alignment or not rt.protocol.rounds:  # PSI: its operator's caps; scoring: nothing to price
        return admit_psi(rt.name, rt.policy, rt.out, args, store=rt.store,
                         data_set=rt.data_set and rt.data_set.key) if rt.protocol.alignment else None
    if rt.private_only and not rt.private:
        why = (f"its operator gave it a privacy budget (--max-epsilon {rt.budget.max_epsilon:g}) and an un-noised "
               "release has ε = ∞") if rt.budget is not None else "its operator started it with --private-only"
        raise _Refused(f"party {rt.name!r} refused a non-private run: {why}",
                       budget=None if rt.budget is None else dict(rt.budget.status(), decision="refused"))
    hooks = None if rt.simulation else rt.protocol.policy
    if hooks is not None and hooks.check is not None:
        hooks.check(rt.cfg, args, rt.policy, rt.name)
    rounds = req.get("rounds")
    if rounds is not None:
        if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
            raise _Refused(f"party {rt.name!r} refused the run: declared rounds must be a positive integer, "
                           f"got {rounds!r}", "INVALID_ARGUMENT")
        rt.declared_rounds = int(rounds)
    if rt.max_rounds is not None and rounds is not None and rounds > rt.max_rounds:
        raise _Refused(f"party {rt.name!r} refused the run at Setup: {rounds} declared rounds, its operator allows "
                       f"at most {rt.max_rounds} rounds per run (--max-rounds)")
    if rt.budget is None:
        return None
    if rounds is None:
        raise _Refused(f"party {rt.name!r} refused the run: it has a privacy budget and prices every run at Setup, "
                       "but the coordinator declared no number of rounds (a dpadmm coordinator declares them; "
                       "update it)", budget=dict(rt.budget.status(), decision="refused"))
    if hooks is None or hooks.price is None:
        raise _Refused(f"party {rt.name!r} refused the run: protocol {rt.protocol.name!r} declares no price, "
                       "so a budgeted party cannot serve it", budget=dict(rt.budget.status(), decision="refused"))
    return rt.budget.open_run(rt.run_id, rt.protocol.name, hooks.price(rt.cfg, rt.declared_rounds),
                              rt.declared_rounds, by=rt.run_by)
