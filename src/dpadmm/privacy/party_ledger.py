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

Files (in the party's ``--out``): ``privacy_ledger.json`` (totals and one record per run: what was
priced, what was charged, its last round) rewritten atomically at Setup, and
``privacy_ledger.journal`` — one line appended per charged round *before* the reply leaves the party
(so a crash never loses a release; the journal is folded into the JSON file at the next start or
Setup, Finish and when the party stops). Deleting them resets the budget: they are the only record of what was spent on this
party's data.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import tempfile
import warnings
from pathlib import Path

from .events import GaussianRelease, PureDPRelease
from .policy import PolicyRefusal, RunPrice

LEDGER_NAME = "privacy_ledger.json"
JOURNAL_NAME = "privacy_ledger.journal"
LEDGER_FORMAT = "dpadmm-party-ledger/2"
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
    import dp_accounting

    from .accountants.gaussian import _fresh

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


def _add(dst: dict, src: dict, sign: int = 1) -> dict:
    for k, v in src.items():
        dst[k] = int(dst.get(k, 0)) + sign * int(v)
    return dst


class PartyBudget:
    """The party's own ledger and budget (``max_epsilon`` at ``delta``), independent of the coordinator."""

    def __init__(self, out, party: str, max_epsilon: float, delta: float):
        self.party = party
        self.max_epsilon = float(max_epsilon)
        self.delta = float(delta)
        self.path = Path(out) / LEDGER_NAME
        self.journal_path = Path(out) / JOURNAL_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ledger = self._load()
        self._eps_cache: tuple[int, float] | None = None
        self.run: dict | None = None  # the open run's record (also in ledger["runs"])
        self._journal = None
        self._keys: list = []
        self._compact()

    # ------------------------------------------------------------------ persistence
    def _empty(self) -> dict:
        return {"format": LEDGER_FORMAT, "party": self.party, "relation": None, "releases": 0, "gaussian": {},
                "pure_epsilon": 0.0, "seq": 0, "runs": []}

    def _damaged(self, what) -> Exception:
        from ..exceptions import DataFileError

        return DataFileError(f"party {self.party!r}: its privacy {what} is unreadable; it is the only record of the "
                             "budget spent on this party's data — restore it (deleting it resets the budget).")

    def _load(self) -> dict:
        led = self._empty()
        if self.path.is_file():
            try:
                led = json.loads(self.path.read_text())
                ok = (isinstance(led, dict) and led.get("format") == LEDGER_FORMAT
                      and all(float(k) > 0 and int(v) >= 0 for k, v in led["gaussian"].items())
                      and float(led["pure_epsilon"]) >= 0 and isinstance(led["runs"], list))
            except (ValueError, TypeError, KeyError, OSError):
                ok = False
            if not ok:
                raise self._damaged(f"ledger {self.path}")
        if self.journal_path.is_file():  # replay the rounds charged since the last compaction
            runs = {r["run"]: r for r in led["runs"]}
            try:
                for line in self.journal_path.read_text().splitlines():
                    if not line.strip():
                        continue
                    j = json.loads(line)
                    if int(j["seq"]) <= int(led["seq"]):
                        continue
                    self._apply(led, runs[j["run"]], j)
            except (ValueError, TypeError, KeyError) as exc:
                raise self._damaged(f"journal {self.journal_path} ({type(exc).__name__})") from None
        return led

    @staticmethod
    def _apply(led: dict, run: dict, j: dict) -> None:
        """Fold one journal line (one charged round) into the totals and its run's record."""
        g = j.get("g", {})
        _add(led["gaussian"], g)
        _add(run["charged"]["gaussian"], g)
        n = int(sum(g.values())) + int(j.get("n_pure", 0))
        led["releases"] += n
        run["charged"]["releases"] += n
        led["pure_epsilon"] = float(led["pure_epsilon"]) + float(j.get("pure", 0.0))
        run["charged"]["pure_epsilon"] = float(run["charged"]["pure_epsilon"]) + float(j.get("pure", 0.0))
        run["last_round"] = max(int(run.get("last_round", 0)), int(j["round"]) + 1)
        led["seq"] = int(j["seq"])

    def _compact(self) -> None:
        """Rewrite the JSON ledger with everything charged and empty the journal (at start and at Setup)."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        led = dict(self.ledger, updated=_now(), delta=self.delta, epsilon_spent=_num(self.spent))
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as fh:
            json.dump(led, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, self.path)
        if self.journal_path.exists():
            self.journal_path.unlink()  # every line is in the JSON file now (its seq is recorded there)

    # ------------------------------------------------------------------ accounting
    @property
    def spent(self) -> float:
        """The composed ε at ``delta`` of every release charged so far (cached between changes)."""
        key = int(self.ledger["seq"])
        if self._eps_cache is None or self._eps_cache[0] != key:
            self._eps_cache = (key, compose(self.ledger["gaussian"], self.ledger["pure_epsilon"], self.delta))
        return self._eps_cache[1]

    def epsilon(self) -> float:
        return self.spent

    def open_run(self, run_id: str, protocol: str, price: RunPrice, rounds: int) -> dict:
        """Price a declared run against the remaining budget; record it (or raise :class:`PolicyRefusal`)."""
        self._compact()
        before = self.spent
        relation = price.relation
        if self.ledger["relation"] not in (None, relation):
            raise PolicyRefusal(
                f"party {self.party!r} refused the run before releasing anything: its ledger holds releases under the "
                f"relation {self.ledger['relation']!r}, this run is under {relation!r} (a separate guarantee: use "
                "another --out, or delete the ledger to reset the budget)",
                budget=dict(self.status(), decision="refused"))
        gaussian = {repr(floor_multiplier(float(m))): int(c) for m, c in price.gaussian.items() if int(c) > 0}
        total_g = _add(dict(self.ledger["gaussian"]), gaussian)
        after = compose(total_g, float(self.ledger["pure_epsilon"]) + float(price.pure_epsilon), self.delta)
        decision = {"decision": "refused" if after > self.max_epsilon else "priced", "epsilon_before": _num(before),
                    "epsilon_if_run_completes": _num(after), "max_epsilon": self.max_epsilon, "delta": self.delta,
                    "declared_rounds": int(rounds), "priced_releases": {**gaussian, "pure_epsilon": price.pure_epsilon},
                    "ledger": str(self.path)}
        if after > self.max_epsilon:
            raise PolicyRefusal(
                f"party {self.party!r} refused the run at Setup, before releasing anything: its {rounds} declared "
                f"rounds would bring its spend to ε = {after:.4g} at δ = {self.delta:g}, above its operator's cap "
                f"--max-epsilon {self.max_epsilon:g} (spent before this run: ε = {before:.4g}; ledger {self.path}); "
                "declare fewer rounds or more noise", budget=decision)
        self.run = {"run": run_id, "protocol": protocol, "started": _now(), "declared_rounds": int(rounds),
                    "relation": relation, "priced": {"gaussian": gaussian, "pure_epsilon": float(price.pure_epsilon),
                                                     "epsilon_if_completed": _num(after)},
                    "charged": {"gaussian": {}, "pure_epsilon": 0.0, "releases": 0}, "last_round": 0}
        self.ledger["runs"].append(self.run)
        self.ledger["relation"] = relation
        self._compact()
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
                        "max_epsilon": self.max_epsilon, "delta": self.delta, "ledger": str(self.path)})
        line = {"seq": int(self.ledger["seq"]) + 1, "run": run["run"], "round": int(round_), "g": g}
        if pure:
            line.update(pure=pure, n_pure=n_pure)
        if self._journal is None:
            self._journal = open(self.journal_path, "a", buffering=1)
        self._journal.write(json.dumps(line) + "\n")  # recorded before the reply leaves the party
        self._journal.flush()
        self._apply(self.ledger, run, line)
        return {"decision": "allowed", "round": round_ + 1, "releases": len(events),
                "run_releases": int(run["charged"]["releases"]), "run_priced_epsilon": priced["epsilon_if_completed"],
                "max_epsilon": self.max_epsilon, "delta": self.delta}

    def close_run(self) -> None:
        """The open run is over (Finish, a new Setup): fold its journal into the JSON ledger."""
        if self.run is not None:
            self.run = None
            self._compact()

    def find_run(self, run_id: str) -> dict | None:
        return next((r for r in reversed(self.ledger["runs"]) if r.get("run") == run_id), None)

    def status(self) -> dict:
        return {"epsilon_spent": _num(self.spent), "max_epsilon": self.max_epsilon, "delta": self.delta,
                "releases": int(self.ledger["releases"]), "runs": len(self.ledger["runs"]), "ledger": str(self.path)}

    def close(self) -> None:
        self.run = None
        self._compact()


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
