"""What an operator reads of its store: per data set, what was spent and by which runs (``dpadmm party ledger``)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from ..exceptions import DataFileError
from .dataset_identity import data_set_id
from .ledger_fold import apply_line, empty_ledger, fold
from .ledger_store import LedgerStore
from .party_ledger import compose, run_epsilon


def _num(x: float):
    return x if math.isfinite(x) else "inf"


def account(store: LedgerStore, data_set: str, delta: float | None = None) -> dict:
    """One data set's account in ``store`` (every row verified), its ε at ``delta`` (default: the δ of its last run)
    and each run's ε."""
    with store.tx():
        led = fold(empty_ledger(), store.entries(data_set))
    delta = float(delta if delta is not None else next((r["delta"] for r in reversed(led["runs"]) if r.get("delta")),
                                                       1e-5))
    runs = [{"run": r.get("run"), "protocol": r.get("protocol"), "party": r.get("party"), "by": r.get("by"),
             "out": r.get("out"), "started": r.get("started"), "closed": r.get("closed"),
             "open": bool(r.get("open")) and store.alive(r.get("holder")), "releases": int(r["charged"]["releases"]),
             "epsilon": _num(run_epsilon(r, delta)), "declared_rounds": r.get("declared_rounds")} for r in led["runs"]]
    return {"ledger": store.where, "data_set": data_set, "seen_as": led["data_set"]["seen_as"],
            "digests": led["data_set"]["digests"], "delta": delta,
            "epsilon_spent": _num(compose(led["gaussian"], led["pure_epsilon"], delta)),
            "releases": int(led["releases"]), "gaussian": led["gaussian"], "pure_epsilon": led["pure_epsilon"],
            "psi_queries": len(led["psi"]), "runs": runs}


def list_ledgers(url: str, key, *, data=None, data_set: str | None = None, delta: float | None = None) -> list[dict]:
    """Every data set's account in the store ``url`` (verified with the key file ``key``), or only that of the file
    ``data`` (its content identity) or of the declared ``data_set`` name."""
    store = LedgerStore(url, key, create=False)
    try:
        keys = store.data_sets()
        if data is not None or data_set is not None:
            want = data_set_id("", {} if data is None else {"train": data}, data_set).key
            keys = [k for k in keys if k == want]
        return [account(store, k, delta) for k in keys]
    finally:
        store.close()


def import_files_ledger(url: str, key, data, directory, *, data_set: str | None = None) -> dict:
    """Import the ledger that the former files layout kept for the file ``data`` (``directory``: its ledger
    directory, ``LEDGER_DIR/<sha256 of the file's bytes>/``, or a party's ``--out``) into the store, under the data
    set the file is now (its rows, or the declared ``data_set``): its totals and runs, with its journal folded in.
    Once per directory; an unreadable ledger is refused (one line)."""
    directory = Path(directory)
    sha = hashlib.sha256(Path(data).read_bytes()).hexdigest()
    for cand in (directory / sha, directory):
        if (cand / "privacy_ledger.json").is_file():
            break
    else:
        raise DataFileError(f"no privacy_ledger.json for {Path(data).name} in {directory} (nor in {directory / sha})")
    try:
        led = json.loads((cand / "privacy_ledger.json").read_text())
        runs = {r["run"]: r for r in led["runs"]}
        journal = cand / "privacy_ledger.journal"
        for line in (journal.read_text().splitlines() if journal.is_file() else []):
            j = json.loads(line) if line.strip() else None
            if j is not None and int(j["seq"]) > int(led["seq"]):
                apply_line(led, runs[j["run"]], j)
        body = {"from": str(cand.resolve()), "gaussian": {str(k): int(v) for k, v in led["gaussian"].items()},
                "pure_epsilon": float(led["pure_epsilon"]), "releases": int(led["releases"]),
                "runs": [{k: r.get(k) for k in ("run", "protocol", "party", "out", "started", "closed", "relation",
                                                "declared_rounds", "priced", "charged", "delta")} for r in led["runs"]]}
    except (ValueError, KeyError, TypeError) as exc:
        raise DataFileError(f"the former ledger in {cand} is unreadable ({type(exc).__name__}); restore it") from None
    store = LedgerStore(url, key)
    try:
        ds = data_set_id("", {"train": data}, data_set).key
        with store.tx():
            rows = store.entries(ds)
            if any(kind == "adopt" and b.get("from") == body["from"] for _, kind, b, _ in rows):
                raise DataFileError(f"the former ledger in {cand} was imported already")
            store.append(ds, "adopt", body, (rows[-1][0], rows[-1][3]) if rows else (0, ""))
        return account(store, ds)
    finally:
        store.close()


def render_ledger(led: dict) -> str:
    """The account as lines: the data set and its total, then one line per run."""
    seen = ", ".join(led.get("seen_as") or [])
    eps = led["epsilon_spent"]
    lines = [f"data set {led['data_set'][:40]} ({seen}): ε = {eps if isinstance(eps, str) else format(eps, '.4g')} at "
             f"δ = {led['delta']:g} over {led['releases']} releases, {len(led['runs'])} runs, {led['psi_queries']} PSI "
             f"queries (store {led['ledger']})"]
    for r in led["runs"]:
        e = r["epsilon"]
        state = "in progress" if r["open"] else "ended"
        lines.append(f"  {r['run']}  {r['protocol']}  party {r['party']}  {r['releases']} releases  ε = "
                     f"{e if isinstance(e, str) else format(e, '.4g')} alone  {state}  (--out {r['out']})")
    return "\n".join(lines)
