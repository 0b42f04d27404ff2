"""KKT reconstruction attack on M-ADMM [Zhang, §6.2, App. E].

Threat model: the attacker knows all of node i's training points except the first, (x_1, y_1),
every broadcast f_i(t), f_j(t) (j ∈ V_i) for t = 0…T, the public constants C, ρ, N, B_i, V_i, the
dual step θ and — in the "η public" case — node i's penalties η_i(t). From the optimality
condition of [Zhang, eq. 25] at every iteration t,

    r(t) := (C/B_i) Σ_{n≥2} y_n ℒ'(y_n f_i(t)ᵀx_n) x_n + (ρ/N) f_i(t) + 2λ_i(t−1)
            + η_i(t) (2V_i f_i(t) − V_i f_i(t−1) − S_i(t−1))
          = (C/B_i) y_1 σ(−y_1 f_i(t)ᵀx_1) x_1 − 2η_i(t) V_i ε_i(t)            [Zhang, App. E]

with λ_i(t) rebuilt from the f's by [Zhang, eq. 11] and S_i = Σ_{j∈V_i} f_j. Every noiseless
term on the right is a positive multiple of y_1 x_1, and the PP noise has mean zero, so
``x̂ = Σ_t r(t)`` points along ±x_1: the features are recovered up to a scalar factor (whose sign
is y_1). We score the attack by ``|cos(x̂, x_1)|`` and compare it with chance: the same score
against every *other* training point of the data (a decoy) — features of Adult rows are
non-negative and correlated, so chance is well above the ~sqrt(2/(πd)) of random directions.

If η_i(t) is private the attacker must guess it; we give it the natural guess η̂ ≡ θ
(conventional ADMM), which leaves ``(η_i(t) − θ)(2V f_i(t) − V f_i(t−1) − S_i(t−1))`` in r(t).
Caveat (beyond the paper): this is the paper's attacker. A stronger one could exploit that
r(t) lies in span{x_1, M(t)} for every t (M the movement term) and search for η_i(t) per
iteration; the paper's claim that private η makes inference "impossible" is not proved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import expit
from ..estimators.consensus import ConsensusLogisticRegression
from .._validation import binary_labels, check_random_state
from ..data.graphs import split_indices


def kkt_reconstruct(*, X_known: np.ndarray, y_known: np.ndarray, path: np.ndarray, node: int, neighbours,
                    C: float, reg: float, theta, eta, n_samples: int) -> np.ndarray:
    """Estimate ±x_1 (unit vector) from node ``node``'s KKT conditions [Zhang, App. E].

    ``path``: (T, N, d) with ``path[t−1] = f(t)`` (f(0) = 0). ``theta``, ``eta``: scalars or length-T
    arrays (θ(t), η_i(t) as the attacker believes them). ``reg`` = ρ/N; ``n_samples`` = B_i
    (including the unknown point). ``X_known``/``y_known``: the node's other B_i − 1 points.
    """
    T, _, d = path.shape
    nb = np.asarray(list(neighbours), dtype=int)
    V = float(nb.size)
    theta = np.broadcast_to(np.asarray(theta, dtype=np.float64), (T,))
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (T,))
    lam = np.zeros(d)  # λ_i(0)
    f_prev = np.zeros(d)
    S_prev = np.zeros(d)
    total = np.zeros(d)
    for t in range(1, T + 1):
        F = path[t - 1]
        f = F[node]
        grad_known = X_known.T @ (-y_known * expit(-y_known * (X_known @ f)))  # Σ y ℒ'(y fᵀx) x
        r = (C / n_samples) * grad_known + reg * f + 2.0 * lam + eta[t - 1] * (2.0 * V * f - V * f_prev - S_prev)
        total += r
        S = F[nb].sum(axis=0)
        lam = lam + 0.5 * theta[t - 1] * (V * f - S)  # [Zhang, eq. 11]: λ_i(t)
        f_prev, S_prev = f, S
    n = np.linalg.norm(total)
    return total / n if n > 0 else total


def _abs_cos(v: np.ndarray, X: np.ndarray) -> np.ndarray:
    nx = np.linalg.norm(X, axis=-1)
    return np.abs(X @ v) / np.where(nx > 0, nx, 1.0) / max(np.linalg.norm(v), 1e-300)


@dataclass
class KKTAttackResult:
    """One attack: |cos(x̂, x_1)| and the chance level (|cos| against every other training point)."""

    scenario: str
    cosine: float
    chance_mean: float
    chance_q95: float
    rank: int  # 1 = the true point is the best-matching training point
    candidates: int
    eta_known: bool
    perturbation: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_kkt_attack(X, y, *, n_nodes: int = 5, topology: Any = "ring", node: int = 0, C: float = 50.0,
                   reg_weight: float = 1.0, theta: float = 0.5, eta: Any = 0.55, eta_growth: float = 1.1,
                   alpha: float = 3.0, alpha_growth: float = 1.0, iterations: int = 100,
                   random_state: int = 0) -> list[KKTAttackResult]:
    """Run M-ADMM (private penalties η_i(t) = eta·eta_growth^{t−1}) three times on the same data and attack
    the first point of node ``node``: (1) η public, no noise; (2) η private (attacker guesses η̂ ≡ θ),
    no noise; (3) η public, PP noise with α(t) = alpha·alpha_growth^{t−1}.
    """
    common = dict(C=C, reg_weight=reg_weight, n_nodes=n_nodes, topology=topology, theta=theta, eta=eta,
                  eta_growth=eta_growth, max_iter=iterations, random_state=random_state, record_path=True,
                  monitor=False)
    runs = {
        "none": ConsensusLogisticRegression(**common).fit(X, y),
        "pp": ConsensusLogisticRegression(**common, perturbation="pp", alpha=alpha, alpha_growth=alpha_growth).fit(X, y),
    }
    # the node's data as the estimator split it (same seed → same split)

    seed = check_random_state(random_state)
    y_pm, _ = binary_labels("y", y)
    rng = np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(2**20,)))
    idx = split_indices(len(y_pm), n_nodes, "even", random_state=rng)[node]
    Xi, yi = np.asarray(X, dtype=np.float64)[idx], y_pm[idx]
    x1 = Xi[0]
    decoys = np.delete(np.asarray(X, dtype=np.float64), idx[0], axis=0)
    out = []
    for scenario, pert, known in (("eta public, no noise", "none", True), ("eta private, no noise", "none", False),
                                  ("eta public, PP noise", "pp", True)):
        m = runs[pert]
        neighbours = list(m.graph_.neighbors(node))
        eta_true = m.schedules_["eta"][node]
        theta_t = m.schedules_["theta"][node]
        x_hat = kkt_reconstruct(X_known=Xi[1:], y_known=yi[1:], path=m.path_, node=node, neighbours=neighbours,
                                C=C, reg=reg_weight / n_nodes, theta=theta_t, eta=eta_true if known else theta_t,
                                n_samples=len(idx))
        cos = float(_abs_cos(x_hat, x1[None])[0])
        chance = _abs_cos(x_hat, decoys)
        out.append(KKTAttackResult(scenario, cos, float(chance.mean()), float(np.quantile(chance, 0.95)),
                                   int((chance >= cos).sum()) + 1, int(chance.size) + 1, known, pert))
    return out
