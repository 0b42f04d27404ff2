"""Parties hosted by the party runtime on the simulation backends (issue 25, item 2).

A party given its operator's policy (``policies=``) runs a fit exactly as one without: a seeded run gives the same
numbers on the in-process and process backends as the policy-less run, and each party's own ledger holds the
releases it made, and its audit log a line per round.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import ledger_of

from dpadmm import ConsensusLogisticRegression
from dpadmm.backends import InProcessBackend, PartyOperator, ProcessBackend
from dpadmm.exceptions import InvalidParameterError, ProtocolError
from dpadmm.privacy.policy import PartyPolicy

NODES = [f"node{i}" for i in range(3)]
ROUNDS = 6


def _fit(backend, X, y):
    model = ConsensusLogisticRegression(n_nodes=3, batch=False, perturbation="pp", alpha=3.0, max_iter=ROUNDS,
                                        random_state=3, backend=backend, normalize=True, fallback_epsilon=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short private fit's convergence warnings are not this test's concern
        return model.fit(X, y)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    return X, np.where(X[:, 0] + 0.3 * rng.normal(size=200) > 0, 1, -1)


@pytest.mark.parametrize("kind", [InProcessBackend, ProcessBackend])
def test_a_seeded_fit_under_party_policies_gives_the_policy_less_numbers_and_fills_each_ledger(kind, data, tmp_path):
    reference = _fit("inprocess", *data).coef_
    operators = {n: PartyOperator(policy=PartyPolicy(max_epsilon=50.0, delta=1e-5), allow_seeded_noise=True)
                 for n in NODES}
    coef = _fit(kind(policies=operators, party_dir=tmp_path), *data).coef_
    np.testing.assert_array_equal(coef, reference)
    for n in NODES:
        ledger = ledger_of(None, key=f"party:{n}")  # the data came from the coordinator: the party's own budget
        assert ledger["releases"] == ROUNDS and len(ledger["runs"]) == 1
        audit = [json.loads(x) for x in (tmp_path / n / "audit.jsonl").read_text().splitlines()]
        assert [r["status"] for r in audit if r["method"] == "Step"] == ["ok"] * ROUNDS


def test_a_seeded_simulation_is_refused_by_a_party_that_does_not_allow_it(data, tmp_path):
    policies = {n: PartyPolicy(max_epsilon=50.0, delta=1e-5) for n in NODES}
    with pytest.raises(ProtocolError, match=r"^party 'node0' refused a coordinator-chosen noise seed"):
        _fit(InProcessBackend(policies=policies, party_dir=tmp_path), *data)


def test_a_policy_needs_a_directory_and_a_party_of_the_run(tmp_path):
    with pytest.raises(InvalidParameterError, match="has a policy but no directory of its own"):
        InProcessBackend(policies={"node0": PartyPolicy(no_budget=True)})
    be = InProcessBackend(policies={"nodeX": PartyPolicy(no_budget=True)}, party_dir=tmp_path)
    with pytest.raises(InvalidParameterError, match=r"policies name 'nodeX', which is not a party of this run"):
        be.start([])
