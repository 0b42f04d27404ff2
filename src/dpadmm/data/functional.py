"""Functional data: a CSV loader, the simulation of [Zhou, §5], and a real dataset.

CSV format: one row per curve; a response column (``--response-column``, default ``y``), an
optional id column, and every other numeric column is the curve's value at one grid point, in
column order. If every grid column's name parses as a number, those numbers are the grid;
otherwise the grid is equispaced on [0, 1].

Simulation [Zhou, §5]: ``β(t) = Σ_{k≤50} w_k φ_k(t)``, ``w_1 = 0.3``, ``w_k = 4(−1)^{k+1}k^{−2}``,
``φ_1 = 1``, ``φ_k = √2 cos((k − 1)πt)``; ``X_i = Σ_k A_ik φ_k``, ``A_ik ~ N(0, k^{−2})``;
``y_i = ∫βX_i + ε_i − F^{−1}(τ)``, ε ~ t(3). Since the φ_k are orthonormal, ``∫βX_i = Σ_k w_k A_ik``
exactly. Curves are observed on ``grid_size`` equispaced points of [0, 1] (the paper does not
state the observation grid; we use the 100-point grid on which it evaluates the MISE).

Real data (nothing is downloaded at run time; :data:`DATASETS` lists them, responses on different scales):

- ``fertility`` — World Bank total fertility rate (births per woman), shipped inside the statsmodels
  wheel (``statsmodels.datasets.fertility``). Curves: 1960–2000 (41 yearly points); response: the
  2011 rate (≈ 2.8 ± 1.4). The 192 rows complete over 1960–2011 are kept.
- ``tecator`` — 215 near-infrared absorbance spectra of meat (100 channels, 850–1048 nm, Tecator
  Infratec analyser; public domain, see ``_bundled/TECATOR_PROVENANCE.md``); response: fat content
  in percent (≈ 18 ± 13; ``response="water"`` ≈ 63 ± 10 or ``"protein"`` ≈ 18 ± 3).
- ``elnino`` — Niño 1+2 sea surface temperatures 1950–2010 (NOAA, shipped inside the statsmodels wheel):
  a year's 12 monthly values (°C) → the next year's mean (≈ 22.9 ± 1.2 °C). 60 curves.
- ``temperature`` — hourly temperatures of Seattle and San Francisco in 2010 (NOAA, public domain,
  via the vega_datasets package; ``_bundled/TEMPERATURE_PROVENANCE.md``). Curve: one day's 24
  hourly readings (°F); response: the next day's maximum (≈ 59 ± 8 °F, far from zero). 726 days.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import DataFileError, InvalidDataError, InvalidParameterError
from .._validation import check_int, check_open_unit
from ..exceptions import MissingDependencyError

N_TERMS = 50


@dataclass
class FunctionalData:
    """Curves (n, T) on ``grid`` (T,), responses (n,), optional ids, provenance and, for simulated
    data, the true coefficient function on the grid."""

    curves: np.ndarray
    y: np.ndarray
    grid: np.ndarray
    ids: np.ndarray | None = None
    beta: np.ndarray | None = None
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.curves.shape[0]


def check_curves(curves, y, grid=None, *, name: str = "curves") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate curves (n, T ≥ 2, finite), y (n, finite) and a strictly increasing grid."""
    try:
        X = np.asarray(curves, dtype=float)
    except (TypeError, ValueError):
        raise InvalidDataError(f"{name} must be a numeric 2-D array of equal-length curves; got ragged or "
                               "non-numeric rows.") from None
    if X.ndim != 2:
        raise InvalidDataError(f"{name} must be 2-D (curves x grid points), got shape {X.shape}.")
    if X.shape[0] < 1 or X.shape[1] < 2:
        raise InvalidDataError(f"{name} needs at least one curve and two grid points, got shape {X.shape} "
                               f"(n_features = {X.shape[1]}).")
    if not np.isfinite(X).all():
        r, c = np.argwhere(~np.isfinite(X))[0]
        raise InvalidDataError(f"{name} contain NaN or infinite values (first at curve {r}, grid point {c}); "
                               "every curve must be observed on the whole grid.")
    yv = np.asarray(y, dtype=float).ravel()
    if yv.shape[0] != X.shape[0]:
        raise InvalidDataError(f"the response has {yv.shape[0]} values but there are {X.shape[0]} curves; they must match.")
    if not np.isfinite(yv).all():
        raise InvalidDataError(f"the response contains NaN or infinite values (first at row {int(np.argmax(~np.isfinite(yv)))}); "
                               "drop those rows.")
    g = np.linspace(0.0, 1.0, X.shape[1]) if grid is None else np.asarray(grid, dtype=float)
    if g.shape != (X.shape[1],) or not np.all(np.diff(g) > 0):
        raise InvalidDataError(f"the grid must be strictly increasing with one point per column ({X.shape[1]}).")
    return X, yv, g


def load_functional_csv(path, *, response_column: str = "y", id_column: str | None = "id") -> FunctionalData:
    """Read curves from CSV (see module docstring); raises a one-line error on bad input."""
    import csv

    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise DataFileError(f"file not found: {p}; check the path.")
    with open(p, newline="") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2:
        raise InvalidDataError(f"{p} has no data rows; give a header and one row per curve.")
    width = len(rows[0])
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != width:
            raise InvalidDataError(f"{p} line {i} has {len(r)} fields but the header has {width}: curves must all "
                                   "have the same grid (ragged rows).")
    try:
        df = pd.read_csv(p)
    except Exception as exc:  # noqa: BLE001
        raise DataFileError(f"could not read {p} as CSV ({exc}).") from None
    if response_column not in df.columns:
        raise InvalidDataError(f"response column {response_column!r} not in {p}; columns: {', '.join(map(str, df.columns[:8]))}"
                               f"{'...' if df.shape[1] > 8 else ''}. Pass --response-column.")
    ids = None
    drop = [response_column]
    if id_column and id_column in df.columns:
        ids = df[id_column].to_numpy()
        drop.append(id_column)
    grid_df = df.drop(columns=drop)
    non_numeric = [c for c in grid_df.columns if not np.issubdtype(grid_df[c].dtype, np.number)]
    if non_numeric:
        raise InvalidDataError(f"grid column {non_numeric[0]!r} in {p} is not numeric; every column other than the "
                               "response and the id must hold curve values.")
    try:
        grid = np.array([float(c) for c in grid_df.columns])
        if not np.all(np.diff(grid) > 0):
            grid = None
    except ValueError:
        grid = None
    X, y, g = check_curves(grid_df.to_numpy(dtype=float), df[response_column].to_numpy(), grid,
                           name=f"curves in {p.name}")
    return FunctionalData(X, y, g, ids=ids, source={"file": str(p), "response_column": response_column})


def write_functional_csv(path, data: FunctionalData, *, response_column: str = "y") -> None:
    """Write curves in the loader's format (grid values as column names)."""
    import pandas as pd

    df = pd.DataFrame(data.curves, columns=[f"{t:.6g}" for t in data.grid])
    df.insert(0, response_column, data.y)
    if data.ids is not None:
        df.insert(0, "id", data.ids)
    df.to_csv(path, index=False)


# ----------------------------------------------------------------------------- simulation
def zhou_coefficients(n_terms: int = N_TERMS) -> np.ndarray:
    """w_1 = 0.3, w_k = 4(−1)^{k+1} k^{−2} [Zhou, §5]."""
    k = np.arange(1, n_terms + 1)
    w = 4.0 * (-1.0) ** (k + 1) / k**2
    w[0] = 0.3
    return w


def zhou_basis(grid: np.ndarray, n_terms: int = N_TERMS) -> np.ndarray:
    """φ_1 = 1, φ_k(t) = √2 cos((k − 1)πt): (T, n_terms)."""
    k = np.arange(n_terms)
    B = np.sqrt(2.0) * np.cos(np.pi * np.outer(grid, k))
    B[:, 0] = 1.0
    return B


def zhou_grid(grid_size: int = 100) -> np.ndarray:
    return np.linspace(0.0, 1.0, grid_size)


def simulate_zhou_scores(n: int, rng: np.random.Generator, n_terms: int = N_TERMS):
    """True scores A (n, n_terms), ~N(0, k^{−2}), and t(3) errors ε (n,) (τ-centring applied by the caller)."""
    k = np.arange(1, n_terms + 1)
    A = rng.standard_normal((n, n_terms)) / k
    eps = rng.standard_t(3, size=n)
    return A, eps


def t3_quantile(tau) -> np.ndarray:
    """F^{−1}(τ) of Student's t with 3 degrees of freedom."""
    from scipy.stats import t as student_t

    return student_t.ppf(tau, 3)


def simulate_zhou(n: int = 100_000, *, tau: float = 0.5, grid_size: int = 100, n_terms: int = N_TERMS,
                  random_state=None) -> FunctionalData:
    """The simulation of [Zhou, §5] (see module docstring)."""
    check_int("n", n)
    check_open_unit("tau", tau)
    check_int("grid_size", grid_size, minimum=2)
    rng = np.random.default_rng(random_state)
    grid = zhou_grid(grid_size)
    B = zhou_basis(grid, n_terms)
    w = zhou_coefficients(n_terms)
    A, eps = simulate_zhou_scores(n, rng, n_terms)
    y = A @ w + eps - float(t3_quantile(tau))
    return FunctionalData(curves=A @ B.T, y=y, grid=grid, beta=B @ w,
                          source={"name": "zhou-simulation", "n": n, "tau": tau, "n_terms": n_terms})


# ----------------------------------------------------------------------------- real data
FERTILITY_PREDICTOR_YEARS = (1960, 2000)
FERTILITY_RESPONSE_YEAR = 2011


def load_fertility() -> FunctionalData:
    """World Bank fertility curves 1960–2000 → fertility in 2011 (statsmodels' bundled copy)."""
    try:
        from statsmodels.datasets import fertility
    except ImportError:  # pragma: no cover

        raise MissingDependencyError("the fertility dataset ships with statsmodels; pip install 'statsmodels>=0.14'.") from None
    df = fertility.load_pandas().data
    years = [str(y) for y in range(FERTILITY_PREDICTOR_YEARS[0], FERTILITY_RESPONSE_YEAR + 1)]
    keep = df[years].notna().all(axis=1)
    sub = df.loc[keep]
    cols = [str(y) for y in range(FERTILITY_PREDICTOR_YEARS[0], FERTILITY_PREDICTOR_YEARS[1] + 1)]
    X = sub[cols].to_numpy(dtype=float)
    y = sub[str(FERTILITY_RESPONSE_YEAR)].to_numpy(dtype=float)
    grid = np.array([float(c) for c in cols])
    return FunctionalData(X, y, grid, ids=sub["Country Code"].to_numpy(),
                          source={"name": "fertility", "provider": "World Bank WDI SP.DYN.TFRT.IN via statsmodels",
                                  "predictor": "fertility rate 1960-2000", "response": "fertility rate 2011",
                                  "rows": int(X.shape[0])})


# ----------------------------------------------------------------------------- bundled copies
def _bundled_csv(name: str):
    import gzip
    import io
    from importlib.resources import files

    import pandas as pd

    raw = (files("dpadmm.data") / "_bundled" / name).read_bytes()
    return pd.read_csv(io.BytesIO(gzip.decompress(raw)))


TECATOR_RESPONSES = ("fat", "water", "protein")


def load_tecator(response: str = "fat") -> FunctionalData:
    """Tecator meat spectra (bundled): 215 absorbance curves on 100 channels (850, 852, …, 1048 nm)
    → ``response`` ∈ {fat, water, protein} in percent (see the module docstring)."""
    if response not in TECATOR_RESPONSES:
        raise InvalidParameterError(f"response must be one of {list(TECATOR_RESPONSES)}, got response={response!r}.")
    df = _bundled_csv("tecator.csv.gz")
    cols = [c for c in df.columns if c.startswith("x_")]
    X = df[cols].to_numpy(dtype=float)
    grid = 850.0 + 2.0 * np.arange(len(cols))
    return FunctionalData(X, df[response].to_numpy(dtype=float), grid, ids=np.arange(1, X.shape[0] + 1),
                          source={"name": "tecator", "provider": "Tecator Infratec (public domain) via R modeldata::meats",
                                  "predictor": "absorbance spectrum 850-1048 nm", "response": f"{response} (%)",
                                  "rows": int(X.shape[0])})


def load_temperature() -> FunctionalData:
    """Seattle and San Francisco 2010 (bundled, NOAA): a day's 24 hourly temperatures (°F) → the next
    day's maximum. Days with a missing hour (the DST change) and each city's last day are dropped."""
    import pandas as pd

    df = _bundled_csv("hourly_temperatures.csv.gz")
    ts = pd.to_datetime(df["date"])
    df = df.assign(day=ts.dt.normalize(), hour=ts.dt.hour)
    X_all, y_all, ids = [], [], []
    for city, g in df.groupby("city", sort=False):
        wide = g.pivot(index="day", columns="hour", values="temp")
        full = wide.dropna()
        nxt = full.index + pd.Timedelta(days=1)
        has_next = np.isin(nxt, wide.index)
        days = full.index[has_next]
        X_all.append(full.loc[days].to_numpy(dtype=float))
        y_all.append(wide.loc[days + pd.Timedelta(days=1)].max(axis=1).to_numpy(dtype=float))
        ids.extend(f"{city} {d:%Y-%m-%d}" for d in days)
    X = np.concatenate(X_all)
    return FunctionalData(X, np.concatenate(y_all), np.arange(24.0), ids=np.array(ids),
                          source={"name": "temperature", "provider": "NOAA (public domain) via vega_datasets",
                                  "predictor": "hourly temperature of one day (F)",
                                  "response": "next day's maximum temperature (F)", "rows": int(X.shape[0])})


def load_elnino() -> FunctionalData:
    """Niño 1+2 sea surface temperatures 1950–2010 (NOAA, statsmodels' bundled copy): one year's 12 monthly
    values (°C) → the next year's mean (°C); 60 curves."""
    from statsmodels.datasets import elnino

    df = elnino.load_pandas().data.sort_values("YEAR")
    months = [c for c in df.columns if c != "YEAR"]
    M = df[months].to_numpy(dtype=float)
    X, y = M[:-1], M[1:].mean(axis=1)
    return FunctionalData(X, y, np.arange(1.0, 13.0), ids=df["YEAR"].to_numpy()[:-1].astype(int),
                          source={"name": "elnino", "provider": "NOAA Nino 1+2 SST via statsmodels",
                                  "predictor": "monthly sea surface temperature of one year (C)",
                                  "response": "next year's mean sea surface temperature (C)", "rows": int(X.shape[0])})


#: Real functional datasets shipped with dpadmm or its dependencies (no network).
DATASETS = {"fertility": load_fertility, "tecator": load_tecator, "temperature": load_temperature,
            "elnino": load_elnino}


def load_dataset(name: str) -> FunctionalData:
    """One of :data:`DATASETS` by name (one-line error otherwise)."""
    if name not in DATASETS:
        raise InvalidParameterError(f"dataset must be one of {sorted(DATASETS)}, got dataset={name!r}.")
    return DATASETS[name]()


def split_workers(n: int, n_workers: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Random, as-even-as-possible split of n rows over workers (raises if n < workers)."""
    if n_workers > n:
        raise InvalidParameterError(f"workers must be at most the number of curves ({n}), got workers={n_workers}.")
    perm = rng.permutation(n)
    return np.array_split(perm, n_workers)
