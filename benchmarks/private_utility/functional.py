"""Private utility of functional quantile regression [Zhou] on real curves in their own units (issue 18).

Rows per dataset × ε × seed (``side="curves"``, metric: test pinball loss at τ = 0.5, 20% held out):

* ``private``: ``FunctionalQuantileRegressor(total_epsilon=ε)`` with the library's defaults (B-spline basis,
  DP τ-quantile, accounted comparison that hands over the better of model and DP constant), 4 workers,
  the public response range ``y_range`` and curve radius ``curve_clip`` below (bounds a user states
  without looking at the data: physical or definitional limits of the quantity);
* ``non_private``: the same estimator without noise (pooled FPCA);
* ``trivial``: the training responses' τ-quantile for every curve;
* ``central_dp``: the centralised FDP analogue — the same private estimator with *one* worker holding the
  pooled curves, at the same ε (what a trusted curator running FDP-ADMM would get);
* ``in_range``: the share of private test predictions inside ``y_range``.

Datasets (no download): ``fertility`` (statsmodels, 192 countries), ``tecator`` (215 spectra, bundled),
``temperature`` (726 days, bundled), ``elnino`` (statsmodels: a year's 12 monthly Niño 1+2 sea
surface temperatures → next year's mean, 60 years). No real curve data set of ≥ 5,000 curves ships
with the installed packages; the large case is the simulation of [Zhou, §5] (``zhou-sim-25000``,
clearly not real data), and the largest real one is ``temperature``.

Standalone: ``python benchmarks/private_utility/functional.py --quick``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

try:
    from . import progress_line, standalone
except ImportError:  # run as a script: python benchmarks/private_utility/<module>.py
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from private_utility import progress_line, standalone

TAU = 0.5
WORKERS = 4
# public bounds: (y_range, curve_clip); curve_clip bounds the L2 norm on the [0, 1] grid, i.e. the largest
# absolute value a curve can take (fertility <= 10 births per woman, absorbance <= 6, temperature <= 110 F,
# sea surface temperature <= 35 C; the simulation's scores are N(0, k^-2): norm <= 5 with overwhelming odds)
BOUNDS = {
    "fertility": ((0.0, 10.0), 10.0),
    "tecator": ((0.0, 100.0), 6.0),
    "temperature": ((20.0, 110.0), 110.0),
    "elnino": ((15.0, 35.0), 35.0),
    "zhou-sim-6000": ((-15.0, 15.0), 5.0),
    "zhou-sim-25000": ((-15.0, 15.0), 5.0),
}
DATASETS = list(BOUNDS)
QUICK = ["fertility", "temperature", "zhou-sim-6000"]


def load(name: str):
    from dpadmm.data.functional import load_dataset, simulate_zhou

    if name.startswith("zhou-sim-"):
        return simulate_zhou(int(name.rsplit("-", 1)[1]), tau=TAU, random_state=0)
    return load_dataset(name)


def _pinball(y, p):
    from dpadmm.kernels.quantile import pinball_score

    return float(pinball_score(y, p, TAU))


def _fit(d, tr, **kw):
    from dpadmm import FunctionalQuantileRegressor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FunctionalQuantileRegressor(tau=TAU, **kw).fit(d.curves[tr], d.y[tr], grid=d.grid)


def run(*, quick: bool, seeds: int, epsilons: list[float], datasets: list[str] | None = None,
        progress=print) -> list[dict]:
    names = datasets or (QUICK if quick else DATASETS)
    if quick:
        seeds, epsilons = min(seeds, 2), [e for e in epsilons if e == 2.0] or [2.0]
    rows = []
    for name in names:
        d = load(name)
        (lo, hi), cx = BOUNDS[name]
        perm = np.random.default_rng(0).permutation(d.n)
        k = d.n // 5
        te, tr = perm[:k], perm[k:]
        trivial = _pinball(d.y[te], np.quantile(d.y[tr], TAU))
        npm = _fit(d, tr, workers=WORKERS, random_state=0)
        non_private = _pinball(d.y[te], npm.predict(d.curves[te]))
        common = dict(algorithm="functional", dataset=name, n_train=int(tr.size), n_test=int(te.size), delta=1e-5,
                      metric="test_pinball", non_private=non_private, trivial=trivial, label_party_alone=None,
                      central_dp_kind="centralised FDP-ADMM (one worker holding the pooled curves, same estimator "
                                      "and bounds, same total epsilon)")
        rows.append(dict(common, side="non-private", epsilon=None, seed=None, private=None, central_dp=None,
                         in_range=None, seconds=None))
        for eps in epsilons:
            for s in range(seeds):
                t0 = time.perf_counter()
                m = _fit(d, tr, workers=WORKERS, total_epsilon=eps, y_range=(lo, hi), curve_clip=cx, random_state=100 + s)
                secs = time.perf_counter() - t0
                p = m.predict(d.curves[te])
                c = _fit(d, tr, workers=1, total_epsilon=eps, y_range=(lo, hi), curve_clip=cx, random_state=200 + s)
                rows.append(dict(common, side="curves", epsilon=float(eps), seed=s, private=_pinball(d.y[te], p),
                                 central_dp=_pinball(d.y[te], c.predict(d.curves[te])),
                                 in_range=float(np.mean((p >= lo) & (p <= hi))), seconds=secs,
                                 handed_over=m.fallback_))
            progress(progress_line(name, eps, rows, seeds, trivial, non_private))
    return rows


if __name__ == "__main__":
    standalone(run, [("dataset", "dataset", "<16"), ("n", "n_train", ">7"), ("eps", "epsilon", ">6g"),
                     ("private", "private", ">10.4g"), ("non-priv", "non_private", ">10.4g"),
                     ("trivial", "trivial", ">10.4g"), ("central", "central_dp", ">10.4g"),
                     ("in range", "in_range", ">9.2f")])
