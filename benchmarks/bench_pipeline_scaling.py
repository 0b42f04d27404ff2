"""Issue 37: a standardised ``Pipeline`` fits within 1.5× of the raw-column fit.

``VerticalLogisticRegression(party_sizes=…)`` on the raw columns against
``make_pipeline(StandardScaler(), VerticalLogisticRegression(party_sizes=…))`` on the same rows, and the estimator
alone on columns standardised beforehand (the fit without the scaler's own time): process CPU seconds of ``fit``
(``time.process_time``, one BLAS thread), the three interleaved in every repeat, best of ``--repeats``; the rounds
each ran (``n_iter_``) and the training log loss beside them.

Tables: the first ``--rows`` rows of a9a (123 binary columns, parties 66/57), and a synthetic table whose columns
have very different raw scales (8 columns, parties 4/4: standardising changes them most).

Run: ``python benchmarks/bench_pipeline_scaling.py [--rows 4000] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.metrics import log_loss
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from dpadmm import VerticalLogisticRegression
from dpadmm.data import load_a9a


#: the fits compared: the default (non-private) fit, and a private one (features and labels at ε = 1)
CONFIGS = {"non-private": {}, "eps=1": {"epsilon": 1.0, "label_epsilon": 1.0}}


def _tables(rows: int) -> dict:
    X, y = load_a9a("train")
    X = X[:rows].toarray() if hasattr(X, "toarray") else np.asarray(X[:rows])  # a dense table, as a user has it
    rng = np.random.default_rng(0)
    scales = np.array([1e-2, 1.0, 10.0, 1e3, 0.1, 5.0, 100.0, 1.0])
    Z = rng.normal(size=(rows, 8))
    yz = np.where(Z @ np.array([1.0, -1.0, 0.5, 2.0, 0.0, -0.5, 1.0, 0.3]) + 0.5 * rng.normal(size=rows) > 0, 1, -1)
    return {"a9a": (X, np.asarray(y[:rows]), [66, 57]), "scaled synthetic": (Z * scales + 3.0, yz, [4, 4])}


def _fit(make, X, y) -> tuple[float, object]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0 = time.process_time()
        model = make().fit(X, y)
        return time.process_time() - c0, model


def _compare(name: str, label: str, X, y, sizes, kw: dict, repeats: int) -> None:
    Z = StandardScaler().fit_transform(X)  # the estimator alone on standardised columns: the scaler not timed
    sides = {"raw": (lambda: VerticalLogisticRegression(party_sizes=sizes, random_state=0, **kw), X),
             "pipeline": (lambda: make_pipeline(StandardScaler(), VerticalLogisticRegression(
                 party_sizes=sizes, random_state=0, **kw)), X),
             "std cols": (lambda: VerticalLogisticRegression(party_sizes=sizes, random_state=0, **kw), Z)}
    best, last = {k: np.inf for k in sides}, {}
    for _ in range(repeats):
        for k, (make, data) in sides.items():  # interleaved: every side sees the same machine load
            sec, model = _fit(make, data, y)
            best[k], last[k] = min(best[k], sec), model
    for k, model in last.items():
        est = model[-1] if hasattr(model, "steps") else model
        loss = log_loss(y, model.predict_proba(sides[k][1])[:, 1], labels=est.classes_)
        print(f"{name:>16} {label:>11} {k:>8}: best CPU {best[k]:6.3f} s of {repeats}, {est.n_iter_:3d} rounds, "
              f"train log loss {loss:.4f}")
    print(f"{name:>16} {label:>11} pipeline / raw: {best['pipeline'] / best['raw']:.2f}x, standardised columns / raw: "
          f"{best['std cols'] / best['raw']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with threadpool_limits(1):
        for name, (X, y, sizes) in _tables(args.rows).items():
            for label, kw in CONFIGS.items():
                _compare(name, label, X, y, sizes, kw, args.repeats)


if __name__ == "__main__":
    main()
