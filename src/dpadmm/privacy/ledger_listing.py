"""What an operator reads of its ledgers: per data set, what was spent and by which runs (``dpadmm party ledger``)."""

from __future__ import annotations

import math
from pathlib import Path

from .ledger_files import LEDGER_NAME, LedgerFiles, _sha256
from .party_ledger import compose, run_epsilon


def _num(x: float):
    return x if math.isfinite(x) else "inf"


def read_ledger(directory, delta: float | None = None, *, compact: bool = True) -> dict:
    """One ledger, with its journal folded in (and, with ``compact``, written back: the JSON file is then true
    whatever process was killed), its ε at ``delta`` (default: the δ its last writer used) and each run's ε."""
    files = LedgerFiles(directory)
    try:
        with files.locked():
            led = files.load({})
            if compact and files.journal_path.is_file():
                d = float(led.get("delta", delta or 1e-5))
                files.write(dict(led, epsilon_spent=_num(compose(led["gaussian"], led["pure_epsilon"], d))))
    finally:
        files.close()
    d = float(delta if delta is not None else led.get("delta", 1e-5))
    runs = [{"run": r.get("run"), "protocol": r.get("protocol"), "party": r.get("party", led.get("party")),
             "out": r.get("out"), "started": r.get("started"), "closed": r.get("closed"),
             "open": bool(r.get("open")), "releases": int(r["charged"]["releases"]),
             "epsilon": _num(run_epsilon(r, d)), "declared_rounds": r.get("declared_rounds")} for r in led["runs"]]
    return {"ledger": str(files.dir), "data_set": led.get("data_set", {}), "delta": d,
            "epsilon_spent": _num(compose(led["gaussian"], led["pure_epsilon"], d)),
            "releases": int(led["releases"]), "relation": led.get("relation"), "runs": runs}


def list_ledgers(ledger_dir, *, data=None, delta: float | None = None) -> list[dict]:
    """Every ledger under ``ledger_dir`` (one per data set), or only that of the file ``data``."""
    root = Path(ledger_dir)
    if data is not None:
        dirs = [root / _sha256(Path(data))]
    else:
        dirs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [read_ledger(d, delta) for d in dirs if (d / LEDGER_NAME).is_file()]


def render_ledger(led: dict) -> str:
    """The ledger as lines: the data set and its total, then one line per run."""
    ds = led.get("data_set") or {}
    name = f"data set sha256 {ds['sha256'][:16]}… ({', '.join(ds.get('seen_as', []))})" if ds else led["ledger"]
    eps = led["epsilon_spent"]
    lines = [f"{name}: ε = {eps if isinstance(eps, str) else format(eps, '.4g')} at δ = {led['delta']:g} over "
             f"{led['releases']} releases, {len(led['runs'])} runs (ledger {led['ledger']})"]
    for r in led["runs"]:
        e = r["epsilon"]
        state = "in progress" if r["open"] else "ended"
        lines.append(f"  {r['run']}  {r['protocol']}  party {r['party']}  {r['releases']} releases  ε = "
                     f"{e if isinstance(e, str) else format(e, '.4g')} alone  {state}  (--out {r['out']})")
    return "\n".join(lines)
