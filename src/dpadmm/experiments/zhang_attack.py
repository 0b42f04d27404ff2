"""[Zhang, §6.2, App. E]: the KKT reconstruction attack on M-ADMM over seeds — its table, JSON and figure
(one seed's table: :func:`dpadmm.workflows.kkt_attack.attack_table`, ``dpadmm attack kkt``)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from .._jsonio import write_json
from ..workflows.kkt_attack import attack_table, plot_attack
from .registry import register


@register("zhang-attack")
def attack(out_dir: Path, *, quick: bool, reps: int, seed: int) -> dict:
    """[Zhang, §6.2, App. E]: KKT reconstruction with η public / private, with / without PP noise."""
    R = reps if reps > 0 else (1 if quick else 5)
    all_rows = []
    for r in range(R):
        for row in attack_table(samples=1000 if quick else 2000, iterations=30 if quick else 100, seed=seed + r):
            all_rows.append(dict(row, seed=seed + r))
    with open(out_dir / "attack.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(all_rows[0]))
        w.writeheader()
        w.writerows(all_rows)
    write_json(out_dir / "attack.json", all_rows)
    scen = list(dict.fromkeys(r["scenario"] for r in all_rows))
    cos = [np.mean([r["cosine"] for r in all_rows if r["scenario"] == s]) for s in scen]
    plot_attack(out_dir / "attack.png", all_rows, scen, R, samples=1000 if quick else 2000,
                 iterations=30 if quick else 100)
    return {s: round(float(c), 4) for s, c in zip(scen, cos)}
