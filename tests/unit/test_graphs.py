"""Topologies, edge-list files, connectivity and splits (dpadmm.data.graphs)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from dpadmm.data.graphs import adjacency, make_graph, split_indices, split_sizes
from dpadmm.exceptions import DataFileError, InvalidParameterError


@pytest.mark.parametrize("spec,degrees", [("ring", [2] * 6), ("line", [1, 2, 2, 2, 2, 1]), ("star", [5, 1, 1, 1, 1, 1]),
                                          ("complete", [5] * 6)])
def test_named_topologies(spec, degrees):
    G = make_graph(spec, 6)
    _, V = adjacency(G)
    assert V.tolist() == degrees


def test_erdos_is_connected_and_seeded():
    G1 = make_graph("erdos:0.15", 30, random_state=1)
    G2 = make_graph("erdos:0.15", 30, random_state=1)
    assert nx.is_connected(G1) and sorted(G1.edges) == sorted(G2.edges)
    with pytest.raises(InvalidParameterError, match="probability"):
        make_graph("erdos:abc", 10)
    with pytest.raises(InvalidParameterError, match="no connected"):
        make_graph("erdos:0.001", 50, random_state=0)


def test_edge_list_file(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("# a path\n1 2\n2 3\n\n3 10\n")
    G = make_graph(str(p))
    assert G.number_of_nodes() == 4 and G.number_of_edges() == 3
    with pytest.raises(InvalidParameterError, match="4 nodes but nodes=5"):
        make_graph(str(p), 5)


def test_disconnected_graph_is_refused(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("0 1\n2 3\n")
    with pytest.raises(InvalidParameterError, match="connected"):
        make_graph(str(p))
    with pytest.raises(InvalidParameterError, match="connected"):
        make_graph(nx.Graph([(0, 1), (2, 3)]))
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1 2\n")
    with pytest.raises(DataFileError, match="line 1"):
        make_graph(str(bad))
    with pytest.raises(InvalidParameterError, match="topology must be"):
        make_graph("torus", 5)


def test_splits():
    s = split_sizes(1000, 7, "even")
    assert s.sum() == 1000 and s.max() - s.min() <= 1
    u = split_sizes(45222, 100, "uneven", ratio=10.0)
    assert u.sum() == 45222 and 9.0 <= u.max() / u.min() <= 11.0
    parts = split_indices(50, 4, "uneven", random_state=0)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(50))
    with pytest.raises(InvalidParameterError):
        split_sizes(3, 5)
