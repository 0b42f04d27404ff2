"""A party's own privacy ledger and budget: runs priced at Setup, releases checked in O(1) per round.

Threat model: the coordinator may be malicious (SPEC "Threat models"). It declares each run at
Setup (its number of rounds; the noise multiplier, mechanism and relation are Setup fields the
party has checked against its :class:`~dpadmm.privacy.policy.PartyPolicy`). The party

- **prices the run at Setup** (:meth:`PartyBudget.open_run`): the protocol's price hook turns the
  checked configuration and the declared rounds into a :class:`~dpadmm.privacy.policy.RunPrice`
  (so many Gaussian releases at noise multiplier σ/Δ, so much pure ε); the ledger's releases so far
  composed with that price, by dp-accounting's PLD accountant (Gaussian; multipliers rounded *down*
  to 8 significant digits, never optimistic) plus the pure ε's (basic composition of (ε₁, δ) and
  (ε₂, 0) is (ε₁ + ε₂, δ)), must stay within ``max_epsilon`` at ``delta``; otherwise the run is
  refused before anything is released, and the message gives the spend it would have reached;
- **checks each round** (:meth:`PartyBudget.charge`, constant time whatever the ledger's size): every
  event the step returned must be within the declaration — a Gaussian release of the declared
  relation with σ/Δ at least a declared multiplier, no more releases than declared, pure ε within
  the declared total; a release without an event, a non-Gaussian mechanism, a NaN or an unknown
  event is a departure. A departing round is refused and *nothing is sent*.

Why this never overspends: every release of an accepted run is charged at a declared multiplier ≤
its own (so its true loss is at most the charged one), a run releases at most what was priced, and
the run was accepted only if (ledger so far) ∘ (whole price) ≤ cap; composition is monotone, so the
ledger stays ≤ cap after any prefix of the run, and a run that stops early has spent less than priced.

Store: one per organisation (:mod:`dpadmm.privacy.ledger_store`: an SQLite file or a PostgreSQL database, named by
``--ledger`` and verified with the operator's ``--ledger-key``), one budget per data set in it
(:mod:`dpadmm.privacy.dataset_identity`: the canonical digest of the parsed rows, or the operator's declared name),
shared by every server, host and ``--out`` that serves it. Every read-modify-write is one transaction that first
reads (and verifies) the rows other processes added; a run opened by a live process reserves the rest of its price,
so two servers that price runs at once never pass the cap together. Each charged round is a row of the store,
committed *before* the reply leaves the party (so a crash never loses a release). Nothing in the store is a total:
every total is folded from keyed, hash-chained rows, so an edit, a deletion or a copy is detected, never a reset.
A run that releases nothing fixes nothing: the ledger's relation is that of the runs that released (or may).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import warnings
from pathlib import Path

import dp_accounting

from .accountants.gaussian import _fresh
from .events import GaussianRelease, PureDPRelease
from .dataset_identity import data_set_id
from .ledger_fold import add_counts, empty_ledger, fold
from .ledger_store import LedgerStore, LedgerTampered, configured
from .policy import PolicyRefusal, RunPrice
from .refusal_hint import refusal_fix

__all__ = ["PartyBudget", "compose", "floor_multiplier", "released_since"]
_REL_TOL = 1e-9  # σ/Δ recomputed from (σ, Δ) may differ from the declared value in the last bits


def floor_multiplier(nm: float) -> float:
    """``nm`` rounded *down* to 8 significant digits (never an optimistic ε; a stable key in the JSON file).
    Every release of a run is charged at the run's declared multiplier, so the ledger holds one key per run
    and noise level, however many rounds."""
    if not math.isfinite(nm) or nm <= 0:
        return nm
    scale = 10.0 ** (math.floor(math.log10(nm)) - 7)
    return math.floor(nm / scale * (1 - 1e-12)) * scale


def compose(gaussian: dict, pure: float, delta: float) -> float:
    """ε at ``delta`` of Gaussian releases ``{σ/Δ: count}`` composed (PLD) plus pure ε (∞ on any failure)."""
    counts = {float(k): int(c) for k, c in gaussian.items() if int(c) > 0}
    eps = 0.0
    if counts:
        if any(not (m > 0) for m in counts):
            return math.inf
        parts = [dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(m), c) if c > 1
                 else dp_accounting.GaussianDpEvent(m) for m, c in sorted(counts.items())]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                acc = _fresh("pld", min(counts))
                acc.compose(parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts))
                eps = float(acc.get_epsilon(delta))
        except Exception:  # noqa: BLE001 - a failing accountant is ε = ∞ (refused), never a guess
            return math.inf
    total = eps + float(pure)
    return total if math.isfinite(total) and total >= 0 else math.inf


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _num(x: float):
    return x if math.isfinite(x) else "inf"


_add = add_counts


def run_epsilon(run: dict, delta: float) -> float:
    """The composed ε at ``delta`` of what one run charged (on its own)."""
    return compose(run["charged"]["gaussian"], run["charged"]["pure_epsilon"], delta)


def released(run: dict) -> bool:
    return int(run.get("charged", {}).get("releases", 0)) > 0


class PartyBudget:
    """The party's own ledger and budget (``max_epsilon`` at ``delta``), independent of the coordinator.

    ``ledger`` (a store URL) and ``key`` (the operator's key file): the organisation's store; None: ``$DPADMM_LEDGER``
    and ``$DPADMM_LEDGER_KEY`` (the Python API's default, as the CLI's), and without them the budget is refused — a
    budget is never kept per folder. ``store``: an open :class:`LedgerStore` to use instead. ``data`` (the party's
    ``{key: file}``) and ``data_set`` (the operator's name for it) decide which budget in the store is this party's.
    """

    def __init__(self, out, party: str, max_epsilon: float, delta: float, *, ledger=None, key=None, data=None,
                 data_set: str | None = None, store: LedgerStore | None = None, identity=None):
        self.party = party
        self.max_epsilon = float(max_epsilon)
        self.delta = float(delta)
        self.out = Path(out)
        self.ds = identity if identity is not None else data_set_id(party, data or {}, data_set)
        self.data_set = self.ds.key
        self._own_store = store is None
        self.store = store if store is not None else LedgerStore(*configured(ledger, key), party=party)
        self.tampered: str | None = None
        self.holder = os.urandom(8).hex()
        self._held = self.store.hold(self.holder)
        self._eps_cache: tuple | None = None
        self.run: dict | None = None  # the open run's record (also in ledger["runs"])
        self._keys: list = []
        self.ledger, self._at = empty_ledger(party), (0, "")
        try:
            with self._tx():
                seen = self.ledger["data_set"]
                if not set(self.ds.seen_as) <= set(seen["seen_as"]) or self.ds.digest not in seen["digests"]:
                    self._append("seen", {"seen_as": list(self.ds.seen_as), "digest": self.ds.digest, "party": party,
                                          "at": _now()})
        except PolicyRefusal:  # at start: the server does not start (one line, exit code 2)
            self.close()
            raise LedgerTampered(self.tampered) from None

    @property
    def where(self) -> str:
        """The ledger, as messages name it (never a local path)."""
        return f"data set {self.data_set[:24]}…" if len(self.data_set) > 24 else f"data set {self.data_set}"

    # ------------------------------------------------------------------ persistence
    @contextlib.contextmanager
    def _tx(self, *, whole: bool = False):
        """One transaction on the store, with the rows other processes added since our last read folded in (all of
        the data set's rows re-read and re-verified with ``whole``). A tampered store refuses every release from
        then on (one line naming what was found)."""
        if self.tampered:
            raise PolicyRefusal(self.tampered, "FAILED_PRECONDITION")
        try:
            with self.store.tx():
                if whole:
                    self.ledger, self._at = empty_ledger(self.party), (0, "")
                    self.store.check_anchor(self.store.head()[0])
                new = self.store.entries(self.data_set, self._at)
                fold(self.ledger, new)
                if new:
                    self._at = new[-1][0], new[-1][3]
                if self.run is not None:  # the fresh record of the open run (its charges are all in the store)
                    self.run = self.find_run(self.run["run"]) or self.run
                yield
        except LedgerTampered as exc:
            self.tampered = str(exc)
            raise PolicyRefusal(self.tampered, "FAILED_PRECONDITION") from None

    def _append(self, kind: str, body: dict) -> None:
        """One row of this data set's chain (inside :meth:`_tx`), folded into the account as it is written."""
        ds_seq, mac = self.store.append(self.data_set, kind, body, self._at)
        fold(self.ledger, [(ds_seq, kind, body, mac)])
        self._at = ds_seq, mac

    def _relation(self):
        """The relation this ledger's guarantee is under: that of runs that released or may still release."""
        rels = {r.get("relation") for r in self.ledger["runs"]
                if released(r) or (r.get("open") and self.store.alive(r.get("holder")))}
        rels.discard(None)
        return next(iter(rels)) if len(rels) == 1 else (sorted(rels)[0] if rels else None)

    def _reserved(self) -> tuple[dict, float]:
        """What the open runs of live processes may still charge (their price less their charges)."""
        g: dict = {}
        pure = 0.0
        for r in self.ledger["runs"]:
            if not r.get("open"):
                continue
            if not self.store.alive(r.get("holder")):
                r["open"] = False  # its process is gone (killed): its charges stay, its reservation goes
                r.setdefault("closed", _now())
                continue
            rest = _add(dict(r["priced"]["gaussian"]), r["charged"]["gaussian"], -1)
            _add(g, {k: max(int(v), 0) for k, v in rest.items()})
            pure += max(float(r["priced"]["pure_epsilon"]) - float(r["charged"]["pure_epsilon"]), 0.0)
        return g, pure

    # ------------------------------------------------------------------ accounting
    def spent_in_memory(self) -> float:
        """The composed ε at ``delta`` of the ledger as last read (cached between changes)."""
        key = (tuple(sorted((k, int(v)) for k, v in self.ledger["gaussian"].items())),
               float(self.ledger["pure_epsilon"]))
        if self._eps_cache is None or self._eps_cache[0] != key:
            self._eps_cache = (key, compose(self.ledger["gaussian"], self.ledger["pure_epsilon"], self.delta))
        return self._eps_cache[1]

    @property
    def spent(self) -> float:
        """The composed ε at ``delta`` of every release charged on this data set so far, by any process."""
        with self._tx():
            pass
        return self.spent_in_memory()

    def epsilon(self) -> float:
        return self.spent

    def open_run(self, run_id: str, protocol: str, price: RunPrice, rounds: int, by: str = "") -> dict:
        """Price a declared run against the remaining budget (what every process charged, plus what the open
        runs of live processes may still charge); record it (or raise :class:`PolicyRefusal`)."""
        with self._tx(whole=True):  # every row of the data set re-verified at each Setup
            if self.run is not None and self.run.get("open"):  # this process's previous run is over
                self._append("close", {"run": self.run["run"], "closed": _now()})
            self.run = None
            try:
                return self._open(run_id, protocol, price, rounds, by)
            except PolicyRefusal as exc:  # refused: the transaction still commits (the previous run's close)
                refusal = exc
        raise refusal

    def _fix(self, before, gaussian, price, rounds, res_g, res_pure) -> str:
        return refusal_fix(before=before, cap=self.max_epsilon, spent_gaussian=_add(dict(self.ledger["gaussian"]), res_g),
                           spent_pure=float(self.ledger["pure_epsilon"]) + res_pure, run_gaussian=gaussian,
                           run_pure=float(price.pure_epsilon), rounds=rounds,
                           compose=lambda g, pure: compose(g, pure, self.delta))

    def _open(self, run_id: str, protocol: str, price: RunPrice, rounds: int, by: str) -> dict:
        before = self.spent_in_memory()
        relation = price.relation
        held = self._relation()
        if held not in (None, relation):
            raise PolicyRefusal(
                f"party {self.party!r} refused the run before releasing anything: its ledger ({self.where}) holds "
                f"releases under the relation {held!r}, this run is under {relation!r} (a separate guarantee: serve "
                "it under another declared data set, --data-set NAME)",
                budget=dict(self._status(), decision="refused"))
        gaussian = {repr(floor_multiplier(float(m))): int(c) for m, c in price.gaussian.items() if int(c) > 0}
        res_g, res_pure = self._reserved()
        total_g = _add(_add(dict(self.ledger["gaussian"]), res_g), gaussian)
        after = compose(total_g, float(self.ledger["pure_epsilon"]) + res_pure + float(price.pure_epsilon),
                        self.delta)
        reserved = bool(res_g) or res_pure > 0
        decision = {"decision": "refused" if after > self.max_epsilon else "priced", "epsilon_before": _num(before),
                    "epsilon_if_run_completes": _num(after), "max_epsilon": self.max_epsilon, "delta": self.delta,
                    "declared_rounds": int(rounds), "priced_releases": {**gaussian, "pure_epsilon": price.pure_epsilon},
                    "ledger": self.where}
        if reserved:
            decision["reserved_by_open_runs"] = {**res_g, "pure_epsilon": res_pure}
        if after > self.max_epsilon:
            raise PolicyRefusal(
                f"party {self.party!r} refused the run at Setup, before releasing anything: its {rounds} declared "
                f"round{'s' if int(rounds) != 1 else ''} would bring its spend to ε = {after:.4g} at δ = {self.delta:g}, above its operator's cap "
                f"--max-epsilon {self.max_epsilon:g} (spent before this run: ε = {before:.4g}"
                + (", with what runs in progress on this data set may still spend" if reserved else "")
                + f"; ledger of {self.where}); {self._fix(before, gaussian, price, rounds, res_g, res_pure)}",
                budget=decision)
        self._append("open", {"run": run_id, "protocol": protocol, "party": self.party, "out": str(self.out),
                              "started": _now(), "declared_rounds": int(rounds), "relation": relation, "by": by,
                              "delta": self.delta,
                              "priced": {"gaussian": gaussian, "pure_epsilon": float(price.pure_epsilon),
                                         "epsilon_if_completed": _num(after)}, "holder": self.holder})
        self.run = self.find_run(run_id)
        # the declared multipliers, largest first, for the per-round check
        self._keys = sorted(((float(k), k) for k in gaussian), reverse=True)
        return decision

    def charge(self, events, *, private_step: bool, round_: int) -> dict:
        """Check one round's ``events`` against the open run's declaration and record them (O(1) in the
        ledger's size); raises :class:`PolicyRefusal` — the reply is then not sent — if the round departs."""
        run = self.run
        if run is None:
            raise PolicyRefusal(f"party {self.party!r} refused round {round_ + 1}: no run was priced at Setup",
                                "FAILED_PRECONDITION")
        priced, charged = run["priced"], run["charged"]
        g: dict[str, int] = {}
        pure, n_pure, reasons = 0.0, 0, []
        events = list(events)
        if private_step and not events:
            reasons.append("the step released its message without a privacy event (an unaccounted release)")
        for e in events:
            rel = getattr(getattr(e, "relation", None), "key", None)
            if rel is not None and rel != run["relation"]:
                reasons.append(f"a release under the relation {rel!r}, not the declared {run['relation']!r}")
            if isinstance(e, GaussianRelease):
                sens, sigma = float(e.sensitivity), float(e.sigma)
                if e.mechanism != "gaussian":
                    reasons.append(f"a {e.mechanism!r} release is not differentially private")
                elif not (0 <= sens < math.inf and 0 <= sigma < math.inf):
                    reasons.append(f"a release with sensitivity {sens} and σ {sigma} cannot be accounted")
                elif sens > 0:
                    nm = sigma / sens
                    key = next((k for v, k in self._keys if v <= nm * (1 + _REL_TOL)
                                and int(charged["gaussian"].get(k, 0)) + g.get(k, 0) < int(priced["gaussian"][k])),
                               None)
                    if key is None:
                        reasons.append(f"a release with σ/Δ = {nm:.4g} beyond the declaration (priced at Setup: "
                                       f"{priced['gaussian']} releases by σ/Δ, "
                                       f"{int(sum(charged['gaussian'].values()))} made)")
                    else:
                        g[key] = g.get(key, 0) + 1
            elif isinstance(e, PureDPRelease):
                eps = float(e.epsilon)
                if not (0 <= eps < math.inf):
                    reasons.append(f"a pure-DP release with ε = {eps} cannot be accounted")
                else:
                    pure += eps
                    n_pure += 1
            else:
                reasons.append(f"an unknown privacy event {type(e).__name__} cannot be accounted")
        if pure and float(charged["pure_epsilon"]) + pure > float(priced["pure_epsilon"]) * (1 + _REL_TOL) + 1e-12:
            reasons.append(f"pure ε {float(charged['pure_epsilon']) + pure:.4g} beyond the {priced['pure_epsilon']:.4g} "
                           "priced at Setup")
        if reasons:
            raise PolicyRefusal(
                f"party {self.party!r} refused round {round_ + 1} and sent nothing: the coordinator departed from the run "
                f"it declared at Setup: " + "; ".join(dict.fromkeys(reasons)),
                budget={"decision": "refused", "round": round_ + 1, "run_priced_epsilon": priced["epsilon_if_completed"],
                        "max_epsilon": self.max_epsilon, "delta": self.delta, "ledger": self.where})
        line = {"run": run["run"], "round": int(round_), "g": g}
        if pure:
            line.update(pure=pure, n_pure=n_pure)
        with self._tx():  # a row of the store, committed before the reply leaves the party
            self._append("charge", line)
        return {"decision": "allowed", "round": round_ + 1, "releases": len(events),
                "run_releases": int(run["charged"]["releases"]), "run_priced_epsilon": priced["epsilon_if_completed"],
                "max_epsilon": self.max_epsilon, "delta": self.delta}

    def close_run(self) -> None:
        """The open run is over (Finish, a new Setup): fold the journal into the JSON ledger."""
        if self.run is not None:
            with self._tx():
                if self.run.get("open"):
                    self._append("close", {"run": self.run["run"], "closed": _now()})
                self.run = None

    def find_run(self, run_id: str) -> dict | None:
        return next((r for r in reversed(self.ledger["runs"]) if r.get("run") == run_id), None)

    def _status(self) -> dict:
        return {"epsilon_spent": _num(self.spent_in_memory()), "max_epsilon": self.max_epsilon, "delta": self.delta,
                "releases": int(self.ledger["releases"]), "runs": len(self.ledger["runs"]), "ledger": self.where}

    def status(self) -> dict:
        with self._tx():
            pass
        return self._status()

    def snapshot(self) -> dict:
        """The data set's account as last read: totals, runs, PSI queries (a copy)."""
        with self._tx():
            pass
        self.ledger["relation"] = self._relation()
        return json.loads(json.dumps(dict(self.ledger, epsilon_spent=_num(self.spent_in_memory()), delta=self.delta)))

    def close(self) -> None:
        """The process stops: end its run, fold the journal, and let go of its liveness mark."""
        with contextlib.suppress(PolicyRefusal):  # a tampered store: nothing more is written to it
            self.close_run()
        if self._held is not None:
            with contextlib.suppress(Exception):  # noqa: BLE001 - a store gone while serving: nothing to let go of
                self.store.release(self._held, self.holder)
            self._held = None
        if self._own_store:
            self.store.close()


def released_since(run: dict, snapshot: dict, party: str, relation, after_round: int) -> list:
    """The releases ``run`` made after a checkpoint whose charged totals were ``snapshot``: what a
    resume releases *again* (as events, so the coordinator's report counts them as the ledger does)."""
    out = []
    g = _add(dict(run["charged"]["gaussian"]), snapshot.get("gaussian", {}), -1)
    r = after_round + 1
    for k, n in sorted(g.items()):
        for _ in range(max(int(n), 0)):
            out.append(GaussianRelease(party, r, 1.0, float(k), relation))
            r += 1
    pure = float(run["charged"]["pure_epsilon"]) - float(snapshot.get("pure_epsilon", 0.0))
    if pure > 0:
        out.append(PureDPRelease(party, after_round + 1, pure, relation))
    return out
