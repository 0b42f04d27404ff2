"""Accounting of the gossip protocol: the noise multiplier for a target ε, and each node's ε from its events.

Every release of a node (K range counts, T gradient sums) is a Gaussian mechanism with the same noise
multiplier z = σ/Δ (:mod:`.mechanism`). The node's total over the run is the adaptive composition of its
K + T releases, computed by the project's PLD accountant
(:func:`~dpadmm.privacy.accountants.gaussian_epsilon`, ε = ∞ if it fails); :func:`noise_multiplier_for`
calibrates z with :func:`~dpadmm.privacy.accountants.calibrate_noise_multiplier`, which never overspends. The
guarantee of the run is the worst node's (a neighbouring dataset changes one record, held by one node).
"""

from __future__ import annotations

import math

from ...privacy.accountants import calibrate_noise_multiplier, gaussian_epsilon
from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.ledger import PrivacyLedger, PrivacyReport
from .schedule import gdp_mu

MECHANISM = ("noisy-gradient gossip: each node releases its clipped gradient sum with Gaussian noise from its own "
             "generator every round (and, without declared bounds, noisy threshold counts for a DP column range); "
             "neighbours average the broadcast models (post-processing)")


def noise_multiplier_for(epsilon: float, delta: float, sensitivities, method: str = "pld") -> float:
    """The smallest σ/Δ for which one node's releases (one per entry of ``sensitivities``, each with σ = z·Δ)
    compose to (ε, δ)-DP — checked on the multipliers σ/Δ exactly as the ledger will compute them from the events
    (floating-point rounding can split them into groups the PLD discretises differently), nudged up until the
    check passes: calibration never overspends the reported ε.

    The start: m Gaussian releases with one multiplier z compose exactly to μ-GDP with μ = √m/z, so the z of the
    (ε, δ) curve's μ (:func:`.schedule.gdp_mu`) is the answer up to the PLD's discretisation, and one or two
    PLD checks confirm it (the accountant's search takes ~20; it is the fallback). The μ-GDP point itself is not
    checked: the PLD's pessimistic discretisation puts its ε a hair above the target (on every (n, d, ε) tried, from
    2,000 to 50,000 rows, 4 to 30 columns, ε from 0.5 to 10), so the first check is at z·(1 + 10⁻⁶) — the multiplier
    the second check used to confirm, one PLD (~5 ms) sooner; were the GDP point itself to pass, the noise is
    10⁻⁶ larger than it needed to be, never smaller."""
    sens = [float(s) for s in sensitivities]
    try:
        z = math.sqrt(len(sens)) / gdp_mu(float(epsilon), float(delta)) if method == "pld" else math.nan
    except (ValueError, OverflowError, ArithmeticError):  # an extreme ε: the accountant's own search
        z = math.nan
    if math.isfinite(z) and z > 0:
        z *= 1.0 + 1e-6  # the first nudge (docstring)
    else:
        z = float(calibrate_noise_multiplier(float(epsilon), float(delta), len(sens), method))
    for k in range(1, 200):
        if gaussian_epsilon([(z * s) / s for s in sens], float(delta), method) <= float(epsilon):
            return z
        z *= 1.0 + 1e-6 * 2.0 ** min(k, 12)
    return z * 1.01


def _per_node(ledger: PrivacyLedger, delta: float, method: str) -> dict[str, float]:
    """``ledger.gaussian_epsilons``, with one accountant call per distinct multiset of noise multipliers (the
    nodes of a run usually release the same ones): the same numbers, a fifth of the PLD work on 5 nodes."""
    done: dict[tuple, float] = {}
    out = {}
    for party, events in ledger.by_party().items():
        key = tuple(sorted(float(e.noise_multiplier) for e in events if isinstance(e, GaussianRelease)))
        if key not in done:
            done[key] = gaussian_epsilon(key, delta, method)
        out[party] = done[key]
    return out


def _loss_assumption(target) -> dict:
    """The report's line for the loss's gradient bound (proofs: :mod:`.mechanism`, :mod:`.targets`)."""
    if target is None or target.loss == "logistic":
        return {"name": "logistic loss: |l'| <= 1, so one record moves the gradient sum by <= 2 sqrt(R^2 + 1)",
                "status": "by construction"}
    what = {"squared": "squared loss with the prediction clipped to the label range: |r| <= 2",
            "huber": f"Huber loss: |r| <= delta = {target.huber_delta:g}",
            "multinomial": f"softmax over {target.classes} classes: ||p - e_y|| <= sqrt(2)"}[target.loss]
    lbl = "; labels mapped to [-1, 1] by the label bounds and clipped" if target.regression else ""
    return {"name": f"{what}{lbl}, so one record moves the gradient sum by <= 2 * {target.weight_bound:.4g} * "
                    "sqrt(R^2 + 1)", "status": "enforced by the node (targets.py)"}


def gossip_report(ledger: PrivacyLedger, *, delta: float, rounds: int, range_rounds: int, noise_multiplier: float,
                  bounds_source: str, notes=(), method: str = "pld", target=None, validation=None) -> PrivacyReport:
    """:class:`PrivacyReport` of a run: per node, its Gaussian releases composed by the accountant, plus the pure ε of
    its validation releases by basic composition (:mod:`.validation`; ``validation`` its outcome, None: none made);
    ε = the worst node's. ``target`` (:class:`.targets.Target`; None: binary logistic): the loss whose gradient bound
    the report names."""
    pure = ledger.pure_epsilons()
    per = {p: v + pure.get(p, 0.0) for p, v in _per_node(ledger, delta, method).items()}
    eps = max(per.values()) if per else math.inf
    rdp = {p: v + pure.get(p, 0.0) for p, v in _per_node(ledger, delta, "rdp").items()}
    releases = [{"name": "range counts (DP column bounds)", "count": int(range_rounds),
                 "noise_multiplier": noise_multiplier}] if range_rounds else []
    releases.append({"name": "clipped gradient sums", "count": int(rounds), "noise_multiplier": noise_multiplier})
    notes = list(notes)
    if validation is not None:
        releases.append({"name": "model-vs-DP-base-rate comparison (Laplace, pure DP)", "count": 1,
                         "epsilon": float(validation.epsilon), "handed_over": validation.handed_over})
        notes.append(f"includes the DP validation of the consensus model against the DP base rate (Laplace, epsilon "
                     f"{validation.epsilon:.4g} per node, basic composition with the rounds'); handed over: "
                     f"{validation.handed_over}")
    assumptions = [
        {"name": "column bounds: every column mapped to [-1, 1] and clipped, rows clipped to ||z|| <= R, intercept 1",
         "status": "enforced by the node (mechanism.prepare)", "detail": bounds_source},
        _loss_assumption(target),
        {"name": "every model broadcast is post-processing of the node's noisy gradient sums and public values",
         "status": "by construction"},
    ]
    return PrivacyReport(
        epsilon=float(eps), delta=float(delta), accountant=f"{method} (dp-accounting), per node, max over nodes",
        relation=RECORD_REPLACE.key, relation_description=RECORD_REPLACE.description,
        per_party={p: float(v) for p, v in per.items()}, rdp_epsilon=max(rdp.values()) if rdp else None,
        assumptions=assumptions, mechanism=MECHANISM, noise_multiplier=float(noise_multiplier),
        rounds=int(rounds + range_rounds), notes=notes, releases=releases)
