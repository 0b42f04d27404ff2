"""The gossip validation as the nodes' declared stage (algorithms/gossip/validation.py: ``answer``, ``combine``;
node.py's step; policy.py's price; issue 38 item 4 for deployed runs): the node computes and releases its own count
and comparison under its own generator and ledger, checks what the coordinator sends, answers once per run, and the
simulation's numbers are the same step's."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from dpadmm.algorithms.consensus.baseline import MARGIN_CLIP, P_MIN, loss_difference
from dpadmm.algorithms.gossip import driver, policy
from dpadmm.algorithms.gossip import validation as val
from dpadmm.algorithms.gossip.messages import GossipOptions
from dpadmm.algorithms.gossip.node import GossipInbox, node_step, setup_node
from dpadmm.algorithms.gossip.params import GossipParams
from dpadmm.data.graphs import Nodes
from dpadmm.privacy.events import PureDPRelease
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal

EPS = (0.05, 0.15)  # the declared (ε_b, ε_c)


def _nodes(seed=1, sizes=(500, 700, 600, 400), d=3):
    r = np.random.default_rng(seed)
    Xs, ys = [], []
    for b in sizes:
        X = r.normal(size=(b, d))
        Xs.append(X)
        ys.append(np.where(X[:, 0] + 0.5 * X[:, 1] + r.normal(size=b) > 0, 1.0, -1.0))
    return Xs, ys


def _trained_node(validation=EPS, rounds=2, seed=0):
    """One node set up with declared bounds and ``validation``, after its ``rounds`` gradient rounds."""
    X, y = (v[0] for v in _nodes(seed))
    o = GossipOptions(degree=2, max_degree=2, n_nodes=4, n_total=2200, rounds=rounds, range_rounds=0,
                      noise_multiplier=3.0, step=0.5, momentum=0.0, ridge=1e-4, row_clip=2.0,
                      bounds=(np.full(3, -4.0), np.full(3, 4.0)), validation=validation)
    cfg, st = setup_node("node0", X, y, o)
    rng = np.random.default_rng(5)
    for t in range(rounds):
        st, _, _ = node_step(cfg, st, GossipInbox(t, np.zeros(4), cfg.bounds[0], cfg.bounds[1]), rng=rng)
    return cfg, st


class _Untouched:
    """A generator that fails the test if the node draws from it (a refusal draws and releases nothing)."""

    def laplace(self, *a, **k):
        raise AssertionError("the node drew noise for a request it refused")


def test_the_node_step_releases_its_count_then_its_comparison_with_the_proved_sensitivity():
    cfg, st = _trained_node()
    w, p = np.array([0.4, -0.2, 0.1, 0.05]), 0.37
    rng, ref = np.random.default_rng(9), np.random.default_rng(9)
    st1, rel, ev = node_step(cfg, st, val.ValidationRequest("count", EPS[0]), rng=rng)
    assert rel == val.ValidationRelease("count", float(np.count_nonzero(cfg.y > 0)) + ref.laplace(0.0, 1 / EPS[0]))
    assert ev == [PureDPRelease("node0", -2, EPS[0], ev[0].relation)] and st1.validated == ("count",)
    st2, rel, ev = node_step(cfg, st1, val.ValidationRequest("compare", EPS[1], w, p), rng=rng)
    d = loss_difference(w, st.Xt, cfg.y, p, MARGIN_CLIP, P_MIN).sum()
    delta = MARGIN_CLIP + abs(math.log(p / (1 - p)))  # Δ = L + |logit p|
    assert rel.value == pytest.approx(d + ref.laplace(0.0, delta / EPS[1]), rel=1e-12)
    assert ev[0].epsilon == EPS[1] and ev[0].round == -1 and st2.validated == ("count", "compare")
    assert st2.round == st.round + 2 and st2.avg is st.avg  # the node's model is untouched by the stage


@pytest.mark.parametrize("request_, reason", [
    (val.ValidationRequest("compare", EPS[1], np.array([np.nan, 0, 0, 0.0]), 0.3), "the model must be 4 finite"),
    (val.ValidationRequest("compare", EPS[1], np.array([np.inf, 0, 0, 0.0]), 0.3), "the model must be 4 finite"),
    (val.ValidationRequest("compare", EPS[1], np.zeros(3), 0.3), "the model must be 4 finite"),
    (val.ValidationRequest("compare", EPS[1], np.zeros(4), math.nan), "the base rate p=nan must be finite"),
    (val.ValidationRequest("compare", EPS[1], np.zeros(4), 0.3, margin_clip=0.0), "margin clip L=0.0"),
    (val.ValidationRequest("compare", EPS[1], np.zeros(4), 0.3, margin_clip=math.inf), "margin clip L=inf"),
    (val.ValidationRequest("compare", EPS[1], np.zeros(4), 0.3, p_min=0.0), "p_min=0.0 must be in"),
    (val.ValidationRequest("compare", 2 * EPS[1], np.zeros(4), 0.3), "its Setup declared 0.15"),
    (val.ValidationRequest("compare", math.inf, np.zeros(4), 0.3), "its Setup declared 0.15"),
    (val.ValidationRequest("count", EPS[0]), "a second 'count' release in one run"),
    (val.ValidationRequest("refit", EPS[0]), "an unknown stage 'refit'"),
])
def test_a_hostile_coordinator_request_is_refused_with_its_reason(request_, reason):
    cfg, st = _trained_node()
    st, _, _ = node_step(cfg, st, val.ValidationRequest("count", EPS[0]), rng=np.random.default_rng(0))
    with pytest.raises(PolicyRefusal, match=reason):
        node_step(cfg, st, request_, rng=_Untouched())


def test_a_second_comparison_of_another_model_is_refused():
    cfg, st = _trained_node()
    rng = np.random.default_rng(0)
    st, _, _ = node_step(cfg, st, val.ValidationRequest("count", EPS[0]), rng=rng)
    st, _, _ = node_step(cfg, st, val.ValidationRequest("compare", EPS[1], np.zeros(4), 0.3), rng=rng)
    with pytest.raises(PolicyRefusal, match="a second 'compare' release in one run"):
        node_step(cfg, st, val.ValidationRequest("compare", EPS[1], np.ones(4), 0.3), rng=_Untouched())


@pytest.mark.parametrize("case, reason", [
    ("undeclared", "its Setup declared no validation"),
    ("early", "a validation before its 2 declared gradient rounds are done"),
    ("compare-first", "a compare before its count"),
    ("count-above", "the count at epsilon=0.5: its Setup declared 0.05"),
])
def test_a_validation_the_node_did_not_declare_or_not_in_order_is_refused(case, reason):
    cfg, st = _trained_node(validation=None if case == "undeclared" else EPS, rounds=2)
    if case == "early":
        cfg, st = _trained_node(rounds=2)
        st = st._replace(round=1)
    req = {"compare-first": val.ValidationRequest("compare", EPS[1], np.zeros(4), 0.3),
           "count-above": val.ValidationRequest("count", 0.5)}.get(case, val.ValidationRequest("count", EPS[0]))
    with pytest.raises(PolicyRefusal, match=reason):
        node_step(cfg, st, req, rng=_Untouched())


def test_the_node_prices_the_stage_and_checks_its_epsilons():
    cfg, _ = _trained_node()
    assert policy.price(cfg, 2).pure_epsilon == 0.0  # the gradient rounds alone
    assert policy.price(cfg, 3).pure_epsilon == pytest.approx(EPS[0])
    assert policy.price(cfg, 4).pure_epsilon == pytest.approx(sum(EPS))
    assert policy.price(cfg, 99).pure_epsilon == pytest.approx(sum(EPS))  # each stage once, whatever is declared
    assert policy.price(cfg, 4).gaussian == {3.0: 2}
    bad, _ = _trained_node(validation=(0.05, math.inf))
    with pytest.raises(PolicyRefusal, match="comparison's ε_c"):
        policy.check(bad, None, PartyPolicy(), "node0")


def test_the_simulation_is_the_node_step_with_the_same_generators():
    """validate (the rows here) = answer at every node + combine: its numbers are the node step's, drawn from the
    same per-node generators (the released values and the decision, exactly)."""
    Xs, ys = _nodes()
    Xts = [np.column_stack([x / 4, np.ones(len(x))]) for x in Xs]
    w = np.array([3.0, 1.5, 0.0, 0.0])
    names = [f"node{i}" for i in range(4)]

    class Ledger(list):
        def record(self, events):
            self.extend(events)

    a, la = val.validate(names, Xts, ys, w, epsilon=0.2, rngs=val.node_generators(7, 4), ledger=Ledger()), Ledger()
    n = sum(len(y) for y in ys)
    declared, rngs, done = val.split(0.2, n, 4), val.node_generators(7, 4), {nm: () for nm in names}
    counts = {}
    for i, nm in enumerate(names):
        done[nm], counts[nm], ev = val.answer(nm, Xts[i], ys[i], declared, done[nm],
                                              val.ValidationRequest("count", declared[0]), rngs[i])
        la.extend(ev)
    p = val.pooled_rate(sum(c.value for c in counts.values()), math.sqrt(8) / declared[0], n)
    diff = 0.0
    for i, nm in enumerate(names):
        _, rel, ev = val.answer(nm, Xts[i], ys[i], declared, done[nm], val.ValidationRequest("compare", declared[1], w, p),
                                rngs[i])
        diff += rel.value
        la.extend(ev)
    assert (a.base_rate, a.difference) == (p, diff) and a.handed_over == "model" and len(la) == 8


def test_in_process_simulation_and_the_nodes_stage_decide_alike():
    """The same seeded run validated by the simulation (rows here) and by the nodes' declared stage (two more rounds
    stepped by the backend, each node's own step and round generator): the rounds are the same, the per-node ε (the
    ledger's, the slice included) is the same, and so is the decision (a comparison won by far more than its noise)."""
    Xs, ys = _nodes(sizes=(900, 1200, 1000, 700))
    par = GossipParams(epsilon=2.0, rounds=12, bounds=(np.full(3, -4.0), np.full(3, 4.0)))
    data = Nodes(Xs, ys, nx.cycle_graph(4))
    a = driver.fit(par, data, noise_seed=3)
    b = driver.fit(par, data, noise_seed=3, validation_at_nodes=True)
    np.testing.assert_array_equal(a.F, b.F)
    assert a.validation.handed_over == b.validation.handed_over == "model"
    assert a.validation.epsilon == b.validation.epsilon and a.validation.difference < 4 * a.validation.threshold
    assert b.report.per_party == pytest.approx(a.report.per_party, rel=1e-12)
    eps_b, eps_c = val.split(b.validation.epsilon, 3200, 4)
    assert b.ledger.pure_epsilons() == pytest.approx({f"node{i}": eps_b + eps_c for i in range(4)})
    assert not any("no DP validation" in n for n in b.report.notes)


def test_a_resumed_run_reuses_what_its_nodes_released(tmp_path):
    """The nodes' stage runs after the engine's rounds, outside its checkpoints: a run resumed from its folder reuses
    the released values kept there (validation.json; the nodes are not asked again, the events booked as drawn once),
    as the simulation's released_once does."""
    Xs, ys = _nodes(sizes=(300, 400, 350, 250))
    par = GossipParams(epsilon=1.0, rounds=4, bounds=(np.full(3, -4.0), np.full(3, 4.0)))
    data = Nodes(Xs, ys, nx.cycle_graph(4))
    first = driver.fit(par, data, noise_seed=None, validation_at_nodes=True, checkpoint_dir=tmp_path,
                       checkpoint_every=1)
    assert (tmp_path / val.STORE).is_file()
    again = driver.fit(par, data, noise_seed=None, validation_at_nodes=True, resume_from=tmp_path)
    assert again.validation == first.validation  # OS-entropy noise: equal only if reused
    assert again.ledger.pure_epsilons() == pytest.approx(first.ledger.pure_epsilons(), rel=1e-12)
    assert again.report.per_party == pytest.approx(first.report.per_party, rel=1e-12)
