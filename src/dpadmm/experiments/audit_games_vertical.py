"""Worst-case audit games of vertical ADMM sharing [Hu]: the feature side against a hostile coordinator and the
label side against a passive party (the instances are described in :mod:`.audit_worst_case`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from typing import NamedTuple

import numpy as np

from .audit_games import CANARY, DELTA, EPSILON, Game, ScaledRNG, ZeroRNG, calibrated_nm as _nm
from .audit_plants import (plant_half, plant_hub_rng, plant_patch, plant_reuse_parties, plant_reuse_round,
                           plant_reuse_rounds, plant_setup_option)
from .. import engine
from ..algorithms.vertical import (coordinator as vertical_coordinator, label as vertical_label,
                                   messages as vertical_messages)
from ..algorithms.vertical import party as vertical_party
from ..algorithms.vertical.messages import CoordinatorMessage, PartyMessage, Setup
from ..algorithms.vertical.protocol import PROTOCOL as VERTICAL
from ..backends import PartySpec
from ..protocol import Protocol
from ..kernels.losses import get_loss
from ..kernels.regularizers import get_regularizer

# ----------------------------------------------------------------------------- vertical feature side
V_N, V_T, V_LAM, V_CLIP, V_SEND = 8, 4, 0.01, 1.0, 4.0
V_RHOS = (1.0, 8.0, 1.0, 8.0)


@dataclass(frozen=True)
class _VCoord:
    names: tuple
    v: np.ndarray  # (N,) what every party is made to receive (before its clip)
    rhos: tuple


def _vcoord_msg(cfg: _VCoord, t: int, prev: dict):
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


def _vertical_options(relation: str, nm: float | None, noiseless: bool = False) -> vertical_messages.VerticalOptions:

    spec = vertical_messages.PrivacySpec(noise_multiplier=None if noiseless else nm, noise_scale=0.0 if noiseless else None,
                          mechanism="gaussian", relation=relation, clip=V_CLIP, clip_inf=V_CLIP)
    return vertical_messages.VerticalOptions(lam_sum=V_N * V_LAM, reg=get_regularizer("l2"), private=spec, bound=None,
                                             damping=0.0, solver="eigh")


def vertical_game(relation: str, *, plant=None, bug: str = "", backend: str = "inprocess", tag: str = "") -> Game:

    B1, B2, B2b = _vertical_blocks(relation)
    nm = _nm(V_T)
    v = np.zeros(V_N)
    v[CANARY] = V_SEND * V_CLIP
    names = ("party1", "party2")

    def setup(side, total):
        opts = _vertical_options(relation, nm)
        specs = [PartySpec.of(VERTICAL, n, Setup(name=n, D=B, options=opts), owner=n)
                 for n, B in zip(names, (B1, B2b if side else B2))]
        return specs, engine.Hub(_VCoord(names, v, V_RHOS), vcoord_init, vcoord_step)

    means = {}
    for side, B in ((0, B2), (1, B2b)):
        for n, blk in zip(names, (B1, B)):
            cfg, st = vertical_party.setup_party(n, blk, _vertical_options(relation, None, noiseless=True))
            for t, rho in enumerate(V_RHOS):
                msg = vertical_messages.CoordinatorMessage(t, v / rho, np.zeros(V_N), rho)
                means[side, n, t] = np.asarray(vertical_party.party_step(cfg, st, msg, rng=ZeroRNG())[1].share)

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
    games = [
        vertical_game(relation, plant=plant_half("party2"), tag=" (planted: noise x1/2)",
                      bug="party 2's standard-normal draws halved; its ledger keeps sigma"),
        vertical_game(relation, plant=plant_reuse_rounds("party2"), tag=" (planted: draw reused across rounds)",
                      bug="party 2 reuses its previous round's standard-normal draw every second round (times this "
                          "round's sigma)"),
        vertical_game(relation, plant=plant_reuse_parties("party1", "party2"),
                      tag=" (planted: draw shared by two parties)",
                      bug="party 2 adds party 1's standard-normal draw of the same round"),
        vertical_game(relation, plant=plant_patch("party2", vertical_party, "clip_share_input", lambda v, V, V_inf=None: v),
                      tag=" (planted: clipping skipped)",
                      bug="party 2 skips clip_share_input: ||v|| <= V not enforced (the coordinator sends 4V)"),
        vertical_game(relation, plant=plant_setup_option("party2", private=dataclasses.replace(
                          _vertical_options(relation, _nm(V_T)).private, relation="feature_column",
                          column_change=1e-3)),
                      tag=" (planted: coordinator-supplied sensitivity)",
                      bug="party 2 prices its shares with the relation constant the coordinator sent at Setup "
                          "(feature_column, column_change = 1e-3) while its data change by a unit"),
        vertical_game(relation, plant=plant_reuse_round("party2", 1, 2),
                      tag=" (planted: round 1's draw reused in round 2)",
                      bug="party 2 reuses the standard-normal draw of round 1 of each fit in its round 2 (times "
                          "round 2's sigma): once per fit"),
    ]
    return games


# ----------------------------------------------------------------------------- vertical label side
L_N, L_T = 8, 4


class _ShareSetup(NamedTuple):
    n: int


def _share_setup(n: int):
    return np.zeros(n), None


def _share_step(cfg, state, inbox, *, rng):
    return state, PartyMessage(share=cfg), []


#: the label game's passive parties (a share of zeros each round), declared as data like any party's protocol; not
#: registered: an audit harness, never served
SHARE_PROTOCOL = Protocol("audit-zero-share", _share_setup, _share_step, types=(PartyMessage,), setup_type=_ShareSetup)


def label_game(*, plant=None, bug: str = "", tag: str = "", backend: str = "inprocess") -> Game | None:

    if not hasattr(vertical_messages, "LabelPrivacy") or not hasattr(vertical_label, "label_private_step"):
        return None
    y = np.where(np.arange(L_N) % 2 == 0, 1.0, -1.0)
    yb = y.copy()
    yb[CANARY] = -yb[CANARY]
    nm = _nm(L_T)
    names = ("party1", "party2")

    def cfg(labels, private=True):
        lp = vertical_messages.LabelPrivacy(noise_multiplier=nm, clip=1.0, rounds=None)
        return vertical_messages.CoordinatorConfig(labels=labels, loss=get_loss("logistic"), lam=0.01, rho=1.0, party_names=names,
                                    fit_intercept=False, label_privacy=lp)

    def setup(side, total):
        specs = [PartySpec.of(SHARE_PROTOCOL, n, SHARE_PROTOCOL.setup_type(n=L_N), owner=n) for n in names]
        return specs, engine.Hub(cfg(yb if side else y), vertical_coordinator.init_coordinator, vertical_coordinator.coordinator_step)

    means = []
    for labels in (y, yb):
        c = cfg(labels)
        st = vertical_coordinator.init_coordinator(c)[0]
        zero = vertical_messages.PartyMessage(share=np.zeros(L_N))
        means.append(np.asarray(vertical_label.label_private_step(c, st, {n: zero for n in names}, rng=ZeroRNG())[1]["party2"].dual))

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
        plant=plant, broken=plant is not None, bug=bug, backend=backend, note="ratio limit 1", last_inbox=True)


def label_plants() -> list[Game]:
    """Noise halved. No reuse plant: for the logistic loss ``ℓ'(s, +1) − ℓ'(s, −1) = −1`` for every s, so every
    round moves the canary coordinate by the same amount at the same σ and a reused draw makes a later release
    a post-processing of an earlier one — no loss for any audit to find (the reuse plants of the feature side
    and the functional rounds are the regression tests for the shared sampler)."""
    game = label_game(plant=plant_hub_rng(lambda rng: ScaledRNG(rng, 0.5)), tag=" (planted: noise x1/2)",
                      bug="the coordinator's label noise draws halved; its ledger keeps sigma")
    return [game] if game is not None else []
