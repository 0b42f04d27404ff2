"""Each protocol's typed ``Setup`` view has its setup function's parameter names and defaults, so a policy hook that
reads ``setup.clip`` reads exactly the argument the party's setup receives as ``clip``."""

import inspect

import pytest

from dpadmm.algorithms.consensus.messages import Setup as ConsensusSetup
from dpadmm.algorithms.experts.messages import Setup as ExpertsSetup
from dpadmm.algorithms.functional.messages import Setup as FunctionalSetup
from dpadmm.algorithms.functional.statistics import StatsSetup
from dpadmm.algorithms.vertical.messages import Setup as VerticalSetup
from dpadmm.exceptions import ProtocolError
from dpadmm.protocol import find_protocol, setup_view


@pytest.mark.parametrize("name,view", [
    ("vertical-sharing", VerticalSetup), ("graph-consensus", ConsensusSetup), ("vertical-experts", ExpertsSetup),
    ("functional-quantile", FunctionalSetup), ("functional-statistics", StatsSetup),
])
def test_setup_view_matches_the_setup_function(name, view):
    params = inspect.signature(find_protocol(name).setup).parameters
    assert view._fields == tuple(params)
    defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    assert view._field_defaults == defaults


def test_setup_view_names_the_fields_when_the_list_is_wrong():
    n = len(ExpertsSetup._fields)
    with pytest.raises(ProtocolError, match=rf"takes 2 to {n} setup arguments \(name, train, score, R, .*got {n + 1}"):
        setup_view(ExpertsSetup, list(range(n + 1)))
    with pytest.raises(ProtocolError, match="got 1"):
        setup_view(ExpertsSetup, ["party1"])
    s = setup_view(ExpertsSetup, ["party1", "train-ref", None, 2.0])
    assert (s.name, s.R, s.lam, s.model) == ("party1", 2.0, 1e-3, None)
