"""The engine's BLAS cap finds the libraries threadpoolctl finds (with fewer file-system calls), and a hub that draws
nothing gets no generator."""

import os

import networkx as nx
from typing import NamedTuple

import numpy as np
import scipy.linalg  # noqa: F401 - scipy's own BLAS loaded too
import threadpoolctl

from dpadmm import engine
from dpadmm.algorithms.gossip import driver as gossip_driver
from dpadmm.algorithms.gossip.params import GossipParams
from dpadmm.backends import InProcessBackend, PartySpec
from dpadmm.data.graphs import Nodes
from dpadmm.protocol import Protocol


def test_the_controller_finds_threadpoolctls_libraries():
    ours = engine._Controller()
    theirs = threadpoolctl.ThreadpoolController()
    assert sorted((c.filepath, c.internal_api) for c in ours.lib_controllers) == \
        sorted((c.filepath, c.internal_api) for c in theirs.lib_controllers)
    assert any(c.user_api == "blas" for c in ours.lib_controllers)  # numpy's OpenBLAS at least


def test_a_library_behind_a_link_with_another_name_is_still_found(tmp_path, monkeypatch):
    blas = next(c.filepath for c in threadpoolctl.ThreadpoolController().lib_controllers if c.user_api == "blas")
    link = tmp_path / "libblas-under-another-name.so"
    os.symlink(blas, link)
    seen = []
    controller = engine._Controller.__new__(engine._Controller)
    controller._prefixes = ("libopenblas", "libscipy_openblas")
    controller.lib_controllers = []
    monkeypatch.setattr(threadpoolctl.ThreadpoolController, "_make_controller_from_path", lambda self, p: seen.append(p))
    for path in (str(link), "/nowhere/libz.so.1", blas):
        controller._make_controller_from_path(path)
    assert seen == [str(link), blas]  # the link is resolved by threadpoolctl; libz cannot be a BLAS


class _NoArgs(NamedTuple):
    """The plain protocol's Setup: no fields."""


def _no_setup():
    return "plain", None  # a config (a party with no config has no run set up)


def _party_step(cfg, state, inbox, *, rng):
    return state, float(rng.standard_normal()), []


_PLAIN = Protocol("plain-engine-hub", _no_setup, _party_step, setup_type=_NoArgs)


def test_a_hub_that_draws_nothing_gets_no_generator_and_the_parties_draw_the_same():
    got, sent = [], []

    def step(cfg, state, outboxes, *, rng):
        got.append(rng)
        sent.append(outboxes["p"])
        return state, {"p": None}, []

    for seed in (4, None):
        runs = {}
        for random in (True, False):
            got.clear()
            sent.clear()
            hub = engine.Hub(None, lambda cfg: (0, {"p": None}), step, random=random)
            engine.run(hub=hub, parties=[PartySpec.of(_PLAIN, "p", _PLAIN.setup_type())], backend=InProcessBackend(),
                       rounds=3, noise_seed=seed, monitor=False)
            assert len(got) == 3 and all((g is None) == (not random) for g in got)
            runs[random] = list(sent)
        if seed is not None:  # the party's stream does not depend on the hub's
            assert runs[True] == runs[False]


def test_the_gossip_router_draws_nothing(monkeypatch):
    rng = np.random.default_rng(0)
    Xs = [rng.standard_normal((60, 2)) for _ in range(3)]
    ys = [np.where(x[:, 0] > 0, 1.0, -1.0) for x in Xs]
    seen = []
    real = engine.Hub.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        seen.append(self.random)

    monkeypatch.setattr(engine.Hub, "__init__", spy)
    gossip_driver.fit(GossipParams(epsilon=1.0, recalibrate=False), Nodes(Xs, ys, nx.cycle_graph(3)), InProcessBackend(),
                      noise_seed=3)
    assert seen == [False]
