"""The shared model's safety net: a DP comparison of the consensus model with the DP base rate, on a declared
slice of ε (issue 38: on 1,380 rows over 5 nodes at ε = 0.5 the consensus model was worse than the base rate on
every seed).

A private gossip run (binary, logistic) spends the slice ε_v = :func:`slice_epsilon` here — ``share`` =
:data:`VALIDATION_SHARE` of its ε, at most what resolves d nats over all rows (public: ε, n, N, d) — and the rest,
ε − ε_v, on its range and gradient rounds (:func:`.params.plan`). The cap is what keeps more ε from buying a worse
model where ε is large: 20% of ε = 50 is 10 ε spent on a comparison that resolves 4 nats over 1,169 rows of 55
columns while the rounds lose a fifth of their budget (modeldata::attrition's departments: 0.3186 at ε = 50 with the
rounds at 40; the same protocol without noise 0.3061, the base rate 0.3916). After the last round the consensus model
``w̄`` (the mean of the nodes' models, a post-processing of their broadcasts) is public. Part of the slice, ε_b,
buys a better DP base rate, the rest, ε_c, the comparison (:func:`split`, public: from ε, n and N only): ε_b is
what puts the pooled count's standard deviation √(2N)/ε_b at :data:`RATE_SD` of n (a base rate off by 0.03 costs
at most 0.002 nats a row), kept between a quarter and three quarters of the slice — on small tables the comparison
cannot be won anyway (below) and the base rate is what is handed over, on large ones the count is cheap.

``count`` — node i releases ``Σ_j 1{y_j = +1} + Lap(1/ε_b)`` (Δ = 1: ε_b-DP, pure). The pooled count is combined
with the range rounds' pooled noisy positive count (Gaussian, public standard deviation; absent with declared
bounds) by inverse-variance weighting, and ``p`` = the combined count / n, clipped to [p_min, 1 − p_min]: a
post-processing of released values. (The range count alone, at the rounds' noise multiplier, was off by up to 0.2
on 558 rows at ε = 1: AER::SwissLabor, seed 100.) The range count enters as released, unclipped
(``RouterState.positives``): the rate behind the starting intercept is clipped to [sd/n, 1 − sd/n], which is 1/2 at
ε = 0.5 on modeldata::attrition (1,169 rows, sd 772), so that clipped rate, weighed as if unbiased, pulled p towards
1/2 by more at ε = 1 than at ε = 0.5 (its weight grows faster than its bias falls) — the handed-over DP base rate
was worse with more ε on every seed (issue 38: +1.5e-4, 8 seeds).

``compare`` — node i releases ``D̃_i = Σ_j d_j + Lap(Δ/ε_c)`` on its own rows, with

    d_j = ℓ(y_j s_j) − c(y_j),   s_j = clip(w̄·x̃_j, −L, L),   ℓ(m) = log(1 + e^{−m}),
    c(+1) = −log p,  c(−1) = −log(1 − p),  p clipped to [p_min, 1 − p_min]

(:func:`dpadmm.algorithms.consensus.baseline.loss_difference`, the M-ADMM fallback's loss difference: one home).

*Relation*: ``RECORD_REPLACE`` (as the rounds). *Sensitivity* (:func:`validation_sensitivity`): ℓ is decreasing
with ``ℓ(−L) − ℓ(L) = L``, so for y = +1, ``d ∈ [ℓ(L) + log p, ℓ(L) + L + log p]`` and for y = −1,
``d ∈ [ℓ(L) + log(1 − p), ℓ(L) + L + log(1 − p)]``: every d_j, whatever its record, lies in one interval of length
``Δ = L + |log p − log(1 − p)| = L + |logit p|``, and replacing one record moves the sum by at most Δ. *Enforced
by*: the margin clip to the public L, the clip of p to the public [p_min, 1 − p_min] (Δ computed from the clipped
p), and a model made finite before use (:func:`.mechanism.bounded`), so every margin is a number. Laplace noise of
scale Δ/ε_c: ε_c-DP (pure); ε_b + ε_c = ε_v.

*Accounting*: each node's total is its rounds' (ε₁, δ) (the PLD accountant, at ε − ε_v) plus ε_b + ε_c by
basic composition (pure DP adds to ε and leaves δ): at most ε, δ. The events are :class:`PureDPRelease`\\ s in the
run's ledger; :func:`.report.with_validation` adds them to each node's ε.

*Decision* (post-processing of the pooled ``D̃ = Σ_i D̃_i``): the consensus model, its margins clipped to ±L, is
handed over only if ``D̃ < −MARGIN·√(2N)·Δ/ε_c`` (MARGIN noise standard deviations of the pooled Laplace noise,
MARGIN = 2 as the M-ADMM fallback); otherwise the DP base rate. A model whose loss on the nodes' rows is no lower
than the DP base rate's (Σ d_j ≥ 0) is then handed over only if the Laplace sum falls below −2 sd: probability
0.5·e^{−2√2} = 3.0% for one node and Φ(−2) = 2.3% as N grows (``tests/unit/test_gossip_validation.py`` checks
≤ 3.1% for N = 1…16). The comparison is on the training rows (what the nodes hold): a DP model's loss there is
close to its held-out loss, and a model that wins by 2 noise sds wins by ``2√(2N)Δ/(ε_c n)`` nats per row — on
small tables (n·ε_c a few hundred) that is more than any logistic model gains, so the base rate is handed over.

*Where it runs*: the two releases are a declared stage of the nodes' protocol, two rounds after the last gradient
round (:class:`ValidationRequest` → :class:`ValidationRelease`, answered by :func:`answer` — the one home of a node's
side, called by :func:`.node.node_step` at a node and by :func:`validate` in a simulation with the same generators as
before). A node answers only what its Setup declared (``GossipOptions.validation`` = (ε_b, ε_c), priced by its policy
against its budget at Setup, :mod:`.policy`), each stage once per run (its state records them: a second request is
refused, whatever model it carries), with the ε it declared (a request at another ε is refused), after its last
gradient round, and checks what Δ rests on (a finite model of its width, a finite p, L finite > 0, p_min in
(0, 1/2]); Δ is computed from the L, p_min and clipped p it received, so its release is ε-DP whatever the coordinator
sends. A deployed run (the rows stay at the nodes: routed gRPC or peer to peer) steps these two rounds after the
others (:func:`.driver.fit`); a simulation with the rows here runs :func:`validate` as before (same numbers)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..._jsonio import atomic_write
from ...privacy.events import RECORD_REPLACE, PureDPRelease
from ...privacy.policy import PolicyRefusal
from ..consensus.baseline import MARGIN, MARGIN_CLIP, P_MIN, loss_difference
from .mechanism import bounded

VALIDATION_SHARE = 0.2  # the share of ε a private binary gossip run spends on the comparison (declared)
RATE_SD = 0.03  # the DP base rate's target standard deviation (a share of n) that sets the count's part of the slice


class Validation(NamedTuple):
    """The comparison's public outcome: what was handed over, the DP base rate p, the pooled noisy difference, its
    threshold, the margin clip of a handed-over model (None for the base rate) and the per-node ε spent."""

    handed_over: str  # "model" | "dp-base-rate"
    base_rate: float
    difference: float
    threshold: float
    margin_clip: float | None
    epsilon: float


def validation_sensitivity(p: float, margin_clip: float = MARGIN_CLIP, p_min: float = P_MIN) -> float:
    """Δ = L + |logit p| with p clipped to [p_min, 1 − p_min] (the module docstring's proof)."""
    pc = float(np.clip(p, p_min, 1.0 - p_min))
    return float(margin_clip) + abs(math.log(pc) - math.log1p(-pc))


class ValidationRequest(NamedTuple):
    """Coordinator → node (the validation stage): ``stage`` ``"count"`` (at ``epsilon`` = ε_b) or ``"compare"`` (at
    ε_c, of the public consensus model ``w`` (d + 1,) against the DP base rate ``p``, margin clip ``margin_clip``,
    rate clip ``p_min``)."""

    stage: str
    epsilon: float
    w: np.ndarray | None = None
    p: float | None = None
    margin_clip: float = MARGIN_CLIP
    p_min: float = P_MIN


class ValidationRelease(NamedTuple):
    """Node → coordinator: the stage's noisy value (a count, or a sum of loss differences)."""

    stage: str
    value: float


def _number(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def answer(name: str, Xt: np.ndarray, y: np.ndarray, declared, done: tuple, request,
           rng: np.random.Generator) -> tuple[tuple, ValidationRelease, list]:
    """Node ``name``'s side of the stage on its own prepared rows ``Xt`` (intercept last) and labels ``y`` (±1):
    ``declared`` = (ε_b, ε_c) from its Setup (None: no validation declared), ``done`` the stages it has released.
    Returns (done + the stage, its release, its event); refuses (nothing drawn or released) a stage not declared, a
    second one, an ε other than declared, or a request whose values the sensitivity rests on are not numbers."""

    def refuse(what: str):
        return PolicyRefusal(f"node {name!r} refused the validation: {what}")

    if not isinstance(request, ValidationRequest) or request.stage not in ("count", "compare"):
        raise refuse(f"an unknown stage {getattr(request, 'stage', request)!r} (count, then compare)")
    if declared is None:
        raise refuse("its Setup declared no validation (no ε priced for it)")
    stage = request.stage
    if stage in done:
        raise refuse(f"a second {stage!r} release in one run (a node answers the validation once per run)")
    eps = float(declared[0] if stage == "count" else declared[1])
    sent = _number(request.epsilon)
    if sent is None or not math.isclose(sent, eps, rel_tol=1e-12, abs_tol=0.0):
        raise refuse(f"the {stage} at epsilon={request.epsilon!r}: its Setup declared {eps:.6g} (what its policy "
                     "priced)")
    if stage == "count":
        value = float(np.count_nonzero(np.asarray(y) > 0)) + rng.laplace(0.0, 1.0 / eps)  # Δ = 1
        return done + (stage,), ValidationRelease(stage, float(value)), [PureDPRelease(name, -2, eps, RECORD_REPLACE)]
    if "count" not in done:
        raise refuse("a compare before its count (the stage is count, then compare)")
    L, pm, p = _number(request.margin_clip), _number(request.p_min), _number(request.p)
    if L is None or L <= 0:
        raise refuse(f"the margin clip L={request.margin_clip!r} must be finite and > 0")
    if pm is None or not 0.0 < pm <= 0.5:
        raise refuse(f"p_min={request.p_min!r} must be in (0, 1/2]")
    if p is None:
        raise refuse(f"the base rate p={request.p!r} must be finite")
    try:
        w = np.asarray(request.w, dtype=np.float64)
    except (TypeError, ValueError):
        w = np.zeros(0)
    if w.shape != (Xt.shape[1],) or not np.all(np.isfinite(w)):
        raise refuse(f"the model must be {Xt.shape[1]} finite numbers")
    pc = float(np.clip(p, pm, 1.0 - pm))
    d = loss_difference(bounded(w), Xt, np.asarray(y, float), pc, L, pm)
    value = float(d.sum()) + rng.laplace(0.0, validation_sensitivity(pc, L, pm) / eps)
    return done + (stage,), ValidationRelease(stage, value), [PureDPRelease(name, -1, eps, RECORD_REPLACE)]


def compare_release(name: str, Xt: np.ndarray, y: np.ndarray, w: np.ndarray, p: float, eps: float,
                    rng: np.random.Generator) -> tuple[float, PureDPRelease]:
    """Node ``name``'s noisy loss difference of ``w`` (on its prepared rows ``Xt``, intercept column last) against
    the constant p, and its event (:func:`answer`'s compare, of the model put in the public box and p clipped first,
    as the simulation's :func:`combine` sends them)."""
    req = ValidationRequest("compare", eps, bounded(np.asarray(w, float)), float(np.clip(p, P_MIN, 1.0 - P_MIN)))
    _, out, events = answer(name, Xt, y, (eps, eps), ("count",), req, rng)
    return out.value, events[0]


def count_release(name: str, y: np.ndarray, eps: float, rng: np.random.Generator) -> tuple[float, PureDPRelease]:
    """Node ``name``'s noisy positive count (Δ = 1) and its event (:func:`answer`'s count)."""
    _, out, events = answer(name, np.zeros((0, 1)), y, (eps, eps), (), ValidationRequest("count", eps), rng)
    return out.value, events[0]


def threshold(n_nodes: int, p: float, eps: float) -> float:
    """−MARGIN × the pooled Laplace noise's standard deviation √(2N)·Δ/ε_c: public."""
    return -MARGIN * math.sqrt(2.0 * n_nodes) * validation_sensitivity(p) / eps


def node_generators(noise_seed: int | None, n_nodes: int) -> list[np.random.Generator]:
    """Each node's generator for its validation noise (apart from its rounds' stream; OS entropy without a seed)."""
    if noise_seed is None:
        return [np.random.default_rng() for _ in range(n_nodes)]
    return [np.random.default_rng(np.random.SeedSequence([int(noise_seed), 38, i])) for i in range(n_nodes)]


def pooled_rate(laplace_count: float, laplace_sd: float, n: int, prior=None) -> float:
    """The DP base rate from the pooled Laplace count (standard deviation ``laplace_sd``) and, if given, the range
    rounds' pooled count ``prior = (count, sd)``: their inverse-variance mean / n (post-processing)."""
    c, v = float(laplace_count), float(laplace_sd) ** 2
    if prior is not None and math.isfinite(prior[0]) and prior[1] > 0:
        c0, v0 = float(prior[0]), float(prior[1]) ** 2
        c = (c / v + c0 / v0) / (1.0 / v + 1.0 / v0)
    return float(np.clip(c / n, P_MIN, 1.0 - P_MIN))


def slice_epsilon(epsilon: float, share: float, n: int, n_nodes: int, d: int) -> float:
    """The validation's ε: ``share``·ε, at most the least slice whose :func:`split` gives the comparison ε_c* — a
    threshold of d nats (the number of columns) over all rows at the worst sensitivity Δ_max (p at the clip P_MIN),
    ``ε_c* = MARGIN·√(2N)·Δ_max/d`` — and the count ε_b* = √(2N)/(RATE_SD·n) where the split lets it
    (public: ε, n, N, d). Why d nats: the training rows favour a fitted d-column model over the constant by about d
    nats that the test rows do not see (AIC: each fitted parameter's in-sample optimism is one nat), so a comparison
    finer than that resolves the fit's optimism, not its worth, while its ε is the rounds' loss. The rounds get the
    rest, which grows with ε."""
    root = math.sqrt(2.0 * n_nodes)
    eps_b = root / (RATE_SD * n)
    eps_c = MARGIN * root * validation_sensitivity(P_MIN) / max(int(d), 1)
    need = max(4.0 * eps_c / 3.0, min(eps_b + eps_c, 4.0 * eps_c))  # split keeps ε_b in [need/4, 3·need/4]
    return min(float(share) * float(epsilon), need)


def split(epsilon: float, n: int, n_nodes: int) -> tuple[float, float]:
    """(ε_b, ε_c) of the slice ``epsilon``: ε_b = √(2N)/(RATE_SD·n) kept in [ε/4, 3ε/4], ε_c the rest (public)."""
    eps = float(epsilon)
    eps_b = min(0.75 * eps, max(0.25 * eps, math.sqrt(2.0 * n_nodes) / (RATE_SD * n)))
    return eps_b, eps - eps_b


def validate(names, Xts, ys, w: np.ndarray, *, epsilon: float, rngs, ledger, prior=None) -> Validation:
    """The comparison in a simulation (the rows here): each node's :func:`answer` on its own rows with its own
    generator, combined by :func:`combine`."""
    n = int(sum(len(v) for v in ys))
    declared = split(epsilon, n, len(names))
    done = {nm: () for nm in names}

    def ask(requests):
        out = {}
        for nm, x, yv, r in zip(names, Xts, ys, rngs):
            done[nm], rel, events = answer(nm, x, yv, declared, done[nm], requests[nm], r)
            out[nm] = (rel, events)
        return out

    return combine(ask, names, n, w, epsilon=epsilon, ledger=ledger, prior=prior)


def combine(ask, names, n: int, w: np.ndarray, *, epsilon: float, ledger, prior=None) -> Validation:
    """The coordinator's side (post-processing of the released values): ``ask(requests)`` delivers one
    :class:`ValidationRequest` per node and returns each node's (release, events) — :func:`validate`'s simulated
    nodes, or one round of a backend's nodes — a count at ε_b, then the loss difference at ε_c (:func:`split`), each
    stage's events recorded in ``ledger`` before the decision; ``prior``: the range rounds' pooled positive count and
    its standard deviation (None: none released)."""
    eps_b, eps_c = split(epsilon, n, len(names))
    counts = ask({nm: ValidationRequest("count", eps_b) for nm in names})
    ledger.record([e for nm in names for e in counts[nm][1]])
    p = pooled_rate(sum(float(counts[nm][0].value) for nm in names), math.sqrt(2.0 * len(names)) / eps_b, n, prior)
    w = bounded(np.asarray(w, float))
    out = ask({nm: ValidationRequest("compare", eps_c, w, p) for nm in names})
    ledger.record([e for nm in names for e in out[nm][1]])
    diff = float(sum(float(out[nm][0].value) for nm in names))
    thr = threshold(len(names), p, eps_c)
    won = diff < thr
    return Validation("model" if won else "dp-base-rate", p, diff, thr, MARGIN_CLIP if won else None, float(epsilon))


#: the released comparison, kept beside a run's checkpoints (red team 2026-11-29, G1)
STORE = "validation.json"


class _Booked:
    """The ledger, and a list of what was recorded in it."""

    def __init__(self, ledger):
        self.ledger, self.events = ledger, []

    def record(self, events):
        self.events += list(events)
        self.ledger.record(events)


def _folder(path) -> Path:
    """The checkpoint folder of ``path``: the engine resumes from a folder or from its checkpoint file (red team G2)."""
    path = Path(path)
    return path.parent if path.is_file() else path


def released_once(names, Xts, ys, w, *, epsilon: float, rngs, ledger, prior=None, checkpoint_dir=None,
                  resume_from=None, compute=None) -> Validation:
    """:func:`validate`, at most once per run: the comparison runs after the last round, outside the engine's
    checkpoints, so a run resumed from a folder where it was already released reuses those released values (their
    events booked in this run's ledger as drawn once) instead of drawing the slice again — k resumes would otherwise
    average its noise away. A resumed run whose model moved on (more rounds, another plan) gets a fresh comparison,
    booked beside the earlier one's events (both were drawn). What is released is written to the checkpoint folders
    (``checkpoint_dir`` and ``resume_from``), the folders a run can be resumed from. ``compute(ledger)``: the
    comparison when the rows are not here (a deployed run's stage at its nodes, :func:`combine`; ``Xts``, ``ys`` and
    ``rngs`` unused)."""
    folders = [_folder(f) for f in (checkpoint_dir, resume_from) if f is not None]
    model = hashlib.sha256(np.ascontiguousarray(w, dtype=np.float64).tobytes()).hexdigest()
    kept = None
    if resume_from is not None and (_folder(resume_from) / STORE).is_file():
        kept = json.loads((_folder(resume_from) / STORE).read_text())
        spent = [PureDPRelease(str(nm), int(r), float(e), RECORD_REPLACE) for nm, r, e in kept["events"]]
        ledger.record(spent)  # released before this resume: booked again here, drawn once
    if kept is not None and kept.get("model") == model:
        checked = Validation(**kept["validation"])
    else:  # a fresh comparison: the first, or of a model a resumed run moved on (more rounds, another plan: red team
        # G3), booked beside what the earlier comparison spent
        booked = _Booked(ledger)
        checked = (compute(booked) if compute is not None else
                   validate(names, Xts, ys, w, epsilon=epsilon, rngs=rngs, ledger=booked, prior=prior))
        kept = {"validation": checked._asdict(), "model": model,
                "events": (kept["events"] if kept else []) + [(e.party, e.round, e.epsilon) for e in booked.events]}
    for folder in folders:  # whole or as it was (a kill mid-write leaves the previous store)
        if folder.is_dir():
            atomic_write(folder / STORE, (json.dumps(kept, allow_nan=False) + "\n").encode())
    return checked


__all__ = ["VALIDATION_SHARE", "Validation", "ValidationRelease", "ValidationRequest", "answer", "combine",
           "compare_release", "count_release", "node_generators", "pooled_rate", "released_once", "slice_epsilon",
           "split", "threshold", "validate", "validation_sensitivity"]
