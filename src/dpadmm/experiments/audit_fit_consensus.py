"""Whole-fit audit rows of consensus M-ADMM with penalty perturbation [Zhang] and its planted bugs (:mod:`.audit_e2e`)."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from unittest import mock

import numpy as np

from ..algorithms.consensus import node as consensus_node  # where block_step looks _noise up (patched there)
from ..estimators.consensus import ConsensusLogisticRegression
from ..algorithms.consensus import driver as fit_consensus
from .audit_fit import Pair, Row, _capture, _seeded, _unit_rows

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
    real = consensus_node._noise

    def patch():
        return mock.patch.object(consensus_node, "_noise", lambda rng, alpha, d: real(rng, np.asarray(alpha) * factor, d))

    return Row(
        name=f"zhang-consensus-pp (planted: noise rate x{factor:g})", algorithm="consensus [Zhang]",
        relation="record-replace", adversary="every f_i(t) of every node", fit=_consensus_fit,
        pairs=_consensus_pairs()[:1], broken=True, patch=patch,
        bug=f"graph_consensus._noise draws with rate {factor:g} alpha (noise {factor:g}x too small) while the "
            "ledger records alpha",
        description="the real fit with the penalty noise drawn at the wrong scale")


def consensus_reuse_bug_row() -> Row:
    real_noise, real_step = consensus_node._noise, consensus_node.block_step

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
        stack.enter_context(mock.patch.object(consensus_node, "_noise", once))
        # the fit's nodes run the declaration the driver holds: a copy of it with the planted step
        stack.enter_context(mock.patch.object(fit_consensus, "CONSENSUS", replace(fit_consensus.CONSENSUS, step=step)))
        return stack

    return Row(
        name="zhang-consensus-pp (planted: noise drawn once, reused every round)", algorithm="consensus [Zhang]",
        relation="record-replace", adversary="every f_i(t) of every node", fit=_consensus_fit,
        pairs=_consensus_pairs()[:1], broken=True, patch=patch,
        bug="graph_consensus._noise returns its first draw in every later round of the fit",
        description="the real fit with the penalty noise reused across rounds")
