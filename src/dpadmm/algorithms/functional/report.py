"""Privacy of FDP-ADMM [Zhou, Thm 1, Lemma 1–2] and of the distributed FPCA step.

Per iteration, worker i releases ``w̃_i^l = w_i^l + N(0, σ_{i,l}² I_K)`` with

    σ_{i,l} = z · Δ_{i,l},   Δ_{i,l} = 2 c_1 / (m_i (ρ + 1/η_i^l)),   z = sqrt(2 ln(1.25/δ)) / ε   [Zhou, Thm 1]

(Δ corrected: [Zhou, Lemma 2] prints m_i², the update moves by at most 2c_1/(m_i(ρ + 1/η)) when one
of the worker's samples is replaced, ‖A_ij‖ ≤ c_1 — docs/algorithms.md §3). The classical Gaussian-mechanism
bound behind Thm 1 holds for ε ≤ 1; the tight accountants below hold for every z.

The run's total: a neighbouring dataset replaces one sample of one worker, so the guarantee is the
worst worker's composition of its own releases — L Gaussian mechanisms (plus one for the private
FPCA moment release, if used) — computed by dp-accounting's PLD (headline) and RDP accountants;
beside it the paper's view, advanced composition [Zhou, Lemma 1] of L (ε, δ)-DP iterations:
``(sqrt(2L ln(1/δ'))ε + Lε(e^ε − 1), Lδ + δ')`` with δ' = δ.
"""

from __future__ import annotations

import math
from typing import Iterable

from ...privacy.accountants.composition import advanced_composition
from ...privacy.accountants.gaussian import calibrate_noise_multiplier, gaussian_epsilon
from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.ledger import PrivacyLedger, PrivacyReport
from ...privacy.threats import finish


def zhou_sensitivity(*, c1: float, m: int, rho: float, eta: float = math.inf) -> float:
    """Corrected l2 sensitivity of the local update: 2c_1/(m(ρ + 1/η)) (η = ∞: exact step, 2c_1/(mρ))."""
    return 2.0 * c1 / (m * (rho + (0.0 if math.isinf(eta) else 1.0 / eta)))


def iteration_noise_multiplier(epsilon: float, delta: float) -> float:
    """z = σ/Δ = sqrt(2 ln(1.25/δ))/ε [Zhou, Thm 1] (0 for ε = ∞: no noise)."""
    if math.isinf(epsilon):
        return 0.0
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def zhou_sigma(*, c1: float, m: int, rho: float, eta: float, epsilon: float, delta: float) -> float:
    """σ_{i,l} of [Zhou, Thm 1] with the corrected sensitivity: 2c_1 sqrt(2 ln(1.25/δ)) / (m ε (ρ + 1/η))."""
    return iteration_noise_multiplier(epsilon, delta) * zhou_sensitivity(c1=c1, m=m, rho=rho, eta=eta)


def calibrate_total(total_epsilon: float, delta: float, rounds: int, *, extra_releases: int = 0,
                    accountant: str = "pld") -> float:
    """Noise multiplier z such that ``rounds + extra_releases`` Gaussian releases compose to
    (total_epsilon, delta) (never overspends: checked with the same accountant)."""
    return calibrate_noise_multiplier(total_epsilon, delta, rounds + extra_releases, accountant)


def total_epsilon(noise_multipliers: Iterable[float], delta: float, accountant: str = "pld") -> float:
    """Composed ε at δ of one worker's releases (inf if any multiplier is 0)."""
    return gaussian_epsilon(list(noise_multipliers), delta, accountant)


def paper_bound(eps_iter: float, delta_iter: float, rounds: int, delta_prime: float | None = None) -> dict:
    """[Zhou, Lemma 1] (advanced composition) of ``rounds`` (ε, δ)-DP iterations."""
    dp = delta_iter if delta_prime is None else delta_prime
    if not math.isfinite(eps_iter) or rounds <= 0:
        return {"name": "[Zhou, Lemma 1] advanced composition", "epsilon": math.inf, "delta": 1.0}
    e, d = advanced_composition(eps_iter, delta_iter, rounds, dp)
    return {"name": "[Zhou, Lemma 1] advanced composition", "epsilon": e, "delta": d,
            "epsilon_per_iteration": eps_iter, "delta_per_iteration": delta_iter, "delta_prime": dp,
            "valid": eps_iter <= 1.0,
            "caveat": "" if eps_iter <= 1.0 else "[Zhou, Thm 1] uses the classical Gaussian mechanism, stated for epsilon <= 1"}


def _merge_rounding(mults: list[float]) -> list[float]:
    """σ/Δ of rounds whose Δ differs comes back with rounding differences (~1e-16); multipliers equal
    to 1e-9 relative are replaced by their group's minimum (conservative) so the accountant composes each
    group as one self-composed event (mixed multipliers, e.g. shares of a budget, form several groups)."""
    if not mults:
        return []
    order = sorted(range(len(mults)), key=lambda i: mults[i])
    out = list(mults)
    lo = mults[order[0]]
    for i in order:
        if mults[i] > lo * (1.0 + 1e-9):
            lo = mults[i]
        out[i] = lo
    return out


def zhou_report(ledger: PrivacyLedger, *, delta: float, accountant: str = "pld", eps_iter: float | None = None,
                delta_iter: float | None = None, fpca_noise_multiplier: float | None = None,
                assumptions=(), notes=(), basis_covered: bool = False) -> PrivacyReport:
    """Total privacy of an FDP-ADMM run from its ledger (one party = one worker).

    ``fpca_noise_multiplier``: z of the private-FPCA moment release, composed into every worker's
    total (one extra Gaussian release); ``None`` if the basis did not touch private data
    (fixed basis) or was computed without noise (then the FPCA step is *not* covered: noted).
    ``basis_covered``: the pooled-statistics releases (``algorithms.functional_statistics``, rounds < 0)
    are in the ledger itself and compose with each worker's ADMM releases.
    """
    per = {p: [e for e in evs if isinstance(e, GaussianRelease)] for p, evs in ledger.by_party().items()}
    per = {p: evs for p, evs in per.items() if evs}
    extra = [fpca_noise_multiplier] if fpca_noise_multiplier else []
    mults = {p: _merge_rounding([e.noise_multiplier for e in evs]) + extra for p, evs in per.items()}
    per_party = {p: gaussian_epsilon(v, delta, accountant) for p, v in mults.items()}
    per_rdp = {p: gaussian_epsilon(v, delta, "rdp") for p, v in mults.items()}
    eps = max(per_party.values()) if per_party else math.inf
    rounds = max((sum(e.round >= 0 for e in v) for v in per.values()), default=0)
    n_releases = max((len(v) for v in per.values()), default=0)
    nm = min((e.noise_multiplier for evs in per.values() for e in evs), default=None)
    if eps_iter is None and nm is not None:
        eps_iter = math.sqrt(2.0 * math.log(1.25 / (delta_iter or delta))) / nm
    pb = paper_bound(eps_iter if eps_iter is not None else math.inf, delta_iter or delta, n_releases + len(extra))
    all_notes = list(notes)
    if fpca_noise_multiplier is None and not basis_covered:
        all_notes.append("the FPCA basis is not covered by this epsilon (fixed basis, or FPCA without noise)")
    return PrivacyReport(
        epsilon=eps, delta=delta, accountant=f"dp-accounting {accountant.upper()}",
        relation=RECORD_REPLACE.key, relation_description=RECORD_REPLACE.description,
        per_party=per_party, rdp_epsilon=max(per_rdp.values()) if per_rdp else math.inf,
        paper_bound=pb, assumptions=list(assumptions),
        mechanism="Gaussian on each worker's local model w_i [Zhou, eq. 22, Thm 1]; sensitivity "
                  "2c1/(m_i(rho + 1/eta)) (corrected from [Zhou, Lemma 2]'s m_i^2, docs/algorithms.md §3)",
        noise_multiplier=nm, rounds=rounds, notes=all_notes,
    )


#: a note every private fit's report carries (the estimator's comparison with the best constant)
CALLER_EVALUATION = ("train_pinball_loss_/worse_than_constant_ are computed by the caller from the data it passed to "
                     "fit (an evaluation in this simulation, not a message of the protocol)")


def _user_range(y_range) -> list[dict]:
    return ([{"name": "y_range", "what": f"response range {tuple(y_range)} given by the user",
              "by": "public", "in_total": False, "reason": "public input, no data"}] if y_range is not None else [])


def constant_only_report(ledger: PrivacyLedger, *, delta: float, accountant: str, n_epsilon: float,
                         min_n_epsilon: float, n_ranges: int, z: float, tau: float, quantile_steps: int, y_range,
                         noise_source: str) -> PrivacyReport:
    """The report of a fit with n·ε (``n_epsilon``) below ``min_n_epsilon``: no ADMM run, the whole budget on the
    DP τ-quantile (``quantile_steps`` bisection counts at ``z``, after ``n_ranges`` range releases)."""
    rep = zhou_report(ledger, delta=delta, accountant=accountant,
                      notes=[f"n x epsilon = {n_epsilon:.4g} < {min_n_epsilon:g}: no ADMM run; the whole budget went "
                             "to the DP quantile, handed over as the model", CALLER_EVALUATION],
                      basis_covered=True)
    rep.paper_bound = {"name": "[Zhou, Lemma 1]: not applicable (no ADMM run)"}
    rep.releases = ([{"name": "ranges", "what": "response histogram (asinh bins) -> response range",
                      "by": "each worker, once", "mechanism": "Gaussian", "count": 1,
                      "sensitivity": math.sqrt(2.0), "noise_multiplier": z, "in_total": True}] if n_ranges else []) + [
        {"name": "quantile", "what": f"DP {tau:g}-quantile by noisy bisection: {quantile_steps} counts #{{y <= t_b}}",
         "by": "each worker, once per bisection round", "mechanism": "Gaussian", "count": quantile_steps,
         "sensitivity": 1.0, "noise_multiplier": z, "in_total": True, "handed_over": "dp-constant"}]
    rep.releases += _user_range(y_range)
    return finish(rep, threat_model="functional", noise_source=noise_source)


def fit_report(ledgers, *, delta: float, accountant: str, eps_iter: float, delta_iter: float, rounds: int, z: float,
               shares: tuple, quantile_steps: int, c1: float, c_total: float, fit_intercept: bool,
               clipped_fraction: float | None, curve_clip: float, centered_clip: float, curve_clip_given: bool,
               y_range, basis_kind: str, tau: float, method: str, handed_over: str | None, monitor: bool,
               noise_source: str) -> PrivacyReport:
    """The report of a private fit: every release of every worker (the pooled statistics, the ADMM rounds and the
    comparison: ``ledgers``) composed, with each release listed (its sensitivity, multiplier and share)."""
    ledger = PrivacyLedger()
    for part in ledgers:
        if part is not None:
            ledger.record(part.events)
    clipped = ("; the clipped count is not released" if clipped_fraction is None
               else f"; {clipped_fraction:.2%} of rows were clipped (monitoring)")
    assumptions = [
        {"name": f"||A_ij|| <= c1 = {c_total:.4g} [Zhou, Lemma 2]", "status": "enforced",
         "detail": f"standardised scores clipped to {c1:g}" + (" plus the unit intercept column" if fit_intercept
                                                               else "") + clipped},
        {"name": "sensitivity 2c1/(m_i(rho + 1/eta))", "status": "corrected",
         "detail": "[Zhou, Lemma 2] prints m_i^2; the update moves by 2c1/(m_i(rho+1/eta)) (docs/algorithms.md §3)"},
        {"name": f"||x~_ij|| <= c_X = {curve_clip:.4g}; ||x~_ij - mean|| <= c2 = {centered_clip:.4g}",
         "status": "enforced",
         "detail": "curves clipped in L2 before the mean release (sensitivity sqrt(10)) and, centred, before the "
                   "moment release (sensitivity (3/sqrt 2) c2^2); responses clipped to the range"
                   + ("; c_X given by the user" if curve_clip_given else
                      "; c_X from the workers' noisy norm histograms")},
    ]
    notes = (["monitor=True: monitoring values in history_ (and clipped_fraction_) were computed from the workers' "
              "data and left them un-noised; they are NOT covered by the guarantee"] if monitor else [])
    notes.append(CALLER_EVALUATION)
    Ws, Wq, Wc = shares
    zs = z / math.sqrt(Ws)
    releases = []
    if y_range is None or not curve_clip_given:
        hist = [h for h, need in (("response histogram (asinh bins)", y_range is None),
                                  ("curve-norm histogram (log bins)", not curve_clip_given)) if need]
        releases.append({"name": "ranges", "what": " + ".join(hist) + " -> response location/scale and c_X",
                         "by": "each worker, once", "mechanism": "Gaussian", "count": 1,
                         "sensitivity": math.sqrt(2.0 * len(hist)), "noise_multiplier": zs, "in_total": True})
    releases.append({"name": "mean", "what": "sums of the clipped (projected) curves, of the clipped response and "
                                             "its square, and of the clipped curves' squared norms -> mean curve, "
                                             "response location and scale, spread of the curves",
                     "by": "each worker, once", "mechanism": "Gaussian", "count": 1,
                     "sensitivity": math.sqrt(10.0), "noise_multiplier": zs, "in_total": True,
                     "curve_clip": curve_clip})
    releases.append({"name": "moments", "what": ("moment sum of the centred, clipped curves -> FPCA basis"
                                                 if basis_kind == "private-fpca" else
                                                 f"moment sum of the centred, clipped {basis_kind} scores -> score "
                                                 "scales"),
                     "by": "each worker, once", "mechanism": "Gaussian (symmetric matrix)", "count": 1,
                     "sensitivity": 4.0 * float(centered_clip) ** 2, "noise_multiplier": zs, "in_total": True})
    releases.append({"name": "quantile", "what": f"DP {tau:g}-quantile of the response by noisy bisection: "
                                                f"{quantile_steps} counts #{{y <= t_b}} -> the DP constant and "
                                                "the response's location",
                     "by": "each worker, once per bisection round", "mechanism": "Gaussian",
                     "count": quantile_steps, "sensitivity": 1.0,
                     "noise_multiplier": z * math.sqrt(quantile_steps / Wq), "in_total": True})
    releases.append({"name": "compare", "what": "sum of training pinball-loss differences, model - DP constant "
                                               "(clipped to the range) -> hand over the better",
                     "by": "each worker, once after the ADMM", "mechanism": "Gaussian", "count": 1,
                     "sensitivity": "2 max(tau, 1 - tau) * BAND (prediction band about the DP constant, "
                                    "in response scales)",
                     "noise_multiplier": z / math.sqrt(Wc), "in_total": True, "handed_over": handed_over})
    releases.append({"name": "admm", "what": "noisy local model w~_i [Zhou, eq. 22]", "by": "each worker, every round",
                     "mechanism": "Gaussian", "count": rounds,
                     "sensitivity": "2c1/(m_i(rho + 1/eta_l))" if method != "exact" else "2c1/(m_i rho_l)",
                     "noise_multiplier": z, "in_total": True})
    releases += _user_range(y_range)
    rep = zhou_report(ledger, delta=delta, accountant=accountant, eps_iter=eps_iter, delta_iter=delta_iter,
                      assumptions=assumptions, notes=notes, basis_covered=True)
    rep.releases = releases
    return finish(rep, threat_model="functional", noise_source=noise_source)
