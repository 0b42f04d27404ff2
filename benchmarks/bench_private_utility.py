"""Private utility on real data, in its own units: every algorithm, private vs the baselines a user has.

One command runs every algorithm's module under ``benchmarks/private_utility/`` (``vertical``,
``vertical_raw``, ``consensus``, ``functional``; each exposes ``DATASETS`` and ``run(quick=, seeds=, epsilons=,
datasets=, progress=) -> list[dict]``) and summarises their rows:

* the raw rows (one per dataset × side × ε × seed) go to ``results/private_utility.csv``;
* the summary (mean over seeds per dataset × side × ε) is printed as a Markdown table and written to
  ``results/private_utility.md`` (paste it into BENCHMARKS.md);
* the acceptance checks of issue 18 are evaluated row by row and printed (and written to
  ``results/private_utility_checks.json``):

  - ``le_trivial``: private ≤ trivial predictor (every row; a tolerance of 0 — the library's fallbacks
    exist to make this hold);
  - ``le_label_party_alone`` (vertical label sides): private ≤ label party alone;
  - ``near_central_dp`` (vertical, labels side): private ≤ 1.10 × min(label party alone, centralised
    label-DP reference) — the bar is the better of the two. Not applied where the features are private
    too (``features+labels``, ``features+labels-experts``): the centralised reference protects the
    labels only, so it is no bar for a model that also protects every feature (those sides keep
    ``le_label_party_alone``);
  - ``in_range`` (functional): every private prediction inside the public response range;
  - ``le_label_party_alone`` (``vertical_raw``, issue 27: raw party files, only the privacy flags): the experts at
    ε, and with labels released too, never worse than the label party alone, on every seed.

Usage::

    python benchmarks/bench_private_utility.py            # full: eps 0.5 1 2 5, 3 seeds
    python benchmarks/bench_private_utility.py --quick    # each module's quick subset (~10 min in all)
    python benchmarks/bench_private_utility.py --only vertical --seeds 5 --epsilons 1

Lower is better for every metric (log loss, pinball loss).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODULES = ("vertical", "vertical_raw", "consensus", "functional")
TOLERANCE_CENTRAL = 1.10


def _load(name: str):
    sys.path.insert(0, str(HERE))
    try:
        return importlib.import_module(f"private_utility.{name}")
    finally:
        sys.path.pop(0)


def _num(v):
    return v if isinstance(v, (int, float)) and v is not None and math.isfinite(v) else None


def summarise(rows: list[dict]) -> list[dict]:
    """Mean over seeds per (algorithm, dataset, side, epsilon)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["algorithm"], r["dataset"], r["side"], r.get("epsilon")), []).append(r)
    out = []
    for (alg, ds, side, eps), rs in groups.items():
        s = {"algorithm": alg, "dataset": ds, "side": side, "epsilon": eps, "seeds": len(rs),
             "n_train": rs[0].get("n_train"), "metric": rs[0].get("metric")}
        for key in ("private", "non_private", "trivial", "label_party_alone", "central_dp", "in_range"):
            vals = [_num(r.get(key)) for r in rs]
            vals = [v for v in vals if v is not None]
            s[key] = sum(vals) / len(vals) if vals else None
            if key == "private" and vals:
                s["private_worst"] = max(vals)
        base = [v for v in (s["trivial"], s["label_party_alone"]) if v is not None]
        if base and s["private"] is not None and s["non_private"] is not None:
            b = min(base)
            gap = b - s["non_private"]
            s["gap_closed"] = (b - s["private"]) / gap if gap > 0 else None
        else:
            s["gap_closed"] = None
        s["central_dp_kind"] = rs[0].get("central_dp_kind")
        out.append(s)
    out.sort(key=lambda s: (s["algorithm"], s["dataset"], s["side"], s["epsilon"] or 0))
    return out


def checks(rows: list[dict]) -> list[dict]:
    """Issue 18's per-row acceptance checks; one record per failed check (empty list: all met)."""
    failed = []
    for r in rows:
        p = _num(r.get("private"))
        if p is None or r.get("side") == "non-private":
            continue
        where = f'{r["algorithm"]}/{r["dataset"]}/{r["side"]}/eps={r.get("epsilon")}/seed={r.get("seed")}'
        t = _num(r.get("trivial"))
        if t is not None and p > t:
            failed.append({"check": "le_trivial", "where": where, "private": p, "bar": t})
        lpa = _num(r.get("label_party_alone"))
        if r["algorithm"] == "vertical-raw" and lpa is not None and p > lpa:  # issue 27: raw party files, only ε
            failed.append({"check": "le_label_party_alone", "where": where, "private": p, "bar": lpa})
        if r["algorithm"] == "vertical" and "label" in r["side"] and lpa is not None:
            if p > lpa:
                failed.append({"check": "le_label_party_alone", "where": where, "private": p, "bar": lpa})
            cdp = _num(r.get("central_dp"))
            bar = min(v for v in (lpa, cdp) if v is not None)
            if r["side"] == "labels" and p > TOLERANCE_CENTRAL * bar:
                failed.append({"check": "near_central_dp", "where": where, "private": p,
                               "bar": TOLERANCE_CENTRAL * bar})
        inr = _num(r.get("in_range"))
        if inr is not None and inr < 1.0:
            failed.append({"check": "in_range", "where": where, "private": inr, "bar": 1.0})
    return failed


def _fmt(v, nd=4):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if abs(v) < 1e4 else f"{v:.3g}"
    return str(v)


def markdown(summary: list[dict]) -> str:
    head = ("| algorithm | dataset | n | side | ε | private (mean / worst) | non-private | trivial "
            "| label party alone | central DP | gap closed |")
    lines = [head, "|" + "|".join(["---"] * 11) + "|"]
    for s in summary:
        lines.append("| " + " | ".join([
            s["algorithm"], s["dataset"], _fmt(s["n_train"]), s["side"], _fmt(s["epsilon"], 2),
            f'{_fmt(s["private"])} / {_fmt(s.get("private_worst"))}' if s["private"] is not None else "–",
            _fmt(s["non_private"]), _fmt(s["trivial"]), _fmt(s["label_party_alone"]),
            _fmt(s["central_dp"]),
            f'{100 * s["gap_closed"]:.0f}%' if s["gap_closed"] is not None else "–"]) + " |")
    kinds = sorted({(s["algorithm"], s["central_dp_kind"]) for s in summary if s["central_dp_kind"]})
    if kinds:
        lines.append("")
        lines += [f"- central DP reference ({a}): {k}" for a, k in kinds]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="each module's quick subset")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0])
    ap.add_argument("--only", choices=MODULES, nargs="+", default=list(MODULES))
    ap.add_argument("--datasets", nargs="+", default=None, help="restrict to these dataset names")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="vertical_raw: also these training sizes (subsamples of each table; issue 38)")
    a = ap.parse_args(argv)
    if a.seeds < 1:
        ap.error("--seeds must be at least 1")
    if any(not (e > 0 and math.isfinite(e)) for e in a.epsilons):
        ap.error("--epsilons must be positive and finite")
    rows, timing = [], {}
    for name in a.only:
        mod = _load(name)
        ds = None if a.datasets is None else [d for d in a.datasets if d in mod.DATASETS]
        if ds == []:
            continue
        t0 = time.perf_counter()
        extra = {"sizes": a.sizes} if a.sizes and name == "vertical_raw" else {}
        got = mod.run(quick=a.quick, seeds=a.seeds, epsilons=a.epsilons, datasets=ds, **extra,
                      progress=lambda m, _n=name: print(f"[{_n}] {m}", flush=True))
        timing[name] = time.perf_counter() - t0
        rows += got
        print(f"[{name}] {len(got)} rows in {timing[name]:.0f} s", flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    suffix = "_quick" if a.quick else ""
    pd.DataFrame(rows).to_csv(a.out / f"private_utility{suffix}.csv", index=False)
    summary = summarise(rows)
    table = markdown(summary)
    (a.out / f"private_utility{suffix}.md").write_text(table + "\n")
    failed = checks(rows)
    (a.out / f"private_utility{suffix}_checks.json").write_text(
        json.dumps({"failed": failed, "seconds": timing, "rows": len(rows)}, indent=1))
    print(table)
    print(f"\nchecks: {len(failed)} failed of the per-row acceptance checks"
          + "".join(f"\n  {f['check']}: {f['where']} private={f['private']:.4g} bar={f['bar']:.4g}"
                    for f in failed[:40]))
    print("seconds per module: " + ", ".join(f"{k} {v:.0f}" for k, v in timing.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
