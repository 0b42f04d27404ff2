"""A party's own privacy policy: what its operator fixes, whatever the coordinator sends.

Threat model (SPEC "Threat models", a malicious coordinator): the coordinator builds every Setup and
Step message. A party's guarantee is a theorem about the code it runs *and* about the values that
enter its noise and sensitivity. So a party started with ``dpadmm party serve`` reads a
:class:`PartyPolicy` — its operator's flags and/or a ``--policy FILE`` (JSON or TOML) — and

1. checks every privacy-relevant Setup field against it (per protocol: the hooks named by each
   algorithm's ``PROTOCOL.policy``, its folder's ``policy.py``): the neighbouring relation and
   its constants, the regulariser and its weight, the clip bounds and the mechanism, the noise
   multiplier floor, the score clip (functional), the row normalisation and the noise rate
   (consensus); a value that departs is refused before anything is read or released, with one error
   naming the field, the value sent and the party's own value;
2. prices the whole run the coordinator declares at Setup (rounds × what each round releases, from
   the checked configuration) against its remaining budget, and refuses it up front with the spend
   it would reach (:mod:`dpadmm.privacy.party_ledger`);
3. then lets each round through only if what the step released is within that declaration.

The defaults are the safe values: a party without a budget must be started with ``--no-budget``
(``dpadmm party serve`` refuses to start otherwise), and a party with a budget (or
``--private-only``) refuses non-private and un-noised runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from ..exceptions import InvalidParameterError, ProtocolError

#: noise multiplier σ/Δ below which a private party refuses a Gaussian run (one release at 0.5 is
#: already ε ≈ 9.6 at δ = 1e-5); its operator may lower it (``--min-noise-multiplier``).
DEFAULT_MIN_NOISE_MULTIPLIER = 0.5
#: PSI caps by default (each queried id's membership is what the coordinator learns): a query of at most 10,000 ids,
#: at most 20 PSI runs per data set and day; an operator may change them (``--psi-max-query``, ``--psi-max-runs``,
#: ``--psi-period``; ``null`` in a JSON policy file lifts one).
DEFAULT_PSI_MAX_QUERY = 10_000
DEFAULT_PSI_MAX_RUNS = 20


class PolicyRefusal(ProtocolError):
    """A request the party will not serve (→ gRPC PERMISSION_DENIED / FAILED_PRECONDITION).

    ``budget``: the budget decision behind a refusal (written to the party's audit log)."""

    def __init__(self, message: str, code: str = "PERMISSION_DENIED", budget: dict | None = None):
        super().__init__(message)
        self.code = code
        self.budget = budget


@dataclass(frozen=True)
class RunPrice:
    """What a run the coordinator declared will release at most, as the party computes it from its
    checked configuration: ``gaussian`` maps a noise multiplier σ/Δ to a number of releases,
    ``pure_epsilon`` is the sum of pure-DP releases; ``relation`` the neighbouring relation."""

    gaussian: Mapping[float, int] = field(default_factory=dict)
    pure_epsilon: float = 0.0
    relation: str = "record_replace"

    @property
    def releases(self) -> int:
        return int(sum(self.gaussian.values()))


#: the trust premises an operator may accept (``PartyPolicy.accept_premises``): name → what the guarantee then assumes
PREMISES = {
    "honest-label-party": "against an honest-but-curious label party (it encrypts residuals of the declared range and "
                          "computes its column sums on its clipped block, under a well-formed OU key; the party cannot check "
                          "these under encryption, and a label party that crafts them reads the party's rows)",
    "honest-peers": "against honest-but-curious peers (each computes its column sums of this party's encrypted scores "
                    "on its own clipped block, and its Paillier modulus is a product of two large primes — checked: "
                    "size, odd, no small factor, not a perfect power, its h_s never used; a peer that uses another "
                    "linear map reads this party's per-row scores)",
}


def premise_refusal(party: str, names) -> PolicyRefusal:
    """The one-line refusal of a private run whose guarantee rests on premises ``names`` that the party's operator
    has not accepted, naming the fix."""
    return PolicyRefusal(
        f"party {party!r} refused the run before releasing anything: its guarantee holds only "
        + " and ".join(PREMISES[n].split(" (")[0] for n in names)
        + f", a premise its operator has not accepted; to accept it, add accept_premises = {list(names)} to its "
        f"--policy file or start it with " + " ".join(f"--accept-premise {n}" for n in names))


@dataclass(frozen=True)
class PartyPolicy:
    """The operator's privacy policy of one party (``dpadmm party serve`` flags or ``--policy FILE``).

    Budget: ``max_epsilon`` at ``delta`` over every release the party ever makes (its ledger), or
    ``no_budget=True`` (an explicit opt-out, recorded in the audit log). ``private_only``: refuse
    non-private runs (implied by a budget). ``max_rounds``: at most this many rounds per run.
    ``min_noise_multiplier``: floor on σ/Δ of every Gaussian release of a private run.

    Vertical sharing: ``relation`` and ``column_change`` (the relation's constant Δ_c), the
    mechanism (``mechanisms``), ``min_lam_sum`` (λ_s of the ridge x-step must be ≥ it and > 0; the
    regulariser must be exactly ½‖x‖², no damping).
    Functional: ``max_score_clip`` (the standardised scores are clipped to at most this; the clip is
    mandatory and the sensitivity's c₁ must cover it), ``max_newton_tol`` (exact local solves).
    Every clip radius the coordinator chooses (vertical V, the functional score clip and c₁, the
    statistics' curve clip) must be ≥ ``min_clip``: with underflow-free norms the guarantee does not
    depend on the radius's size, the floor keeps clipped values and their noise clear of subnormal floats
    where they lose relative precision (REDTEAM_POLICY R5). ``normalize_vertical_rows``: the vertical
    party normalises its rows to unit norm (off: clipped to ‖d_k‖ ≤ 1) — the party's choice, never the
    coordinator's; row normalisation is not 1-Lipschitz, so it is allowed only with the record relation
    (REDTEAM_POLICY R3).
    Consensus: rows are normalised to ‖x‖ ≤ 1 at the party (``normalize_rows``; off: rows of norm
    > 1 are refused), ``max_alpha`` (a ceiling on the noise rate α of [Zhang, eq. 24]), the
    conditions of [Zhang, Alg. 1] are checked at the party.
    Vertical experts: ``row_clip`` R (the norm at which the party clips its rows; ``None``: the coordinator's R
    is accepted if ≥ ``min_clip``, a set value refuses any other), ``normalize_vertical_rows`` (its preparation).
    ``scoring_server``: the party was started with a model file (``--data model=FILE``), so it scores with that
    model and refuses any fit (a fit is the fit server's; the ledger, one per data set, is shared by both whatever
    their ``--out``) (set by ``party serve``, not by the coordinator).
    ``column_bounds``: ``(lo, hi)`` of the party's feature columns, declared by its operator (``party serve
    --bounds FILE``): vertical experts map every block they read (training and new records) to [−1, 1] by them and
    scale by R/√d (:func:`dpadmm.privacy.ranges.scale_columns`), whatever the coordinator sends; public, nothing
    released.
    ``accept_premises``: the names (:data:`PREMISES`) of the trust premises its operator accepts — a guarantee
    that holds only if another party follows the protocol (e.g. the encrypted protocol's feature side against an
    honest-but-curious label party) is served by a party with private work only if its premise is named here
    (``party serve --accept-premise NAME``); the protocol's check refuses otherwise.
    ``ledger`` and ``ledger_key``: the organisation's ledger store (a URL) and the operator's key file
    (:mod:`dpadmm.privacy.ledger_store`; None: ``$DPADMM_LEDGER`` / ``$DPADMM_LEDGER_KEY``, and a budget without
    them is refused); ``data_set``: the operator's name for the data set it serves (default: its content digest,
    :mod:`dpadmm.privacy.dataset_identity`).
    PSI (:mod:`dpadmm.algorithms.psi`): ``psi_max_query`` caps the ids one query may hold (default 10,000),
    ``psi_max_runs`` the PSI runs per ``psi_period`` seconds (default 20 a day), counted per data set in the ledger
    store, where a refused clear-join check closes both for the period (None: no cap, an explicit opt-out).
    """

    max_epsilon: float | None = None
    delta: float | None = None
    no_budget: bool = False
    private_only: bool = False
    max_rounds: int | None = None
    min_noise_multiplier: float = DEFAULT_MIN_NOISE_MULTIPLIER
    mechanisms: tuple[str, ...] = ("gaussian",)
    relation: str = "feature_column"
    column_change: float = 1.0
    min_lam_sum: float = 0.0
    max_score_clip: float | None = None
    max_newton_tol: float = 1e-8
    normalize_rows: bool = True
    max_alpha: float | None = None
    min_clip: float = 1e-12
    normalize_vertical_rows: bool = False
    row_clip: float | None = None
    scoring_server: bool = False
    ledger: str | None = None
    ledger_key: str | None = None
    data_set: str | None = None
    psi_max_query: int | None = DEFAULT_PSI_MAX_QUERY
    psi_max_runs: int | None = DEFAULT_PSI_MAX_RUNS
    psi_period: float = 86400.0
    column_bounds: tuple | None = None  # ((lo, …), (hi, …)): the operator's declared bounds of its feature columns
    accept_premises: tuple[str, ...] = ()  # the trust premises its operator accepts (:data:`PREMISES`), by name

    def __post_init__(self):
        if (self.max_epsilon is None) != (self.delta is None):
            raise InvalidParameterError("a party's own budget needs both --max-epsilon E and --delta D "
                                        "(or max_epsilon and delta in its --policy file).")
        if self.max_epsilon is not None:
            if not (math.isfinite(self.max_epsilon) and self.max_epsilon > 0):
                raise InvalidParameterError(f"--max-epsilon must be a positive number, got {self.max_epsilon}.")
            if not (0.0 < self.delta < 1.0):
                raise InvalidParameterError(f"--delta must be in (0, 1), got {self.delta}.")
            if self.no_budget:
                raise InvalidParameterError("give either a budget (--max-epsilon/--delta) or --no-budget, not both.")
        if not (self.min_noise_multiplier >= 0 and math.isfinite(self.min_noise_multiplier)):
            raise InvalidParameterError(f"--min-noise-multiplier must be a non-negative number, "
                                        f"got {self.min_noise_multiplier}.")
        if self.max_rounds is not None and int(self.max_rounds) < 1:
            raise InvalidParameterError(f"--max-rounds must be a positive integer, got {self.max_rounds}.")
        if self.relation not in ("feature_column", "record"):
            raise InvalidParameterError(f"the policy's relation must be 'feature_column' or 'record', "
                                        f"got {self.relation!r}.")
        if self.normalize_vertical_rows and self.relation == "feature_column":
            raise InvalidParameterError("normalize_vertical_rows needs relation 'record': normalising rows is not "
                                        "1-Lipschitz, so a change of one column is not bounded after it.")
        for name in ("column_change", "max_newton_tol", "min_clip"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise InvalidParameterError(f"the policy's {name} must be a positive number, got {v}.")
        for name in ("max_score_clip", "max_alpha", "row_clip"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise InvalidParameterError(f"the policy's {name} must be a positive number, got {v}.")
        for name in ("psi_max_query", "psi_max_runs"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InvalidParameterError(f"--{name.replace('_', '-')} must be a positive integer, got {v}.")
        if not (math.isfinite(self.psi_period) and self.psi_period > 0):
            raise InvalidParameterError(f"--psi-period must be a positive number of seconds, got {self.psi_period}.")
        unknown = sorted(set(self.accept_premises) - set(PREMISES))
        if unknown:
            raise InvalidParameterError(f"unknown premise(s) {unknown} in accept_premises (--accept-premise); known: "
                                        f"{sorted(PREMISES)}.")
        if not (math.isfinite(self.min_lam_sum) and self.min_lam_sum >= 0):
            raise InvalidParameterError(f"the policy's min_lam_sum must be >= 0, got {self.min_lam_sum}.")

    @property
    def budgeted(self) -> bool:
        return self.max_epsilon is not None

    @property
    def private_work(self) -> bool:
        """A party started for private work: its policy's checks apply and non-private runs are refused."""
        return self.budgeted or self.private_only

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


@dataclass(frozen=True)
class SimulationPolicy(PartyPolicy):
    """The policy of a *simulated* party (every party of a simulation backend given no operator's policy): the driver
    runs every party in one trust domain, so nothing is private from it. No budget and no private-only work (refused
    here); a seeded noise stream, data sent by the driver, monitoring and every declared request are allowed; the
    protocol's policy hooks do not apply (the driver is every party's operator); the parties of one protocol may be
    stepped together (``Protocol.batch_step``); no directory of its own (checkpoints go to the driver's). Never read
    from a ``--policy`` file: a party served to another organisation is never a simulation."""

    def __post_init__(self):
        super().__post_init__()
        if self.budgeted or self.private_only:
            raise InvalidParameterError("a simulated party has no budget and no private-only rule (the driver sees "
                                        "everything); give the party its operator's PartyPolicy instead.")


#: the policy every simulated party runs under
SIMULATION = SimulationPolicy()


def load_policy(path, **overrides) -> PartyPolicy:
    """A :class:`PartyPolicy` from a JSON or TOML file (keys = the field names), with ``overrides``
    (the ``party serve`` flags that were given) on top. Unknown keys are an error."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise InvalidParameterError(f"cannot read --policy {p}: {exc.strerror or exc}.") from None
        try:
            if p.suffix.lower() == ".toml":
                import tomllib

                data = tomllib.loads(text)
            else:
                data = json.loads(text)
        except ValueError as exc:
            raise InvalidParameterError(f"--policy {p} is not valid {'TOML' if p.suffix.lower() == '.toml' else 'JSON'}: "
                                        f"{str(exc).splitlines()[0]}.") from None
        if not isinstance(data, dict):
            raise InvalidParameterError(f"--policy {p} must hold a table of policy fields.")
    known = {f.name for f in fields(PartyPolicy)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InvalidParameterError(f"--policy has unknown field(s) {unknown}; known: {sorted(known)}.")
    for k in ("mechanisms", "accept_premises"):
        if k in data:
            data[k] = (data[k],) if isinstance(data[k], str) else tuple(data[k])
    data.update({k: v for k, v in overrides.items() if v is not None})
    return replace(PartyPolicy(), **data) if data else PartyPolicy()


def refuse(party: str, what: str, sent, own, fix: str = "") -> PolicyRefusal:
    """The one refusal message of a Setup field that departs from the party's policy."""
    return PolicyRefusal(f"party {party!r} refused the run before releasing anything: {what} is {sent!r}, its "
                         f"operator's policy requires {own}" + (f" ({fix})" if fix else ""))


def check_noise_multiplier(party: str, nm, policy: PartyPolicy, what: str = "the noise multiplier σ/Δ") -> float:
    """``nm`` as a float if it is a finite number ≥ the policy's floor (and > 0); a refusal otherwise."""
    try:
        v = float(nm)
    except (TypeError, ValueError):
        raise refuse(party, what, nm, "a number") from None
    floor = max(policy.min_noise_multiplier, 0.0)
    if not (math.isfinite(v) and v > 0 and v >= floor):
        raise refuse(party, what, v, f"σ/Δ ≥ {floor:g} (--min-noise-multiplier)" if floor > 0 else "σ/Δ > 0",
                     "an un-noised or nearly un-noised release")
    return v


def finite_positive(party: str, what: str, v, allow_zero: bool = False) -> float:
    """``float(v)``, or a refusal naming ``what`` unless it is finite and positive (non-negative with ``allow_zero``)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise refuse(party, what, v, "a finite positive number") from None
    if not (math.isfinite(x) and (x >= 0 if allow_zero else x > 0)):
        raise refuse(party, what, v, "a finite " + ("non-negative" if allow_zero else "positive") + " number")
    return x


def not_private(party: str, policy: PartyPolicy, how: str) -> None:
    """A refusal of an un-noised run (``how`` names the setting) by a party whose operator asked for private work."""
    if policy.private_work:
        raise refuse(party, "the run's privacy", how, "a private run (its operator started it with a budget or "
                     "--private-only)", "un-noised releases have ε = ∞")
