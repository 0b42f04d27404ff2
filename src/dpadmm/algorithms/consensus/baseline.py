"""A DP constant for decentralised logistic regression, and the accounted hand-over test [issue 18].

A private consensus model [Zhang] can be worse than predicting the base rate. This protocol gives the
user the better of the two without trusting anyone with the labels:

1. ``count``: node i releases ``c̃_i = Σ_j 1{y_ij = +1} + Lap(1/ε_b)``. Replacing one record moves the
   count by at most 1 (enforced: a count of indicators), so the release is ε_b-DP (pure, the same
   relation as [Zhang, Thm 4.1]). Whoever assembles the model sums them: the DP base rate
   ``p̂ = clip(Σ c̃_i / n, p_min, 1 − p_min)`` (n = Σ B_i public, as in Thm 4.1) — post-processing.
2. ``compare``: the assembler sends the released consensus model f̄ (a post-processing of the
   broadcast f_i(T)), p̂ and the public margin clip L; node i releases
   ``Σ_j d_j + Lap(Δ/ε_c)`` with ``d_j = ℓ(y_j clip(f̄ᵀx_j, −L, L)) − ℓ_const(y_j)``, ℓ(m) = log(1 + e^{−m})
   and ℓ_const(y) = −log p̂ (y = +1) or −log(1 − p̂). Since 0 ≤ ℓ(·) ≤ L + log 2 and
   0 ≤ ℓ_const ≤ −log p_min, every d_j lies in an interval of length Δ = L + log 2 − log p_min, so
   replacing one record moves the sum by at most Δ (enforced by the two clips; the node computes Δ
   from the public L and p_min it received): ε_c-DP.

The assembler hands over f̄ (with its margins clipped to ±L: post-processing) only if the pooled noisy
sum is below −``MARGIN`` times its noise standard deviation (√(2N)·Δ/ε_c), otherwise the DP base rate:
a model no better than the DP constant is handed over with probability ≤ P(Laplace sum < −2 sd) (< 5%).
Each node's total is P_i(T) + ε_b + ε_c by basic composition of pure DP (the node's releases here
and its T releases of [Zhang, Alg. 1] all concern its own records).

Over the network (``dpadmm party serve --protocol graph-consensus --protocol consensus-baseline``) the
assembler is the coordinator and the two releases are this protocol's declared round messages. Whatever
the coordinator sends, a node releases each statistic at most once per run (its state records what it
released; a repeated or unknown stage is refused), computes Δ from the L and p_min it received and
refuses values for which the interval argument fails (L not finite and > 0, p_min not in (0, ½], a
non-finite or wrongly shaped f): so each run costs it at most ε_b + ε_c, which its own policy prices at
Setup against its ledger (:data:`POLICY`) and its ledger records before each release leaves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, NamedTuple

import numpy as np

from ...privacy.events import RECORD_REPLACE, PureDPRelease
from ...privacy.policy import PolicyRefusal

MARGIN_CLIP = 4.0  # L: |fᵀx| clipped to L for the comparison and the handed-over model (p in [0.018, 0.982])
P_MIN = 0.01  # the DP base rate is clipped to [P_MIN, 1 − P_MIN]
MARGIN = 2.0  # hand over the model only if it wins by MARGIN noise standard deviations


@dataclass(frozen=True, eq=False)
class NodeConfig:
    name: str
    X: np.ndarray
    y: np.ndarray  # ±1
    eps_count: float
    eps_compare: float


class Request(NamedTuple):
    stage: str  # "count" | "compare" | "done"
    f: np.ndarray | None = None
    p: float | None = None
    margin_clip: float = MARGIN_CLIP
    p_min: float = P_MIN


class Release(NamedTuple):
    stage: str
    value: float


def setup_node(name: str, X, y, eps_count: float, eps_compare: float):
    """Node-side setup (``PartySpec.setup``); the state is the tuple of stages already released."""
    return NodeConfig(str(name), np.asarray(X, float), np.asarray(y, float), float(eps_count), float(eps_compare)), ()


def compare_sensitivity(margin_clip: float, p_min: float) -> float:
    """Δ: the length of the interval every d_j lies in (see the module docstring)."""
    return float(margin_clip) + math.log(2.0) - math.log(float(p_min))


def loss_difference(f: np.ndarray, X: np.ndarray, y: np.ndarray, p: float, margin_clip: float, p_min: float):
    """d_j = ℓ(y_j clip(fᵀx_j, ±L)) − ℓ_const(y_j) per record."""
    m = y * np.clip(X @ np.asarray(f, float), -margin_clip, margin_clip)
    pc = float(np.clip(p, p_min, 1.0 - p_min))
    const = np.where(y > 0, -math.log(pc), -math.log1p(-pc))
    return np.logaddexp(0.0, -m) - const


def _check_compare(cfg: NodeConfig, inbox: Request) -> None:
    """The public values the sensitivity Δ rests on (a hostile assembler could send others)."""

    L, pm = inbox.margin_clip, inbox.p_min
    if not (isinstance(L, (int, float, np.floating)) and math.isfinite(L) and L > 0):
        raise PolicyRefusal(f"node {cfg.name!r} refused the comparison: margin clip L={L!r} must be finite and > 0")
    if not (isinstance(pm, (int, float, np.floating)) and 0.0 < pm <= 0.5):
        raise PolicyRefusal(f"node {cfg.name!r} refused the comparison: p_min={pm!r} must be in (0, 1/2]")
    f = None if inbox.f is None else np.asarray(inbox.f, dtype=float)
    if f is None or f.shape != (cfg.X.shape[1],) or not np.all(np.isfinite(f)):
        raise PolicyRefusal(f"node {cfg.name!r} refused the comparison: the model must be {cfg.X.shape[1]} finite "
                            "numbers")
    p = inbox.p
    if not (isinstance(p, (int, float, np.floating)) and math.isfinite(p)):
        raise PolicyRefusal(f"node {cfg.name!r} refused the comparison: the base rate p={p!r} must be finite")


def node_step(cfg: NodeConfig, state, inbox: Request, *, rng: np.random.Generator):
    """Release the requested statistic with Laplace noise from the node's own generator (each stage once)."""

    done = tuple(state or ())
    if inbox.stage in ("count", "compare") and inbox.stage in done:
        raise PolicyRefusal(f"node {cfg.name!r} refused a second {inbox.stage!r} release in one run")
    if inbox.stage == "count":
        count = float(np.count_nonzero(cfg.y > 0))  # Δ₁ = 1
        value = count + rng.laplace(0.0, 1.0 / cfg.eps_count)
        return done + ("count",), Release("count", float(value)), [PureDPRelease(cfg.name, -2, cfg.eps_count,
                                                                                 RECORD_REPLACE)]
    if inbox.stage == "compare":
        _check_compare(cfg, inbox)
        d = loss_difference(inbox.f, cfg.X, cfg.y, inbox.p, inbox.margin_clip, inbox.p_min)
        sens = compare_sensitivity(inbox.margin_clip, inbox.p_min)
        value = float(d.sum()) + rng.laplace(0.0, sens / cfg.eps_compare)
        return done + ("compare",), Release("compare", value), [PureDPRelease(cfg.name, -1, cfg.eps_compare,
                                                                              RECORD_REPLACE)]
    if inbox.stage != "done":
        raise PolicyRefusal(f"node {cfg.name!r} refused an unknown stage {inbox.stage!r} (count, compare, done)")
    return done, Release("done", 0.0), []


@dataclass(frozen=True, eq=False)
class AssemblerConfig:
    party_names: tuple[str, ...]
    n_total: int
    f: np.ndarray  # the released consensus model
    margin_clip: float = MARGIN_CLIP
    p_min: float = P_MIN


class AssemblerState(NamedTuple):
    stage: str
    p: float | None = None
    difference: float | None = None


def init_assembler(cfg: AssemblerConfig):
    return AssemblerState("count"), {p: Request("count") for p in cfg.party_names}


def assembler_step(cfg: AssemblerConfig, state: AssemblerState, outboxes: Mapping[str, Release], *, rng):
    total = float(sum(outboxes[p].value for p in cfg.party_names))
    if state.stage == "count":
        p = float(np.clip(total / cfg.n_total, cfg.p_min, 1.0 - cfg.p_min))
        req = Request("compare", f=np.asarray(cfg.f, float), p=p, margin_clip=cfg.margin_clip, p_min=cfg.p_min)
        return AssemblerState("compare", p), {n: req for n in cfg.party_names}, []
    return AssemblerState("done", state.p, total), {n: Request("done") for n in cfg.party_names}, []


def threshold(n_nodes: int, eps_compare: float, margin_clip: float = MARGIN_CLIP, p_min: float = P_MIN) -> float:
    """−MARGIN × the standard deviation of the pooled Laplace noise (√(2N)·Δ/ε_c): public."""
    return -MARGIN * math.sqrt(2.0 * n_nodes) * compare_sensitivity(margin_clip, p_min) / eps_compare


def is_private(cfg: NodeConfig) -> bool:
    return True
