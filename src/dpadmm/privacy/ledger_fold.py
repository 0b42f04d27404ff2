"""A data set's account, folded from its rows in the ledger store (:mod:`dpadmm.privacy.ledger_store`).

The store keeps only events; every total here is computed from them, so no total can be edited on its own:

- ``seen`` — the data set was served under these file names, with this content digest;
- ``open`` — a run priced at Setup (its declaration, price, process and coordinator);
- ``charge`` — one round's releases (``g``: ``{σ/Δ: count}``, ``pure``: pure ε, ``n_pure``), recorded before the
  reply left the party;
- ``close`` — the run ended (Finish, a new Setup, the process stopping);
- ``psi`` — a PSI query or a clear-join check (its time, its number of ids, whether it was refused);
- ``adopt`` — a ledger of the former files layout imported (``dpadmm party ledger --import-dir``): its totals and
  runs, closed.
"""

from __future__ import annotations


def empty_ledger(party: str = "") -> dict:
    return {"party": party, "relation": None, "releases": 0, "gaussian": {}, "pure_epsilon": 0.0, "seq": 0,
            "runs": [], "psi": [], "data_set": {"seen_as": [], "digests": []}}


def add_counts(dst: dict, src: dict, sign: int = 1) -> dict:
    for k, v in src.items():
        dst[k] = int(dst.get(k, 0)) + sign * int(v)
    return dst


def apply_line(led: dict, run: dict, j: dict) -> None:
    """Fold one charged round into the totals and its run's record."""
    g = j.get("g", {})
    add_counts(led["gaussian"], g)
    add_counts(run["charged"]["gaussian"], g)
    n = int(sum(g.values())) + int(j.get("n_pure", 0))
    led["releases"] += n
    run["charged"]["releases"] += n
    led["pure_epsilon"] = float(led["pure_epsilon"]) + float(j.get("pure", 0.0))
    run["charged"]["pure_epsilon"] = float(run["charged"]["pure_epsilon"]) + float(j.get("pure", 0.0))
    run["last_round"] = max(int(run.get("last_round", 0)), int(j["round"]) + 1)


def fold(led: dict, entries) -> dict:
    """``led`` with the rows ``entries`` — ``(ds_seq, kind, body, mac)`` each, verified — folded in."""
    runs = {r["run"]: r for r in led["runs"]}
    for ds_seq, kind, body, _ in entries:
        if kind == "seen":
            ds = led["data_set"]
            ds["seen_as"] = sorted(set(ds["seen_as"]) | set(body.get("seen_as", [])))
            ds["digests"] = sorted(set(ds["digests"]) | {body.get("digest")} - {None})
        elif kind == "open":
            run = dict(body, charged={"gaussian": {}, "pure_epsilon": 0.0, "releases": 0}, last_round=0, open=True)
            led["runs"].append(run)
            runs[run["run"]] = run
        elif kind == "charge":
            apply_line(led, runs[body["run"]], body)
        elif kind == "close":
            if body["run"] in runs:
                runs[body["run"]].update(open=False, closed=body.get("closed"))
        elif kind == "psi":
            led["psi"].append(body)
        elif kind == "adopt":
            add_counts(led["gaussian"], body["gaussian"])
            led["pure_epsilon"] = float(led["pure_epsilon"]) + float(body["pure_epsilon"])
            led["releases"] += int(body["releases"])
            for r in body["runs"]:
                run = dict(r, open=False, adopted_from=body["from"])
                led["runs"].append(run)
                runs[run["run"]] = run
        led["seq"] = int(ds_seq)
    return led
