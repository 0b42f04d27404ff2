"""The worst-case instances of ``dpadmm audit --end-to-end``: one :class:`~.audit_games.Game` per private
mechanism, its honest row, and its planted bugs.

Vertical feature side [Hu] (the coordinator is the adversary): party 2's canary is one entry of its
block — 0 on D, a unit (record relation: norm 4, clipped to 1 at setup) on D' — and every round the
coordinator sends ``v = y + ρ(s̃ − z − share)`` pointing at the canary's row with norm 4·V (outside
the clip V = V_∞ = 1), with ρ alternating 1 and 8 and λ_s = 0.08. The party's ridge share then
moves by ``V/(λ_s + ρ)``, against the proved sensitivity ``V/ρ``: the audit can reach 0.93–0.99 of
the claim per round. The x-step is exact and memoryless given v, so the noiseless shares are the
same in every run (replayed once per round position).

Vertical label side (a passive party is the adversary, the coordinator the mechanism): the parties
send shares 0, so ``g = ℓ'(0, y)`` and one flipped label moves coordinate k by exactly the label gap 1
= the sensitivity (no intercept; with one, the sum's noise is not seen by the party and the row could
reach only 1/√2 of the claim).

Functional FDP-ADMM [Zhou] (the central machine is the adversary): the worker's canary curve has
scores 10u (clipped to u, ‖u‖ = c_1 = 1) on D and −10u on D', response y = 2.5. The hub sends
round number 0 every time (the dual is never updated, η is fixed), ρ alternating 2 and 5, and the
consensus ``w = 0`` in three rounds of four and ``−5u`` in the fourth: after a ``w = 0`` round both
neighbours' canaries sit below the fit (ψ = τ = 0.9: the linearised step moves by ``2τc_1/m`` per
unit of ``1/(ρ + 1/η)``, 0.9 of the sensitivity); after the ``−5u`` round one of them flips (ψ sum
2τ − 1), which makes the rounds' shifts non-proportional to their σ, so a reused draw leaves a
noiseless combination that still separates the neighbours.

Plants (all wrap the real step of the canary's party or patch a library function during the run):
noise × 1/2; the standard-normal draw of one round reused in the next (rescaled by that round's σ);
the same draw used by two parties in a round; the clipping of what the party receives (vertical) or
of its scores (functional) skipped; the sensitivity computed from a value the coordinator supplies
at Setup (vertical: the relation constant ``column_change`` = 10⁻³; functional: ``c1`` = 10⁻³ with the
clip at 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

from .audit_games import Game, ReplayRNG, ScaledRNG, ZeroRNG

EPSILON, DELTA = 1.0, 1e-5

# ----------------------------------------------------------------------------- plants (generic)


def _wrap_step(specs: list, name: str, make_rng, around=None) -> list:
    """Party ``name``'s step with its generator replaced by ``make_rng(rng, inbox)`` (and the context
    ``around()`` active during the call)."""
    out = []
    for spec in specs:
        if spec.name != name:
            out.append(spec)
            continue
        real = spec.step

        def step(cfg, state, inbox, *, rng, _real=real):
            with (around() if around is not None else contextlib.nullcontext()):
                return _real(cfg, state, inbox, rng=make_rng(rng, inbox))

        out.append(dataclasses.replace(spec, step=step))
    return out


def plant_half(name: str):
    def plant(specs, hub):
        return _wrap_step(specs, name, lambda rng, inbox: ScaledRNG(rng, 0.5)), hub, contextlib.nullcontext()
    return plant


def plant_reuse_rounds(name: str):
    """The draw of every even call reused in the next (rescaled: the step multiplies by its own σ)."""
    def plant(specs, hub):
        store, count = {}, [0]

        def make(rng, inbox):
            count[0] += 1
            return ReplayRNG(store, name, rng, reuse=count[0] % 2 == 0)
        return _wrap_step(specs, name, make), hub, contextlib.nullcontext()
    return plant


def plant_reuse_parties(first: str, second: str):
    """``second`` uses the draw ``first`` made in the same round (in-process: first steps first)."""
    def plant(specs, hub):
        store = {}
        specs = _wrap_step(specs, first, lambda rng, inbox: ReplayRNG(store, "round", rng, reuse=False))
        specs = _wrap_step(specs, second, lambda rng, inbox: ReplayRNG(store, "round", rng, reuse=True))
        return specs, hub, contextlib.nullcontext()
    return plant


def plant_patch(name: str, target, attr: str, value):
    """``target.attr`` replaced by ``value`` while party ``name`` steps."""
    def plant(specs, hub):
        return (_wrap_step(specs, name, lambda rng, inbox: rng, around=lambda: mock.patch.object(target, attr, value)),
                hub, contextlib.nullcontext())
    return plant


def plant_setup_option(name: str, **changes):
    """Party ``name`` set up with options the coordinator supplied (``changes`` merged into them)."""
    def plant(specs, hub):
        out = []
        for spec in specs:
            if spec.name == name:
                args = list(spec.setup_args)
                i = next(j for j, a in enumerate(args) if isinstance(a, dict))
                args[i] = dict(args[i], **changes)
                spec = dataclasses.replace(spec, setup_args=tuple(args))
            out.append(spec)
        return out, hub, contextlib.nullcontext()
    return plant


def plant_hub_rng(make_rng):
    """The hub's generator replaced (the label mechanism draws at the coordinator)."""
    def plant(specs, hub):
        real = hub.step

        def step(cfg, state, outboxes, *, rng):
            return real(cfg, state, outboxes, rng=make_rng(rng))
        return specs, dataclasses.replace(hub, step=step), contextlib.nullcontext()
    return plant


# ----------------------------------------------------------------------------- vertical feature side
V_N, V_T, V_LAM, V_CLIP, V_SEND, CANARY = 8, 4, 0.01, 1.0, 4.0, 0
V_RHOS = (1.0, 8.0, 1.0, 8.0)


@dataclass(frozen=True)
class _VCoord:
    names: tuple
    v: np.ndarray  # (N,) what every party is made to receive (before its clip)
    rhos: tuple


def _vcoord_msg(cfg: _VCoord, t: int, prev: dict):
    from ..algorithms.vertical_sharing import CoordinatorMessage

    rho = cfg.rhos[t % len(cfg.rhos)]
    zero = np.zeros_like(cfg.v)
    # v = dual + ρ(residual − share): all of it in the residual, the dual 0
    return {n: CoordinatorMessage(t, prev[n] + cfg.v / rho, zero, rho) for n in cfg.names}


def vcoord_init(cfg: _VCoord):
    prev = {n: np.zeros_like(cfg.v) for n in cfg.names}
    return 0, _vcoord_msg(cfg, 0, prev)


def vcoord_step(cfg: _VCoord, state, outboxes, *, rng):
    t = state + 1
    return t, _vcoord_msg(cfg, t, {n: np.asarray(outboxes[n].share, float) for n in cfg.names}), []


def _vertical_blocks(relation: str):
    gen = np.random.default_rng(11)
    B1 = gen.normal(size=(V_N, 2))
    B1 /= np.maximum(np.linalg.norm(B1, axis=1, keepdims=True), 1.0)
    B2 = np.zeros((V_N, 2))
    B2[:, 1] = 0.5 * gen.uniform(-1, 1, V_N)
    B2[CANARY] = 0.0
    B2b = B2.copy()
    B2b[CANARY, 0] = 1.0 if relation == "feature_column" else 4.0  # a record outside the row clip
    return B1, B2, B2b


def _vertical_options(relation: str, nm: float | None, noiseless: bool = False) -> dict:
    from ..algorithms import vertical_sharing as vs
    from ..kernels.regularizers import get_regularizer

    spec = vs.PrivacySpec(noise_multiplier=None if noiseless else nm, noise_scale=0.0 if noiseless else None,
                          mechanism="gaussian", relation=relation, clip=V_CLIP, clip_inf=V_CLIP)
    return {"lam_sum": V_N * V_LAM, "reg": get_regularizer("l2"), "private": spec, "bound": None, "damping": 0.0,
            "solver": "eigh"}


def _nm(rounds: int) -> float:
    from ..privacy.accountants.gaussian import calibrate_noise_multiplier

    return calibrate_noise_multiplier(EPSILON, DELTA, rounds)


def vertical_game(relation: str, *, plant=None, bug: str = "", backend: str = "inprocess", tag: str = "") -> Game:
    from .. import engine
    from ..algorithms import vertical_sharing as vs
    from ..backends import PartySpec

    B1, B2, B2b = _vertical_blocks(relation)
    nm = _nm(V_T)
    v = np.zeros(V_N)
    v[CANARY] = V_SEND * V_CLIP
    names = ("party1", "party2")

    def setup(side, total):
        opts = _vertical_options(relation, nm)
        specs = [PartySpec(n, vs.setup_party, (n, B, opts), vs.party_step, owner=n)
                 for n, B in zip(names, (B1, B2b if side else B2))]
        return specs, engine.Hub(_VCoord(names, v, V_RHOS), vcoord_init, vcoord_step)

    means = {}
    for side, B in ((0, B2), (1, B2b)):
        for n, blk in zip(names, (B1, B)):
            cfg, st = vs.setup_party(n, blk, _vertical_options(relation, None, noiseless=True))
            for t, rho in enumerate(V_RHOS):
                msg = vs.CoordinatorMessage(t, v / rho, np.zeros(V_N), rho)
                means[side, n, t] = np.asarray(vs.party_step(cfg, st, msg, rng=ZeroRNG())[1].share)

    def view(rec):
        return np.stack([np.stack([np.asarray(m.share, float) for m in rec["streams"][n][:rec["total"]]])
                         for n in names], axis=1)

    def replay(side, rec):
        R = rec["total"]
        out = []
        for s in (0, 1):
            per = np.stack([np.stack([means[s, n, t % V_T] for n in names]) for t in range(V_T)])  # (T, P, N)
            out.append(np.tile(per, (R // V_T, 1, 1)))
        return out[0], out[1]

    rel = "feature column" if relation == "feature_column" else "record"
    return Game(
        name=f"worst-case vertical-gaussian[{relation}]{tag}", algorithm="vertical ADMM sharing [Hu], feature side",
        relation=relation, adversary="the coordinator: chooses every message party 2 receives; sees every share",
        description=f"party 2's {rel} canary, coordinator-chosen v (norm 4V, at the canary's row), rho 1/8, "
                    f"{V_T} rounds, epsilon = {EPSILON:g} at delta = {DELTA:g}",
        rounds=V_T, setup=setup, view=view, replay=replay, mechanism_party="party2", delta=DELTA,
        plant=plant, broken=plant is not None, bug=bug, backend=backend,
        note="ratio limit rho/(lambda_s + rho) per round: 0.93 (rho 1), 0.99 (rho 8)")


def vertical_plants(relation: str) -> list[Game]:
    from ..algorithms import vertical_sharing as vs

    games = [
        vertical_game(relation, plant=plant_half("party2"), tag=" (planted: noise x1/2)",
                      bug="party 2's standard-normal draws halved; its ledger keeps sigma"),
        vertical_game(relation, plant=plant_reuse_rounds("party2"), tag=" (planted: draw reused across rounds)",
                      bug="party 2 reuses its previous round's standard-normal draw every second round (times this "
                          "round's sigma)"),
        vertical_game(relation, plant=plant_reuse_parties("party1", "party2"),
                      tag=" (planted: draw shared by two parties)",
                      bug="party 2 adds party 1's standard-normal draw of the same round"),
        vertical_game(relation, plant=plant_patch("party2", vs, "clip_share_input", lambda v, V, V_inf=None: v),
                      tag=" (planted: clipping skipped)",
                      bug="party 2 skips clip_share_input: ||v|| <= V not enforced (the coordinator sends 4V)"),
        vertical_game(relation, plant=plant_setup_option("party2", private=dataclasses.replace(
                          _vertical_options(relation, _nm(V_T))["private"], relation="feature_column",
                          column_change=1e-3)),
                      tag=" (planted: coordinator-supplied sensitivity)",
                      bug="party 2 prices its shares with the relation constant the coordinator sent at Setup "
                          "(feature_column, column_change = 1e-3) while its data change by a unit"),
    ]
    return games


# ----------------------------------------------------------------------------- vertical label side
L_N, L_T = 8, 4


def _share_setup(n: int):
    return np.zeros(n), None


def _share_step(cfg, state, inbox, *, rng):
    from ..algorithms.vertical_sharing import PartyMessage

    return state, PartyMessage(share=cfg), []


def label_game(*, plant=None, bug: str = "", tag: str = "", backend: str = "inprocess") -> Game | None:
    from .. import engine
    from ..algorithms import vertical_sharing as vs
    from ..backends import PartySpec
    from ..kernels.losses import get_loss

    if not hasattr(vs, "LabelPrivacy") or not hasattr(vs, "label_private_step"):
        return None
    y = np.where(np.arange(L_N) % 2 == 0, 1.0, -1.0)
    yb = y.copy()
    yb[CANARY] = -yb[CANARY]
    nm = _nm(L_T)
    names = ("party1", "party2")

    def cfg(labels, private=True):
        lp = vs.LabelPrivacy(noise_multiplier=nm, clip=1.0, rounds=None)
        return vs.CoordinatorConfig(labels=labels, loss=get_loss("logistic"), lam=0.01, rho=1.0, party_names=names,
                                    fit_intercept=False, label_privacy=lp)

    def setup(side, total):
        specs = [PartySpec(n, _share_setup, (L_N,), _share_step, owner=n) for n in names]
        return specs, engine.Hub(cfg(yb if side else y), vs.init_coordinator, vs.coordinator_step)

    means = []
    for labels in (y, yb):
        c = cfg(labels)
        st = vs.init_coordinator(c)[0]
        zero = vs.PartyMessage(share=np.zeros(L_N))
        means.append(np.asarray(vs.label_private_step(c, st, {n: zero for n in names}, rng=ZeroRNG())[1]["party2"].dual))

    def view(rec):
        return np.stack([np.asarray(m.dual, float) for m in rec["streams"]["hub->party2"][1:rec["total"] + 1]])[:, None]

    def replay(side, rec):
        R = rec["total"]
        return np.tile(means[0], (R, 1, 1)), np.tile(means[1], (R, 1, 1))

    return Game(
        name=f"worst-case vertical-label{tag}", algorithm="vertical ADMM sharing [Hu], label side (gaussian)",
        relation="label", adversary="a passive party: chooses its shares, sees every message the coordinator sends",
        description=f"one flipped training label, shares 0 (label gap 1 = the sensitivity), no intercept, {L_T} "
                    f"releases, epsilon = {EPSILON:g} at delta = {DELTA:g}",
        rounds=L_T, setup=setup, view=view, replay=replay, mechanism_party="coordinator", delta=DELTA,
        plant=plant, broken=plant is not None, bug=bug, backend=backend, note="ratio limit 1")


def label_plants() -> list[Game]:
    """Noise halved. No reuse plant: for the logistic loss ``ℓ'(s, +1) − ℓ'(s, −1) = −1`` for every s, so every
    round moves the canary coordinate by the same amount at the same σ and a reused draw makes a later release
    a post-processing of an earlier one — no loss for any audit to find (the reuse plants of the feature side
    and the functional rounds are the regression tests for the shared sampler)."""
    game = label_game(plant=plant_hub_rng(lambda rng: ScaledRNG(rng, 0.5)), tag=" (planted: noise x1/2)",
                      bug="the coordinator's label noise draws halved; its ledger keeps sigma")
    return [game] if game is not None else []


# ----------------------------------------------------------------------------- functional FDP-ADMM
F_M, F_K, F_T, F_TAU, F_Y = 8, 2, 4, 0.9, 2.5
F_RHOS = (2.0, 5.0, 2.0, 5.0)
F_PUSH = 5.0


class IdentityBasis:
    """A public 'basis' whose scores are the rows themselves (the audit hands the worker its scores)."""

    def scores(self, X):
        return np.asarray(X, float)


@dataclass(frozen=True)
class _FHub:
    w: np.ndarray  # (T, 1, 1, K) consensus sent at each position
    rhos: tuple


def fhub_msg(cfg: _FHub, t: int):
    from ..algorithms.functional_quantile import HubMessage

    pos = t % len(cfg.rhos)
    return {"worker1": HubMessage(0, cfg.w[pos], cfg.rhos[pos])}  # round 0 every time: no dual update, fixed eta


def fhub_init(cfg: _FHub):
    return 0, fhub_msg(cfg, 0)


def fhub_step(cfg: _FHub, state, outboxes, *, rng):
    return state + 1, fhub_msg(cfg, state + 1), []


def _functional_data():
    gen = np.random.default_rng(13)
    X = gen.normal(size=(F_M, F_K))
    X *= 0.5 / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = gen.normal(size=F_M)
    u = np.zeros(F_K)
    u[0] = 1.0
    X[CANARY], y[CANARY] = 10.0 * u, F_Y  # outside the score clip c_1 = 1
    Xb = X.copy()
    Xb[CANARY] = -10.0 * u
    return X, Xb, y, u


def _functional_options(c1: float = 1.0) -> dict:
    return dict(rho=F_RHOS[0], n_workers=1, penalty="l2", fit_intercept=False, local_step="linearized",
                step="constant", eta0=1.0, c1=c1, emit_events=True, worker_names=("worker1",))


def functional_game(*, plant=None, bug: str = "", tag: str = "", backend: str = "inprocess") -> Game:
    from .. import engine
    from ..algorithms import functional_quantile as fq
    from ..backends import PartySpec

    X, Xb, y, u = _functional_data()
    nm = _nm(F_T)
    settings = fq.Settings.make(F_TAU, noise_multiplier=nm, lam=0.05)
    quiet = fq.Settings.make(F_TAU, noise_multiplier=0.0, lam=0.05)
    w = np.zeros((F_T, 1, 1, F_K))
    w[-1, 0, 0] = -F_PUSH * u
    hub_cfg = _FHub(w, F_RHOS)
    basis = IdentityBasis()

    def setup(side, total):
        args = ("worker1", Xb if side else X, y, basis, 1.0, 0.0, 1.0, 1.0, settings, _functional_options())
        return ([PartySpec("worker1", fq.setup_party_from_curves, args, fq.party_step, owner="worker1")],
                engine.Hub(hub_cfg, fhub_init, fhub_step))

    honest = [fq.setup_party_from_curves("worker1", D, y, basis, 1.0, 0.0, 1.0, 1.0, quiet, _functional_options())
              for D in (X, Xb)]

    def view(rec):
        return np.stack([np.ravel(m.w_tilde) for m in rec["streams"]["worker1"][:rec["total"]]])[:, None]

    def replay(side, rec):
        inboxes = rec["streams"]["hub->worker1"]
        sent = rec["streams"]["worker1"]
        outs = ([], [])
        for i in range(rec["total"]):
            for k, (cfg, st0) in enumerate(honest):
                if i == 0:
                    st = st0
                else:
                    st = fq.PartyState(w=np.asarray(sent[i - 1].w_tilde), w_tilde=np.asarray(sent[i - 1].w_tilde),
                                       gamma=np.asarray(sent[i - 1].gamma), w_hub=np.asarray(inboxes[i - 1].w),
                                       rho=float(inboxes[i - 1].rho))
                outs[k].append(np.ravel(fq.party_step(cfg, st, inboxes[i], rng=ZeroRNG())[0].w))
        return np.stack(outs[0])[:, None], np.stack(outs[1])[:, None]

    return Game(
        name=f"worst-case zhou-fdp-admm{tag}", algorithm="FDP-ADMM [Zhou], linearised step",
        relation="record-replace", adversary="the central machine: chooses w and rho it sends; sees every w~",
        description=f"canary curve with scores +-10u (clipped to c_1 = 1), tau = {F_TAU:g}, m = {F_M}, hub-chosen "
                    f"consensus and rho 2/5, {F_T} rounds, epsilon = {EPSILON:g} at delta = {DELTA:g}",
        rounds=F_T, setup=setup, view=view, replay=replay, mechanism_party="worker1", delta=DELTA,
        plant=plant, broken=plant is not None, bug=bug, backend=backend,
        note="ratio limit tau = 0.9 in three rounds of four, 2 tau - 1 = 0.8 in the fourth")


def functional_plants() -> list[Game]:
    from ..kernels import fpca

    def noclip(specs, hub):
        return specs, hub, mock.patch.object(fpca, "clip_rows", lambda Z, c: Z)

    return [
        functional_game(plant=plant_half("worker1"), tag=" (planted: noise x1/2)",
                        bug="the worker's standard-normal draws halved; its ledger keeps sigma"),
        functional_game(plant=plant_reuse_rounds("worker1"), tag=" (planted: draw reused across rounds)",
                        bug="the worker reuses its previous standard-normal draw every second round"),
        functional_game(plant=noclip, tag=" (planted: clipping skipped)",
                        bug="kernels.fpca.clip_rows is the identity: the canary's scores (norm 10) are not clipped to c_1"),
        functional_game(plant=plant_setup_option("worker1", c1=1e-3), tag=" (planted: coordinator-supplied sensitivity)",
                        bug="the worker prices its release with the c1 = 1e-3 the central machine sent, its scores "
                            "clipped at 1"),
    ]


# ----------------------------------------------------------------------------- functional pooled statistics
S_M, S_T, S_CLIP = 10, 6, 1.0


@dataclass(frozen=True)
class _SHub:
    request: Any  # the StatsRequest sent every round


def shub_init(cfg: _SHub):
    return 0, {"worker1": cfg.request}


def shub_step(cfg: _SHub, state, outboxes, *, rng):
    return state + 1, {"worker1": cfg.request}, []


def _stats_data(stage: str):
    gen = np.random.default_rng(17)
    X = 0.2 * gen.normal(size=(S_M, S_T))
    y = 0.5 * gen.uniform(-1, 1, S_M)
    u = np.zeros(S_T)
    u[0] = 1.0
    Xb, yb = X.copy(), y.copy()
    if stage == "mean":  # curve +-10u (clipped to c_X u), response +-10 (clipped to the range's ends)
        X[CANARY], y[CANARY], Xb[CANARY], yb[CANARY] = 10.0 * u, 10.0, -10.0 * u, -10.0
    else:  # centred curve 10 e_1 vs 10 e_2 (clipped to c_2): the largest change of the released upper triangle
        v = np.zeros(S_T)
        v[1] = 1.0
        X[CANARY], Xb[CANARY] = 10.0 * u, 10.0 * v
    return X, y, Xb, yb


def stats_game(stage: str, *, plant=None, bug: str = "", tag: str = "") -> Game:
    from .. import engine
    from ..algorithms import functional_statistics as fs
    from ..backends import PartySpec

    X, y, Xb, yb = _stats_data(stage)
    q = np.ones(S_T)  # quadrature weights 1: scaled curves are the curves
    nm = _nm(1)
    req = (fs.StatsRequest("mean", curve_clip=S_CLIP, y_range=(-1.0, 1.0)) if stage == "mean" else
           fs.StatsRequest("moments", curve_clip=S_CLIP, center=np.zeros(S_T)))

    def setup(side, total):
        args = ("worker1", Xb if side else X, yb if side else y, q, nm)
        return ([PartySpec("worker1", fs.setup_stats, args, fs.stats_step, owner="worker1")],
                engine.Hub(_SHub(req), shub_init, shub_step))

    def released(msg):
        v = msg.values["mean"] if stage == "mean" else msg.values["S"][np.triu_indices(S_T + 1)]
        return np.asarray(v, float)

    means = []
    for A, b in ((X, y), (Xb, yb)):
        cfg = fs.setup_stats("worker1", A, b, q, nm)[0]
        means.append(released(fs.stats_step(cfg, None, req, rng=ZeroRNG())[1]))

    def view(rec):
        return np.stack([released(m) for m in rec["streams"]["worker1"][:rec["total"]]])[:, None]

    def replay(side, rec):
        R = rec["total"]
        return np.tile(means[0], (R, 1, 1)), np.tile(means[1], (R, 1, 1))

    what = ("clipped curve sum and response sums (sensitivity sqrt(10))" if stage == "mean" else
            "centred clipped moment matrix, upper triangle (sensitivity 4 c_2^2)")
    return Game(
        name=f"worst-case functional-statistics[{stage}]{tag}", algorithm="functional QR pooled statistics",
        relation="record-replace", adversary="the central machine: chooses the request (clip, range, centre); sees "
                                             "the noisy statistic",
        description=f"one worker's {what}, canary outside the clip, one release, epsilon = {EPSILON:g} at "
                    f"delta = {DELTA:g}",
        rounds=1, setup=setup, view=view, replay=replay, mechanism_party="worker1", delta=DELTA, plant=plant,
        broken=plant is not None, bug=bug, runs_factor=20,  # one release per run: cheap
        note="ratio limit sqrt(8/10) = 0.89" if stage == "mean" else
             "ratio limit 1/2: the released upper triangle moves by at most 2 c_2^2 (rows (c_2, u), |u| <= c_2), "
             "the proof prices 4 c_2^2 (the Frobenius bound) - loose by 2x")


def stats_plants() -> list[Game]:
    from ..kernels import fpca

    return [stats_game("mean", plant=plant_half("worker1"), tag=" (planted: noise x1/2)",
                       bug="the worker's standard-normal draws halved; its ledger keeps sigma"),
            stats_game("mean", plant=plant_patch("worker1", fpca, "clip_rows", lambda Z, c: Z),
                       tag=" (planted: clipping skipped)",
                       bug="kernels.fpca.clip_rows is the identity: the canary curve (norm 10) is not clipped to c_X")]


def games(*, quick: bool = False) -> list[Game]:
    """Every worst-case row: honest first (one per algorithm also on the process backend), then plants."""
    honest = [vertical_game("feature_column"), vertical_game("record"), label_game(), functional_game(),
              stats_game("mean"), stats_game("moments")]
    for g in (vertical_game("record", backend="process", tag=" (process backend)"),
              functional_game(backend="process", tag=" (process backend)")):
        g.runs_factor = 2  # a few ms per round through pipes: fewer runs
        honest.append(g)
    planted = (vertical_plants("record") + [vertical_plants("feature_column")[0]] + label_plants() + functional_plants()
               + stats_plants())
    return [g for g in honest + planted if g is not None and not (quick and g.full_only)]
