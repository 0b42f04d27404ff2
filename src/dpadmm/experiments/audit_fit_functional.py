"""Whole-fit audit rows of FDP-ADMM [Zhou] (fixed Fourier basis and private FPCA) and its planted bug
(:mod:`.audit_e2e`)."""

from __future__ import annotations

import math
from dataclasses import replace
from unittest import mock

import numpy as np

from ..algorithms.functional import messages as functional_messages, party as functional_party
from ..backends.transcript import flatten
from ..estimators.functional import FunctionalQuantileRegressor
from ..algorithms.functional import driver_stages as fit_functional
from ..kernels import fpca as F
from .audit_fit import Pair, Row, _capture, _seeded

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
    def fit(data, seed):
        X, y, grid = data
        opts = dict(options)
        if "monitor" in FunctionalQuantileRegressor().get_params():
            opts["monitor"] = False
        est = _seeded(FunctionalQuantileRegressor(**opts), seed)
        setup: dict = {}
        real = fit_functional.PROTOCOL

        def spy(**fields):
            setup["args"] = real.setup_type(**fields)  # the worker's Setup record
            return real.setup(**fields)

        # the fit's workers run the declaration the driver holds: a copy of it with the spy as its setup
        with mock.patch.object(fit_functional, "PROTOCOL", replace(real, setup=spy)), _capture() as rec, \
                _capture(receivers=["worker1"]) as got:
            est.fit(X, y, grid=grid)
        blocks: dict[str, list] = {}
        admm = []
        for _, _, _, msg in sorted(rec, key=lambda r: (r[0], r[1])):
            if isinstance(msg, functional_messages.PartyMessage):
                admm.append(msg)
            for name, leaf in flatten(msg):
                arr = np.asarray(leaf)
                if arr.dtype.kind in "fiub":
                    blocks.setdefault(name, []).append(arr.astype(np.float64).ravel())
        view = {k: np.concatenate(v) for k, v in blocks.items()}
        view["basis"] = np.concatenate([est.basis_.mean.ravel(), est.basis_.phi.ravel()])
        inboxes = [m for _, _, _, m in sorted(got, key=lambda r: r[0]) if isinstance(m, functional_messages.HubMessage)]
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
    rng = np.random.default_rng(0)

    def score(raw):
        inboxes, admm, args = raw
        if args is None or not admm:
            return 0.0
        cfgs, states = [], []
        for data in (pair.data0, pair.data1):
            cfg, st = functional_party.setup_party_from_curves(**args._replace(X=data[0], y=data[1])._asdict())
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
                new, _, events = functional_party.party_step(cfg, st, inbox, rng=rng)
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
