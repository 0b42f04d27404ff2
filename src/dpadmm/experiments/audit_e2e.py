"""The end-to-end privacy audit behind ``dpadmm audit --end-to-end``.

For each private algorithm and each neighbouring relation it claims, the audit builds small
worst-case neighbouring datasets D, D', runs the *whole fit* (estimator → engine → backend →
the algorithm's per-party steps, exactly as a user runs it) many times on each with fresh noise,
records everything the adversary of the threat model sees in each run, and turns the best of
several test statistics (:mod:`dpadmm.privacy.audit_e2e`) into an ε lower bound at the stated
confidence. A row is flagged ``caught`` when the lower bound exceeds the ε the fit itself reported.

What the adversary sees is captured from the real run, not re-derived: :func:`_capture` wraps
``engine.run`` so every protocol message a party sends is recorded (the transcript hook every
backend honours), and pooled values the central machine computes (the functional basis and mean
curve, the noisy moment matrices) are taken from the fitted estimator or spied on where they are
made.

Rows flagged ``broken`` must be caught — the test of the test:

- ``hu-eq16-paper``: the vertical share as published [Hu, eq. 16] (docs/algorithms.md §1 erratum: its noise
  lies in range(D_m), so neighbours with different column spaces have disjoint output supports);
- one planted bug per algorithm, patched into the *real* code path for the audit run only
  (``unittest.mock.patch`` of the function the estimator calls), e.g. score clipping skipped or the
  noise drawn at the wrong scale while the ledger still records the right one.

Noise is seeded per run (a reproducible simulation: the auditor is not the adversary); run r on D
and run r on D' use different seeds.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Sequence
from unittest import mock

import numpy as np
from threadpoolctl import threadpool_limits

from ..privacy.audit import AuditResult
from ..privacy.audit_e2e import Subspace, audit_views


METHOD = ("worst-case games (experiments/audit_worst_case.py): the threat model's adversary chooses the canary and, "
          "where it is the coordinator, every message; the real party steps run through the engine; each run scored by "
          "the Gaussian likelihood ratio of everything seen (all rounds) and by a discriminant of the releases' "
          "residuals (reused noise); epsilon from a Gaussian-DP fit of the two score samples (confidence bound on mu, "
          "converted at the claimed delta), Clopper-Pearson alongside. Whole-fit rows: "
          "whole fits run many times on each of two neighbouring datasets; everything the threat model's adversary "
          "sees per run; statistics fitted on 25% of the runs (mean difference, Gaussian likelihood ratios with diagonal, "
          "per-side and full covariance, distance from data-dependent subspaces; on the whole view and per block); "
          "statistic and threshold chosen on half the rest, Clopper-Pearson bounds on the other half; confidence "
          "split over a row's neighbouring pairs")


# ----------------------------------------------------------------------------- plumbing
@dataclass
class Pair:
    """Neighbouring datasets (in whatever form the row's ``fit`` takes) and the subspaces to test."""

    name: str
    data0: Any
    data1: Any
    note: str = ""
    subspaces: tuple[Subspace, ...] = ()


@dataclass
class Row:
    """One audited (mechanism, relation): ``fit(data, seed) -> (view, report)`` runs one whole fit."""

    name: str
    algorithm: str
    relation: str
    adversary: str
    fit: Callable[[Any, int], tuple[np.ndarray, Any]]
    pairs: Sequence[Pair]
    broken: bool = False
    bug: str = ""
    patch: Callable[[], ContextManager] | None = None
    description: str = ""
    claim: Callable[[Any], tuple[float, float]] | None = None  # default: the report's (epsilon, delta)
    # model-based statistics: (pair, raws on D, raws on D') -> {name: (scores on D, scores on D')}; a
    # fit then returns (view, report, raw) with ``raw`` whatever the model needs of that run
    model: Callable[[Pair, list, list], dict] | None = None
    runs_factor: int = 1  # this row runs ``runs_factor`` × the requested runs (cheap, tight instances)
    full_only: bool = False  # left out of ``--quick``


@contextlib.contextmanager
def _capture(senders: Sequence[str] | None = None, receivers: Sequence[str] | None = None):
    """Record protocol messages during the fits inside the block: every message a party sends
    (``senders``: only those parties), or with ``receivers`` every message the hub sends them.

    Wraps ``dpadmm.engine.run`` (which every estimator calls) and hands it a transcript hook, so the
    record is what crossed the party boundary in the real run. Yields a list of
    ``(round, sender, receiver, message)``.
    """
    from .. import engine

    record: list = []
    real_run = engine.run

    def hook(round_, sender, receiver, message, kind):
        if kind != "protocol":
            return
        if receivers is not None:
            if sender == engine.HUB and receiver in receivers:
                record.append((round_, sender, receiver, message))
        elif sender != engine.HUB and (senders is None or sender in senders):
            record.append((round_, sender, receiver, message))

    def run(*args, **kwargs):
        outer = kwargs.get("transcript")
        kwargs.setdefault("blas_threads", None)  # the audit limits BLAS threads once, around all runs

        def both(*a):
            hook(*a)
            if outer is not None:
                outer(*a)

        kwargs["transcript"] = both
        return real_run(*args, **kwargs)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(engine, "run", run))
        real_start = getattr(engine, "start", None)
        if real_start is not None:  # the engine's backend start also caps BLAS per call: the audit caps once
            stack.enter_context(mock.patch.object(
                engine, "start", lambda *a, **k: real_start(*a, **dict({"blas_threads": None}, **k))))
        yield record


@contextlib.contextmanager
def _fast_accounting():
    """Memoise the Gaussian accountant and its calibration during the audit.

    Both are pure functions of (noise multipliers, δ, rounds, method) — the same for every run of a
    row — and a PLD composition costs more than a whole small fit. Every module-level reference
    to them in a loaded ``dpadmm`` module is patched, so the estimators' own code calls the cache.
    """
    import sys
    from functools import lru_cache

    from ..privacy.accountants import gaussian as G

    patches = []
    for fname in ("gaussian_epsilon", "calibrate_noise_multiplier"):
        real = getattr(G, fname)
        cached = lru_cache(maxsize=256)(lambda *a, _f=real: _f(list(a[0]) if isinstance(a[0], tuple) else a[0], *a[1:]))

        def fast(first, *rest, _c=cached, _f=real, **kw):
            if kw:
                return _f(first, *rest, **kw)
            key = tuple(float(v) for v in first) if isinstance(first, (list, tuple, np.ndarray)) else first
            return _c(key, *rest)

        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("dpadmm") and getattr(mod, fname, None) is real:
                patches.append(mock.patch.object(mod, fname, fast))
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        yield


def _seeded(est, seed: int):
    """Seed the estimator's noise (whichever parameter name it takes): a reproducible simulation."""
    params = est.get_params()
    key = "noise_seed" if "noise_seed" in params else "random_state"
    return est.set_params(**{key: int(seed)})


def _claim(report) -> tuple[float, float]:
    eps = float(report.epsilon)
    return eps, float(report.delta)


def audit_row(row: Row, *, runs: int, seed: int = 0, confidence: float = 0.95, progress=None) -> AuditResult:
    """Run ``row``'s whole fit ``runs`` times on each side of each neighbouring pair and bound ε.

    The confidence is split evenly over the pairs (Bonferroni), so the row's bound — the largest
    over its pairs — holds with probability ≥ ``confidence``.
    """
    alpha = (1.0 - confidence) / len(row.pairs)
    runs = int(runs) * int(row.runs_factor)
    ss = np.random.SeedSequence([seed, zlib.crc32(row.name.encode())])
    details, best, claim, delta, blocks = [], 0.0, None, None, None
    t0 = time.perf_counter()
    ctx = row.patch() if row.patch is not None else contextlib.nullcontext()
    with ctx, _fast_accounting(), threadpool_limits(1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for pi, pair in enumerate(row.pairs):
            seeds = ss.spawn(1)[0].generate_state(2 * runs, dtype=np.uint32)
            views, raws = [], []
            for side, data in enumerate((pair.data0, pair.data1)):
                vs, rs = [], []
                for r in range(runs):
                    out = row.fit(data, int(seeds[side * runs + r]))
                    v, report = out[0], out[1]
                    if row.model is not None:
                        rs.append(out[2])
                    if isinstance(v, dict):  # named blocks of the view
                        blocks, start = {}, 0
                        for k, part in v.items():
                            blocks[k] = slice(start, start + np.size(part))
                            start += np.size(part)
                        v = np.concatenate([np.ravel(part) for part in v.values()])
                    vs.append(v)
                    eps_r, delta_r = (row.claim or _claim)(report)
                    if claim is None:
                        claim, delta = eps_r, delta_r
                    # neighbours get the same claim (the fits' noise does not depend on the data)
                    claim, delta = max(claim, eps_r), max(delta, delta_r)
                views.append(np.stack(vs))
                raws.append(rs)
            extra0 = extra1 = None
            if row.model is not None:
                model = row.model(pair, raws[0], raws[1])
                extra0 = {k: v[0] for k, v in model.items()}
                extra1 = {k: v[1] for k, v in model.items()}
            res = audit_views(views[0], views[1], delta=delta, alpha=alpha, subspaces=pair.subspaces,
                              blocks=blocks, extra0=extra0, extra1=extra1)
            res.update(pair=pair.name, note=pair.note)
            details.append(res)
            best = max(best, res["epsilon_lower_bound"])
            if progress:
                progress(f"{row.name} / {pair.name}: lower bound {res['epsilon_lower_bound']:.2f} "
                         f"({res['statistic']}), claimed {claim:.2f}")
    return AuditResult(
        name=row.name, epsilon_claimed=float(claim), epsilon_lower_bound=float(best), delta=float(delta),
        broken=row.broken, samples=int(runs), confidence=float(confidence), caught=bool(best > claim),
        description=row.description,
        details={"end_to_end": True, "algorithm": row.algorithm, "relation": row.relation,
                 "adversary_view": row.adversary, "planted_bug": row.bug or None, "runs_per_dataset": runs,
                 "seconds": round(time.perf_counter() - t0, 1), "pairs": details,
                 "ratio": float(best / claim) if claim else None},
    )


def _unit_rows(A: np.ndarray) -> np.ndarray:
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def _orth(A: np.ndarray) -> np.ndarray:
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    return U[:, s > 1e-10 * s[0]]


# ----------------------------------------------------------------------------- vertical [Hu]
VERT_N, VERT_ROUNDS = 16, 3
HU_PAPER_EPSILON = 1.0


def _vertical_data(seed: int = 3):
    gen = np.random.default_rng(seed)
    D1 = _unit_rows(gen.normal(size=(VERT_N, 2)))
    D2 = _unit_rows(gen.normal(size=(VERT_N, 2)))
    y = np.where(np.arange(VERT_N) % 2 == 0, 1.0, -1.0)
    return D1, D2, y


def _vertical_fit(options: dict, party: str = "party2", side: str = "feature", raw: bool = False):
    """One whole vertical fit. Feature side: the view is every share ``party`` sent (what the
    coordinator and the other parties see). Label side: every message the coordinator sent
    ``party`` (what a passive party sees). ``raw``: also return what the model-based statistic
    replays — the messages ``party`` received, the shares it sent, and its setup options."""
    from ..algorithms import vertical_sharing as vs
    from ..estimators.vertical import VerticalLogisticRegression

    def fit(data, seed):
        D1, D2, y = data
        est = VerticalLogisticRegression(**options)
        setup: dict = {}
        real_setup = vs.setup_party

        def spy(name, D, opts):
            if name == party:
                setup["options"] = opts
            return real_setup(name, D, opts)

        with mock.patch.object(vs, "setup_party", spy), _capture() as sent, _capture(receivers=[party]) as got:
            _seeded(est, seed).fit([D1, D2], y)
        shares = [np.asarray(m.share, dtype=np.float64) for _, s_, _, m in sorted(sent, key=lambda r: r[0]) if s_ == party]
        inboxes = [m for _, _, _, m in sorted(got, key=lambda r: r[0])]
        if side == "feature":
            view = np.concatenate(shares)
        else:
            view = np.concatenate([np.concatenate([np.ravel(np.asarray(m.residual, dtype=np.float64)),
                                                   np.ravel(np.asarray(m.dual, dtype=np.float64))]) for m in inboxes])
        if raw:
            return view, est.privacy_, (inboxes, shares, setup.get("options"))
        return view, est.privacy_

    return fit


def _vertical_model(pair: Pair, raws0: list, raws1: list) -> dict:
    """Model-based likelihood ratio for party 2's shares (feature side).

    Given the messages party 2 received, its step is deterministic up to the added noise, and the
    adversary (who knows everything but the differing part of D_2) can replay it for D_2 and D'_2:
    the real ``vertical_sharing.party_step`` with the noise set to zero, on the released previous
    share. The score ``Σ_t ⟨s_t − (μ_t + μ'_t)/2, μ'_t − μ_t⟩`` is the Neyman–Pearson statistic
    of each round's Gaussian release, weighted by 1/σ_t² (σ_t = nm·C_t, C_t from what the party
    received that round), summed over the rounds.
    """
    from dataclasses import replace

    from ..algorithms import vertical_sharing as vs

    options = raws0[0][2]
    noiseless = dict(options, private=replace(options["private"], noise_multiplier=None, noise_scale=0.0))
    cfgs = [vs.setup_party("party2", data[1], noiseless)[0] for data in (pair.data0, pair.data1)]
    rng = np.random.default_rng(0)

    def weight(cfg, inbox, prev):
        """1/C_t²: the share's noise is σ_t = nm·C_t with C_t from what the party received (public given
        the transcript), so each round's Neyman–Pearson term is scaled by 1/σ_t² ∝ 1/C_t²."""
        p = cfg.privacy
        if p is None or p.mechanism != "gaussian" or "v" not in vs.sensitivity.__code__.co_varnames:
            return 1.0
        v = vs.clip_share_input(inbox.dual + inbox.rho * (inbox.residual - prev), p.clip,
                                p.clip_inf if p.relation == "record" else None)
        C = vs.sensitivity(cfg, inbox.rho, v)
        return 0.0 if C <= 0 else 1.0 / C ** 2

    def score(raw):
        inboxes, shares, _ = raw
        total, prev = 0.0, np.zeros_like(shares[0])
        for inbox, s in zip(inboxes, shares):
            mus = []
            for cfg in cfgs:
                state = vs.PartyState(x=np.zeros(cfg.D.shape[1]), share=prev)
                mus.append(np.asarray(vs.party_step(cfg, state, inbox, rng=rng)[1].share))
            total += weight(cfgs[0], inbox, prev) * float((s - 0.5 * (mus[0] + mus[1])) @ (mus[1] - mus[0]))
            prev = s
        return total

    return {"model-lr": (np.array([score(r) for r in raws0]), np.array([score(r) for r in raws1]))}


def _vertical_params(**kw) -> dict:
    from ..estimators.vertical import VerticalLogisticRegression

    names = VerticalLogisticRegression().get_params()
    opts = {k: v for k, v in kw.items() if k in names}
    if "label_epsilon" in opts and "label_mechanism" in names:
        opts.setdefault("label_mechanism", "gaussian")  # these rows audit the per-round Gaussian label mechanism
    if "monitor" in names:
        opts["monitor"] = False
    return opts


def hu_eq16_paper_row() -> Row:
    """[Hu, eq. 16] as published: party 2's shares under feature-column neighbours.

    D'_2 flips the sign of one entry of party 2's second column (rows stay unit-norm, ‖D − D'‖ ≤ 1:
    the paper's Definition 2), which moves range(D_2). Claimed: whatever the fit reports (the
    estimator calibrates σ with [Hu, Lemma 1]'s C for total ε = 1).
    """
    D1, D2, y = _vertical_data()
    D2b = D2.copy()
    D2b[0, 1] = -D2b[0, 1]
    T, N = VERT_ROUNDS, VERT_N
    cols = np.arange(T * N).reshape(T, N)
    subspaces = (Subspace("range(D_2)", cols, _orth(D2)), Subspace("range(D'_2)", cols, _orth(D2b)))
    opts = _vertical_params(epsilon=HU_PAPER_EPSILON, delta=1e-5, max_iter=T, lam=0.05, rho=0.3, fit_intercept=False,
                            mechanism="paper")
    def claim(report):
        # The library reports epsilon = inf for the published mechanism (with the reason); the claim
        # audited here is the paper's own: the epsilon its calibration was asked for.
        eps = float(report.epsilon)
        return (eps if math.isfinite(eps) else HU_PAPER_EPSILON), float(report.delta)

    return Row(
        name="hu-eq16-paper", claim=claim, algorithm="vertical ADMM sharing [Hu], feature side", relation="feature-column",
        adversary="coordinator and other parties: every share D_m x~_m party 2 sends, every round",
        fit=_vertical_fit(opts), broken=True, bug="as published: noise sigma U_m g confined to range(D_m) "
        "[Hu, eq. 16] (docs/algorithms.md, Hu errata)",
        pairs=[Pair("one entry of party 2's column 2 sign-flipped", (D1, D2, y), (D1, D2b, y),
                    note="rows stay unit-norm; range(D_2) moves", subspaces=subspaces)],
        description="[Hu, eq. 16] share D_m x_m + sigma U_m g through VerticalLogisticRegression.fit "
                    "(3 rounds, N = 16): disjoint supports under a column change; not DP for any delta < 1")


def _has_gaussian_vertical() -> bool:
    from ..estimators.vertical import VerticalLogisticRegression

    return "relation" in VerticalLogisticRegression().get_params()


def _vertical_feature_pairs(relation: str) -> list[Pair]:
    """Worst-case neighbours of party 2 (rows of norm ≤ 1 on both sides, so the setup's row clipping
    leaves them alone)."""
    D1, D2, y = _vertical_data()
    D2 = 0.45 * D2
    if relation == "feature_column":
        # one column changed by a vector of norm 1 (the paper's Definition 2), spread over all rows
        delta = np.where(np.arange(VERT_N) % 3 == 0, 1.0, -1.0)
        delta /= np.linalg.norm(delta)
        Db = D2.copy()
        Db[:, 1] += delta
        return [Pair("party 2's column 2 moved by a unit vector", (D1, D2, y), (D1, Db, y))]
    Dn, Do = D2.copy(), D2.copy()
    Dn[0] = -D2[0] / np.linalg.norm(D2[0])  # replaced by an extreme row (norm 1) pointing the other way
    Do[0] = np.array([-D2[0, 1], D2[0, 0]]) / np.linalg.norm(D2[0])
    return [Pair("party 2's record 1 replaced by a unit row, opposite", (D1, D2, y), (D1, Dn, y)),
            Pair("party 2's record 1 replaced by a unit row, orthogonal", (D1, D2, y), (D1, Do, y))]


# ρ = 10, 5 rounds, clip scale 0.05: the clip V is then active by a wide margin (the share noise is calibrated
# to what the party received, so without a small clip later rounds may not bind), so a missing clip shows;
# the claimed ε is the fit's total over the 5 rounds.
VERT_GAUSSIAN = dict(epsilon=1.0, delta=1e-5, max_iter=5, lam=0.05, rho=10.0, fit_intercept=False, clip=0.05,
                     mechanism="gaussian")


def vertical_feature_row(relation: str) -> Row:
    opts = _vertical_params(**VERT_GAUSSIAN, relation=relation)
    return Row(
        name=f"vertical-gaussian[{relation}]", algorithm="vertical ADMM sharing [Hu], feature side (gaussian)",
        relation=relation, adversary="coordinator and other parties: every share party 2 sends, every round",
        fit=_vertical_fit(opts, raw=True), pairs=_vertical_feature_pairs(relation), model=_vertical_model,
        description=f"VerticalLogisticRegression.fit(mechanism='gaussian', relation={relation!r}), N = 16, 5 rounds, "
                    "rho = 10, epsilon = 1: isotropic noise on the clipped ridge share")


def vertical_clip_bug_row() -> Row:
    from ..algorithms import vertical_sharing as vs

    try:
        from ..algorithms import vertical_label as refit_home  # where the label party's refit lives now
    except ImportError:
        refit_home = vs

    def patch():
        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch.object(vs, "clip_share_input", lambda v, V, V_inf=None: v))
        if hasattr(refit_home, "_newton_refit"):
            # the label party's post-run refit of its own block is not in the feature-side view (it stays at
            # the label party); with unclipped, huge shares its Newton steps backtrack for long: skip it here
            stack.enter_context(mock.patch.object(refit_home, "_newton_refit",
                                                  lambda f, A, base, labels, loss, pen, w: w))
        return stack

    opts = _vertical_params(**VERT_GAUSSIAN, relation="record")
    return Row(
        name="vertical-gaussian[record] (planted: input clipping skipped)",
        algorithm="vertical ADMM sharing [Hu], feature side (gaussian)", relation="record",
        adversary="every share party 2 sends", fit=_vertical_fit(opts, raw=True),
        pairs=_vertical_feature_pairs("record")[:1], broken=True, patch=patch, model=_vertical_model,
        bug="vertical_sharing.clip_share_input is the identity: ||v|| <= V, |v_i| <= V_inf no longer enforced",
        description="the real gaussian-mechanism fit with the clipping of what party 2 receives removed")


def vertical_label_row(*, bug: bool = False) -> Row:
    from ..algorithms import vertical_sharing as vs

    D1, D2, y = _vertical_data()
    yb = y.copy()
    yb[0] = -yb[0]
    opts = _vertical_params(label_epsilon=1.0, delta=1e-5, lam=0.05, fit_intercept=True)

    def claim(report):
        lab = report.label or {}
        return float(lab.get("epsilon", math.inf)), float(lab.get("delta", report.delta))

    patch, name, bug_text = None, "vertical-label", ""
    if bug:
        real = vs.label_sensitivity

        def patch():
            return mock.patch.object(vs, "label_sensitivity", lambda **kw: real(**kw) / VERT_N)

        name = "vertical-label (planted: label sensitivity of the mean loss)"
        bug_text = "label_sensitivity divided by N (the mean-loss scaling slipped into the summed-loss protocol)"
    return Row(
        name=name, algorithm="vertical ADMM sharing [Hu], label side", relation="label",
        adversary="a passive party (party 2): every message the coordinator sends it, every round",
        fit=_vertical_fit(opts, side="label"), pairs=[Pair("training label 1 flipped", (D1, D2, y), (D1, D2, yb))],
        broken=bug, patch=patch, bug=bug_text, claim=claim,
        description="VerticalLogisticRegression.fit(label_epsilon=1): the coordinator's noisy gradients "
                    "against the reported label epsilon")


def vertical_label_tight_row(*, halved: bool = False) -> Row:
    """The one tight instance: the label side without intercept, where one flipped label moves one
    coordinate of every release by exactly the sensitivity (1 for the logistic loss). Claimed total
    ε = 2 at δ = 0.01 (two releases), 5× the runs: the real row shows how close the audit comes to a
    claim that is exactly right, and ``halved`` plants a 2× slip — the label sensitivity halved (σ
    halved; the ledger records the halved value, so the reported ε stays) — which an empirical bound
    can reach only this close to the claim. Full run only."""
    from ..algorithms import vertical_sharing as vs

    D1, D2, y = _vertical_data()
    yb = y.copy()
    yb[0] = -yb[0]
    opts = _vertical_params(label_epsilon=2.0, delta=1e-2, lam=0.05, fit_intercept=False)
    real = vs.label_sensitivity

    def patch():
        return mock.patch.object(vs, "label_sensitivity", lambda **kw: 0.5 * real(**kw))

    def claim(report):
        lab = report.label or {}
        return float(lab.get("epsilon", math.inf)), float(lab.get("delta", report.delta))

    name = "vertical-label-tight" + (" (planted: label sensitivity halved)" if halved else "")
    return Row(
        name=name, algorithm="vertical ADMM sharing [Hu], label side", relation="label",
        adversary="a passive party (party 2): every message the coordinator sends it, every round",
        fit=_vertical_fit(opts, side="label"), pairs=[Pair("training label 1 flipped", (D1, D2, y), (D1, D2, yb))],
        broken=halved, patch=patch if halved else None, claim=claim, runs_factor=5, full_only=True,
        bug="label_sensitivity returns half the proved bound (sigma halved; the ledger keeps the reported epsilon)"
            if halved else "",
        description="VerticalLogisticRegression.fit(label_epsilon=2, delta=0.01, fit_intercept=False), 5x the runs: "
                    "a tight instance" + (" with a 2x too small sensitivity" if halved else ""))


# ----------------------------------------------------------------------------- consensus [Zhang]
CONS_B, CONS_D, CONS_ROUNDS = 8, 2, 3


def _consensus_data(seed: int = 5):
    gen = np.random.default_rng(seed)
    Xs = [_unit_rows(gen.normal(size=(CONS_B, CONS_D))) for _ in range(2)]
    ys = [np.where(gen.random(CONS_B) < 0.5, -1.0, 1.0) for _ in range(2)]
    ys[0][0], ys[1][0] = 1.0, -1.0  # both classes present whatever the neighbour does
    ys[0][1], ys[1][1] = -1.0, 1.0
    return Xs, ys


CONS_OPTIONS = dict(n_nodes=2, topology="line", perturbation="pp", C=1.0, reg_weight=1.0, theta=0.5, eta=0.5,
                    eta_growth=1.2, alpha=2.0, max_iter=CONS_ROUNDS, batch=True)


def _consensus_fit(data, seed):
    """One whole consensus fit; the view is every f_i(t) every node broadcast (T × N × d)."""
    from ..estimators.consensus import ConsensusLogisticRegression

    Xs, ys = data
    opts = dict(CONS_OPTIONS)
    if "monitor" in ConsensusLogisticRegression().get_params():
        opts["monitor"] = False
    if "fallback_epsilon" in ConsensusLogisticRegression().get_params():
        opts["fallback_epsilon"] = None  # the audit measures [Zhang, Alg. 1]'s releases (the fallback's two
        # Laplace releases are a separate, pure-DP mechanism: algorithms.consensus_baseline)
    est = _seeded(ConsensusLogisticRegression(**opts), seed)
    with _capture() as rec:
        est.fit(list(Xs), list(ys))
    fs = [np.asarray(msg.f, dtype=np.float64).ravel() for _, _, _, msg in sorted(rec, key=lambda r: (r[0], r[1]))]
    return np.concatenate(fs), est.privacy_


def _consensus_pairs() -> list[Pair]:
    Xs, ys = _consensus_data()
    lab = [y.copy() for y in ys]
    lab[0][2] = -lab[0][2]
    Xo = [x.copy() for x in Xs]
    x = Xo[0][2]
    Xo[0][2] = np.array([-x[1], x[0]]) if CONS_D == 2 else -x  # the record turned by 90 degrees
    Xn = [x.copy() for x in Xs]
    Xn[0][2] = -Xn[0][2]
    return [Pair("node 1, record 3: label flipped", (Xs, ys), (Xs, lab)),
            Pair("node 1, record 3: features negated", (Xs, ys), (Xn, ys)),
            Pair("node 1, record 3: features turned 90 degrees", (Xs, ys), (Xo, ys))]


def consensus_row() -> Row:
    return Row(
        name="zhang-consensus-pp", algorithm="consensus M-ADMM with penalty perturbation [Zhang]",
        relation="record-replace", adversary="any node or eavesdropper: every f_i(t) of every node, every round",
        fit=_consensus_fit, pairs=_consensus_pairs(),
        description="ConsensusLogisticRegression.fit, 2 nodes x 8 records, 3 rounds, pp: the whole run against "
                    "the total of [Zhang, Thm 4.1] (pure DP)")


def consensus_bug_row(factor: float = 30.0) -> Row:
    from ..algorithms import graph_consensus as gc

    real = gc._noise

    def patch():
        return mock.patch.object(gc, "_noise", lambda rng, alpha, d: real(rng, np.asarray(alpha) * factor, d))

    return Row(
        name=f"zhang-consensus-pp (planted: noise rate x{factor:g})", algorithm="consensus [Zhang]",
        relation="record-replace", adversary="every f_i(t) of every node", fit=_consensus_fit,
        pairs=_consensus_pairs()[:1], broken=True, patch=patch,
        bug=f"graph_consensus._noise draws with rate {factor:g} alpha (noise {factor:g}x too small) while the "
            "ledger records alpha",
        description="the real fit with the penalty noise drawn at the wrong scale")


def consensus_reuse_bug_row() -> Row:
    from ..algorithms import graph_consensus as gc

    real_noise, real_step = gc._noise, gc.block_step

    def patch():
        first: dict = {}

        def once(rng, alpha, d):
            if "eps" not in first:
                first["eps"] = real_noise(rng, alpha, d)
            return first["eps"]

        def step(cfg, state, inbox, *, rng):
            if inbox.round == 0:  # a new fit: draw afresh once
                first.clear()
            return real_step(cfg, state, inbox, rng=rng)

        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch.object(gc, "_noise", once))
        stack.enter_context(mock.patch.object(gc, "block_step", step))
        return stack

    return Row(
        name="zhang-consensus-pp (planted: noise drawn once, reused every round)", algorithm="consensus [Zhang]",
        relation="record-replace", adversary="every f_i(t) of every node", fit=_consensus_fit,
        pairs=_consensus_pairs()[:1], broken=True, patch=patch,
        bug="graph_consensus._noise returns its first draw in every later round of the fit",
        description="the real fit with the penalty noise reused across rounds")


# ----------------------------------------------------------------------------- functional [Zhou]
FUNC_M, FUNC_GRID, FUNC_ROUNDS, FUNC_K = 24, 12, 3, 3


def _functional_data(seed: int = 7):
    """m curves on a small grid; record 0 is extreme (large scores, response far above the fit)."""
    gen = np.random.default_rng(seed)
    grid = np.linspace(0.0, 1.0, FUNC_GRID)
    X = 0.3 * gen.normal(size=(FUNC_M, FUNC_GRID))
    y = 0.5 * gen.normal(size=FUNC_M)
    X[0] = 100.0 * np.sqrt(2.0) * np.sin(2.0 * np.pi * grid)  # scores ~96 (a Fourier direction); c_1 = 4
    y[0] = 50.0  # far above any fitted quantile: its check-loss indicator stays 0
    return X, y, grid


def _functional_fit(options: dict):
    """One whole functional fit (one worker: its split does not depend on the seed). The view is
    every message the worker sent — the noisy pooled statistics (moment matrices, response sums)
    and every w~_i and gamma_i — one block per message field, plus what the central machine computes
    from them: the basis and its mean curve. The raw record (for :func:`_functional_model`) holds the
    hub's messages to the worker, the worker's ADMM messages and its public setup arguments (basis,
    score scales, response location/scale: all computed from released statistics)."""
    from ..algorithms import functional_quantile as fq
    from ..backends.transcript import flatten
    from ..estimators.functional import FunctionalQuantileRegressor

    def fit(data, seed):
        X, y, grid = data
        opts = dict(options)
        if "monitor" in FunctionalQuantileRegressor().get_params():
            opts["monitor"] = False
        est = _seeded(FunctionalQuantileRegressor(**opts), seed)
        setup: dict = {}
        real_setup = fq.setup_party_from_curves

        def spy(*args, **kw):
            setup["args"] = args
            return real_setup(*args, **kw)

        with mock.patch.object(fq, "setup_party_from_curves", spy), _capture() as rec, \
                _capture(receivers=["worker1"]) as got:
            est.fit(X, y, grid=grid)
        blocks: dict[str, list] = {}
        admm = []
        for _, _, _, msg in sorted(rec, key=lambda r: (r[0], r[1])):
            if isinstance(msg, fq.PartyMessage):
                admm.append(msg)
            for name, leaf in flatten(msg):
                arr = np.asarray(leaf)
                if arr.dtype.kind in "fiub":
                    blocks.setdefault(name, []).append(arr.astype(np.float64).ravel())
        view = {k: np.concatenate(v) for k, v in blocks.items()}
        view["basis"] = np.concatenate([est.basis_.mean.ravel(), est.basis_.phi.ravel()])
        inboxes = [m for _, _, _, m in sorted(got, key=lambda r: r[0]) if isinstance(m, fq.HubMessage)]
        return view, est.privacy_, (inboxes, admm, setup.get("args"))

    return fit


def _functional_model(pair: Pair, raws0: list, raws1: list) -> dict:
    """Model-based likelihood ratio for the worker's w~_i (FDP-ADMM rounds).

    The central machine knows the public setup (basis, score scales and response location/scale are
    post-processing of released statistics), D and D' but the replaced record, and every message.
    For each run it rebuilds the worker under both datasets with the real
    ``functional_quantile.setup_party_from_curves``, replays the real ``party_step`` on the received
    messages from the released previous w~_i and gamma_i, and scores each round's release against the
    two noiseless predictions, weighted by 1/σ_l² (σ_l from the step's own privacy event).
    """
    from ..algorithms import functional_quantile as fq

    rng = np.random.default_rng(0)

    def score(raw):
        inboxes, admm, args = raw
        if args is None or not admm:
            return 0.0
        name, X, y, *rest = args
        cfgs, states = [], []
        for data in (pair.data0, pair.data1):
            cfg, st = fq.setup_party_from_curves(name, data[0], data[1], *rest)
            cfgs.append(cfg)
            states.append(st)
        total = 0.0
        prev_rho = math.nan
        for l, (inbox, msg) in enumerate(zip(inboxes, admm)):
            mus, sigma = [], None
            for cfg, st in zip(cfgs, states):
                if l > 0:
                    st = st._replace(w_tilde=np.asarray(admm[l - 1].w_tilde), gamma=np.asarray(admm[l - 1].gamma),
                                     rho=prev_rho)
                new, _, events = fq.party_step(cfg, st, inbox, rng=rng)
                mus.append(np.ravel(new.w))
                if events:
                    sigma = float(events[0].sigma)
            prev_rho = math.nan if inbox.rho is None else float(inbox.rho)
            wt = np.ravel(np.asarray(msg.w_tilde))
            total += float((wt - 0.5 * (mus[0] + mus[1])) @ (mus[1] - mus[0])) / (sigma * sigma if sigma else 1.0)
        return total

    return {"model-lr": (np.array([score(r) for r in raws0]), np.array([score(r) for r in raws1]))}


def _functional_pairs() -> list[Pair]:
    X, y, grid = _functional_data()
    Xn = X.copy()
    Xn[0] = -X[0]  # scores negated: the clipped A_0 turns round (the largest change of the update)
    yl = y.copy()
    yl[0] = -50.0  # response moved from far above to far below: the indicator flips
    return [Pair("record 1: curve negated", (X, y, grid), (Xn, y, grid),
                 note="clipped scores A_1 -> -A_1, indicator 0 on both sides (tau = 0.9)"),
            Pair("record 1: response moved far below", (X, y, grid), (X, yl, grid),
                 note="same curve, check-loss indicator 0 -> 1")]


# public response range and curve clip (else the fit spends budget estimating them privately; on 24 curves
# it refuses); the extreme record's curve (norm ~100) is clipped to c_X for the moment release and its
# standardised scores to c_1 for the ADMM rounds.
FUNC_OPTIONS = dict(tau=0.9, n_components=FUNC_K, basis="fourier", penalty="l2", lam=0.05, method="fast",
                    max_iter=FUNC_ROUNDS, total_epsilon=1.5, delta=1e-3, workers=1, y_range=(-60.0, 60.0),
                    curve_clip=2.0, min_n_epsilon=0.0)


def functional_row() -> Row:
    return Row(
        name="zhou-fdp-admm", algorithm="FDP-ADMM [Zhou], fixed Fourier basis", relation="record-replace",
        adversary="the central machine or an eavesdropper: every w~_i and gamma_i, the basis and its mean curve",
        fit=_functional_fit(FUNC_OPTIONS), pairs=_functional_pairs(), model=_functional_model,
        description="FunctionalQuantileRegressor.fit (fast method, 24 curves, 3 rounds, total_epsilon = 1.5 at "
                    "delta = 1e-3): every release of the run against the reported total")


def functional_private_basis_row() -> Row:
    opts = FUNC_PRIVATE_BASIS
    return Row(
        name="zhou-fdp-admm-private-basis", algorithm="FDP-ADMM [Zhou] with private FPCA",
        relation="record-replace",
        adversary="the central machine: every w~_i, each worker's noisy moment matrix, the basis and mean curve",
        fit=_functional_fit(opts), pairs=_functional_pairs(), model=_functional_model,
        description="FunctionalQuantileRegressor.fit with basis='private-fpca': basis release + FDP-ADMM rounds "
                    "against the reported total")


FUNC_PRIVATE_BASIS = dict(FUNC_OPTIONS, basis="private-fpca")


def functional_bug_row() -> Row:
    """FDP-ADMM with every clipping removed (``kernels.fpca.clip_rows`` is the identity): the curve clip
    c_X of the private moment release and the score clip c_1 of the ADMM rounds, on the curve pair."""
    from ..kernels import fpca as F

    def patch():
        return mock.patch.object(F, "clip_rows", lambda Z, c: Z)

    return Row(
        name="zhou-fdp-admm (planted: clipping skipped)", algorithm="FDP-ADMM [Zhou]",
        relation="record-replace", adversary="every message the worker sends (noisy statistics, w~_i, gamma_i), "
                                              "the basis and its mean curve",
        fit=_functional_fit(FUNC_OPTIONS), pairs=_functional_pairs()[:1], broken=True, patch=patch,
        model=_functional_model,
        bug="kernels.fpca.clip_rows is the identity: neither ||x_j|| <= c_X of the moment release nor "
            "||A_ij|| <= c_1 of [Zhou, Lemma 2] is enforced",
        description="the real fit with clipping removed; the extreme curve's norm is ~50x c_X")


# ----------------------------------------------------------------------------- registry
def rows(*, quick: bool = False) -> list[Row]:
    """Every row of the end-to-end audit (real mechanisms first, then the ones that must be caught).
    ``quick`` runs the same rows (fewer runs are the caller's choice)."""
    real = [consensus_row(), functional_row(), functional_private_basis_row()]
    broken = [hu_eq16_paper_row(), consensus_bug_row(), consensus_reuse_bug_row(), functional_bug_row()]
    if _has_gaussian_vertical():  # the sound vertical mechanism and label privacy
        real = [vertical_feature_row("feature_column"), vertical_feature_row("record"), vertical_label_row(),
                vertical_label_tight_row()] + real
        broken += [vertical_clip_bug_row(), vertical_label_row(bug=True), vertical_label_tight_row(halved=True)]
    return [r for r in real + broken if not (quick and r.full_only)]


# whole-fit rows still run by default: the published [Hu, eq. 16] (no game), and whole consensus and private-FPCA
# fits (their mechanisms have games — audit_games_consensus, the statistics pipeline — but these rows audit the
# fit a user runs, with its planted bugs); the other whole-fit rows are superseded by :mod:`.audit_worst_case`
# and run only when named with ``only``
WHOLE_FIT_DEFAULT = ("hu-eq16-paper", "zhang-consensus-pp", "zhou-fdp-admm-private-basis")


def run_end_to_end(*, runs: int = 2000, seed: int = 0, confidence: float = 0.95, quick: bool = False,
                   only: Sequence[str] | None = None, progress=None) -> list[AuditResult]:
    """Audit every worst-case game (:mod:`.audit_worst_case`) and the default whole-fit rows (or, with
    ``only``, the rows named exactly, and every row whose name starts with an entry that is no full name)."""
    from .audit_games import play
    from .audit_worst_case import games

    exact = set(names()) & set(only or ())  # a full row name selects that row alone; anything else is a prefix
    wanted = (lambda name: any(name == o if o in exact else name.startswith(o) for o in only)) if only else None
    results = []
    for game in games(quick=quick and not only):
        if wanted is None or wanted(game.name):
            results.append(play(game, runs=runs, seed=seed, confidence=confidence, progress=progress))
    for row in rows(quick=quick and not only):
        if (wanted(row.name) if wanted else row.name.startswith(WHOLE_FIT_DEFAULT)):
            results.append(audit_row(row, runs=runs, seed=seed, confidence=confidence, progress=progress))
    return results


def names() -> list[str]:
    """Every game and row name ``only`` can select."""
    from .audit_worst_case import games

    return [g.name for g in games()] + [r.name for r in rows()]
