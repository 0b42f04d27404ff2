"""The gossip run's public schedule: rounds, step and the model's tail mean from public n, d, N and ε, and the
protocol's defaults.

Two regimes (:func:`default_schedule`), told apart by a public quantity: the expected norm of the noise one
gradient round adds to the nodes' average model, ``s = η √N z Δ √(d + 1) / n`` (the pooled noise of the N nodes'
releases, scaled as the heavy-ball step scales the gradient; z = √(K + T)/μ for T + K Gaussian releases composing
to μ-GDP, the (ε, δ) of the run — exact for Gaussian mechanisms, and what the PLD accountant then confirms).

- **signal-rich**: if the step η = 2/L leaves ``s ≤ κ`` for more rounds than the noise-limited rule's T, the
  run takes as many rounds as keep ``s ≤ κ`` (at most 400), η = 2/L, and each node's model is the mean of its
  broadcasts over the last three quarters of the rounds (post-processing). Heavy ball with β = 0.9 is stable on
  an L-smooth quadratic for η < 2(1 + β)/L = 3.8/L.
- **noise-limited** otherwise: ``T = clip(1.6 √(n ε / (d + 1)), 10, 200)``, η = 1/L, heavy-ball momentum
  β = 0.7 (0.9 elsewhere), the model is the last broadcast.

Why β = 0.7 when noise limits: heavy ball carries each round's noise into every later step, so without curvature
the noise in the model after T rounds has norm ``s √(Σ_{k≤T} ((1 − βᵏ)/(1 − β))²)`` — about 5.6 at β = 0.9 on
AER::HMDA (1,904 rows, d = 13, ε = 1, 19 rounds), where the pooled non-private model's norm is 2.1: the private
model's norm grew round after round to 4.5–5.5, it was overconfident (Platt scaling on its own scores would have
taken 0.2–0.3 of them), and every seed was worse than the base rate (0.38–0.42 against 0.3377). β = 0.7 carries
a round's noise about half as far (2.6): 0.31–0.33, every seed better. Measured with β ∈ {0.9, 0.7, 0.5, 0},
T and T/2, on HMDA, DAAG::cricketer (4,768 rows, 1.9% positive) and a 2,400-row subset of Ecdat::HI, 3 seeds at
ε = 1: β = 0.7 was the one setting better than β = 0.9 on the worst seed of all three (HMDA 0.3326 against 0.4181,
cricketer 0.0901 against 0.0922, HI 0.4881 against 0.5067); β = 0.5 and 0 lose on HI and cricketer (too little
distance travelled in T rounds), halving T loses everywhere. Judged afterwards on tables none of these choices
saw (BENCHMARKS.md, "noise-limited tables").

κ = 0.09 is measured (5-node ring, ε = 1, 2, 5, the benchmark's seeds; ``benchmarks/bench_consensus_utility.py``):
AER::CPS1988 (22,524 rows, d = 8) and Ecdat::HI (17,818 rows, d = 18) are signal-rich at every ε; there a
longer tail mean with more rounds and η = 2/L gave every seed a model better than its node alone, where the
noise-limited defaults left CPS1988 optimisation-limited (0.2242 on one seed against 0.2153 for its node
alone; without noise 0.2326 after 50 rounds, 0.2113 after 200). On DAAG::cricketer (4,768 rows, 1.9%
positive) at ε = 1, the same longer schedule was worse than the base rate on every seed (0.165–0.489 against
0.1185) — its per-round noise there is s ≈ 0.24, against 0.09 on CPS1988 at 240 rounds, and 0.12 at 400 rounds
where CPS1988 got worse again — so it stays noise-limited at ε = 1 and 2.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scipy.optimize import brentq
from scipy.special import ndtr

DEFAULT_ROUNDS = 50  # a non-private run's default
MAX_ROUNDS = 200  # the most rounds the automatic rule picks
MIN_ROUNDS = 10


def default_rounds(n_total: int, d: int, epsilon: float | None) -> int:
    """T from public quantities: the pooled gradient noise grows with √T (calibration) and with d + 1, the signal
    with n·ε, so a small or noisy problem gets fewer rounds: ``T = clip(1.6 √(n ε / (d + 1)), 10, 200)`` (measured
    on Ecdat::HI subsets of 2,400, 6,000 and 17,818 rows at ε = 1: 50 rounds on 2,400 rows were worse than the
    base rate on every seed, 20 better on every seed; on AER::CPS1988, 22,524 rows, fewer rounds leave the
    optimisation unfinished: at ε = 5, 0.229 with 50 rounds, 0.216 with 100, 0.210 with 200)."""
    if epsilon is None:
        return DEFAULT_ROUNDS
    return int(min(MAX_ROUNDS, max(MIN_ROUNDS, round(1.6 * (n_total * float(epsilon) / (d + 1)) ** 0.5))))


TAIL = 0.0  # the model's tail mean (:func:`average_from`) outside the signal-rich regime: the last broadcast


def average_from(rounds: int, tail: float = TAIL) -> int:
    """s_0: the first gradient round whose broadcast enters the model's tail mean (the last ``tail`` share of the
    T rounds, at least the last one)."""
    T = int(rounds)
    return T - max(1, int(round(float(tail) * T)))


DEFAULT_RANGE_ROUNDS = 14
KAPPA = 0.09  # the most expected noise norm one gradient round may add to the average model (signal-rich)
RICH_STEP = 2.0  # η = 2/L in the signal-rich regime
RICH_TAIL = 0.75  # the model: the mean of the broadcasts of the last 3/4 of the rounds (signal-rich)
MAX_RICH_ROUNDS = 400


class Schedule(NamedTuple):
    """A run's public schedule: T, η = ``step_scale``/L, the tail share of the model's mean, the regime and the
    heavy-ball momentum β."""

    rounds: int
    step_scale: float
    tail: float
    regime: str  # "signal-rich", "noise-limited" or "non-private"
    momentum: float = 0.9


def gdp_mu(epsilon: float, delta: float) -> float:
    """μ of the μ-GDP guarantee that is exactly (ε, δ)-DP: δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su
    2022, Cor. 2.13). T + K Gaussian releases with noise multiplier z compose to μ = √(T + K)/z."""
    eps, dlt = float(epsilon), float(delta)

    def gap(mu: float) -> float:
        return float(ndtr(-eps / mu + mu / 2.0) - math.exp(eps) * ndtr(-eps / mu - mu / 2.0)) - dlt

    return float(brentq(gap, 1e-8, 1e3, xtol=1e-12))


def round_noise(n_total: int, d: int, n_nodes: int, rounds: int, range_rounds: int, mu: float, row_clip: float,
                step: float) -> float:
    """s: the expected norm of the noise one gradient round adds to the nodes' average model, with z = √(T + K)/μ
    and Δ = 2√(R² + 1) (module docstring)."""
    z = math.sqrt(int(rounds) + int(range_rounds)) / float(mu)
    delta = 2.0 * math.sqrt(float(row_clip) ** 2 + 1.0)
    return float(step) * math.sqrt(n_nodes) * z * delta * math.sqrt(d + 1.0) / float(n_total)


def default_schedule(n_total: int, d: int, epsilon: float | None, *, n_nodes: int, delta: float = 1e-5,
                     range_rounds: int = 14, row_clip: float | None = None, ridge: float = 1e-4) -> Schedule:
    """The schedule of a run from public quantities (module docstring): the signal-rich regime where η = 2/L
    keeps the per-round noise s ≤ κ for more rounds than the noise-limited rule gives, else the noise-limited."""
    old = default_rounds(n_total, d, epsilon)
    if epsilon is None:
        return Schedule(old, 1.0, 0.0, "non-private")
    R = math.sqrt(d) if row_clip is None else float(row_clip)
    L = (R * R + 1.0) / 4.0 + float(ridge)
    mu = gdp_mu(float(epsilon), float(delta))
    # largest T with round_noise(T) <= κ at η = RICH_STEP / L: √(T + K) ≤ κ n μ / (η √N Δ √(d + 1))
    root = KAPPA * n_total * mu / ((RICH_STEP / L) * math.sqrt(n_nodes) * 2.0 * math.sqrt(R * R + 1.0)
                                   * math.sqrt(d + 1.0))
    rich = int(math.floor(root * root)) - int(range_rounds)
    if rich >= old:
        return Schedule(min(MAX_RICH_ROUNDS, rich), RICH_STEP, RICH_TAIL, "signal-rich")
    return Schedule(old, 1.0, 0.0, "noise-limited", NOISY_MOMENTUM)  # bisection steps in asinh space over ±1e6: resolution 0.2% of a value's magnitude
DEFAULT_MOMENTUM = 0.9
NOISY_MOMENTUM = 0.7  # β in the noise-limited regime (module docstring)
DEFAULT_RIDGE = 1e-4
DEFAULT_DELTA = 1e-5
