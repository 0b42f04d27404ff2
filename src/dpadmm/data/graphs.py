"""Network topologies and sample-to-node splits for decentralised consensus [Zhang, §2].

A topology is an undirected, **connected** networkx graph on nodes ``0 … N−1`` (M-ADMM's
convergence needs connectivity: Null(D − A) = c·1 [Zhang, §3]). Specs:

| spec | graph |
|------|-------|
| ``ring`` | cycle C_N (N ≥ 3; for N = 2 a single edge) |
| ``line`` | path P_N |
| ``star`` | node 0 joined to all others |
| ``complete`` | K_N |
| ``erdos:p`` | G(N, p) redrawn (from ``random_state``) until connected |
| a file path | edge list, one ``u v`` pair per line (``#`` comments, blank lines allowed) |

Splits: ``even`` (shuffled, sizes differ by at most 1) and ``uneven`` (shuffled, sizes
proportional to ``linspace(1, ratio, N)``: the largest node holds ``ratio`` times the smallest).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import networkx as nx
import numpy as np

from ..exceptions import DataFileError, InvalidParameterError

TOPOLOGIES = ("ring", "line", "star", "complete", "erdos:p", "FILE")
SPLITS = ("even", "uneven")
MAX_ERDOS_TRIES = 1000


@dataclass(frozen=True)
class Nodes:
    """The data of a decentralised fit: node i's rows ``Xs[i]`` and labels ``ys[i]`` (±1; or the nodes' own
    file references) on the connected ``graph`` over nodes 0 … N−1."""

    Xs: Sequence
    ys: Sequence
    graph: nx.Graph

    def __post_init__(self):
        if self.graph.number_of_nodes() != len(self.Xs):
            raise InvalidParameterError(f"the graph has {self.graph.number_of_nodes()} nodes but there are "
                                        f"{len(self.Xs)} node datasets.")


def check_connected(G: nx.Graph) -> nx.Graph:
    """Raise unless ``G`` is a connected graph with at least 2 nodes and no self-loops."""
    n = G.number_of_nodes()
    if n < 2:
        raise InvalidParameterError(f"a consensus network needs at least 2 nodes, got nodes={n}.")
    if nx.number_of_selfloops(G):
        raise InvalidParameterError("the graph has self-loops; a node cannot be its own neighbour.")
    if not nx.is_connected(G):
        comps = nx.number_connected_components(G)
        raise InvalidParameterError(
            f"the graph must be connected, got {comps} connected components; add edges between them "
            "(M-ADMM cannot reach consensus on a disconnected network).")
    return G


def read_edge_list(path) -> nx.Graph:
    """Read an edge-list file (``u v`` per line); nodes are relabelled ``0 … N−1`` in sorted order."""
    p = Path(os.fspath(path))
    if not p.is_file():
        raise DataFileError(f"edge-list file not found: {p}; check the path.")
    edges = []
    for k, line in enumerate(p.read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        if len(parts) != 2:
            raise DataFileError(f"{p}, line {k}: expected one 'u v' pair, got {line!r}.")
        edges.append(tuple(parts))
    if not edges:
        raise DataFileError(f"edge-list file {p} has no edges; write one 'u v' pair per line.")
    labels = sorted({u for e in edges for u in e}, key=lambda s: (not s.lstrip("-").isdigit(), int(s) if s.lstrip("-").isdigit() else 0, s))
    index = {lab: i for i, lab in enumerate(labels)}
    G = nx.Graph()
    G.add_nodes_from(range(len(labels)))
    G.add_edges_from((index[u], index[v]) for u, v in edges)
    return G


def make_graph(spec, n_nodes: int | None = None, *, random_state=None) -> nx.Graph:
    """Build a connected topology from a spec (see the module table) or pass a networkx graph through.

    ``n_nodes`` is required for the named topologies; for a file it must match (or be None).
    """
    if isinstance(spec, nx.Graph):
        G = nx.convert_node_labels_to_integers(nx.Graph(spec), ordering="sorted")
    else:
        s = str(spec)
        named = s in ("ring", "line", "star", "complete") or s.startswith("erdos")
        if named:
            if n_nodes is None or isinstance(n_nodes, bool) or int(n_nodes) < 2:
                raise InvalidParameterError(f"nodes must be an integer >= 2, got nodes={n_nodes!r}.")
            n = int(n_nodes)
        if s == "ring":
            G = nx.cycle_graph(n) if n >= 3 else nx.path_graph(n)
        elif s == "line":
            G = nx.path_graph(n)
        elif s == "star":
            G = nx.star_graph(n - 1)
        elif s == "complete":
            G = nx.complete_graph(n)
        elif s.startswith("erdos"):
            G = _erdos(s, n, random_state)
        elif Path(s).is_file():
            G = read_edge_list(s)
            if n_nodes is not None and G.number_of_nodes() != int(n_nodes):
                raise InvalidParameterError(
                    f"the edge list {s} has {G.number_of_nodes()} nodes but nodes={n_nodes}; make them agree "
                    "(or omit --nodes).")
        else:
            raise InvalidParameterError(
                f"topology must be one of ring, line, star, complete, erdos:p or an edge-list file, got "
                f"topology={s!r}.")
    return check_connected(G)


def _erdos(spec: str, n: int, random_state) -> nx.Graph:
    try:
        p = float(spec.split(":", 1)[1])
    except (IndexError, ValueError):
        raise InvalidParameterError(f"erdos topology needs a probability, e.g. erdos:0.3, got topology={spec!r}.") from None
    if not 0.0 < p <= 1.0:
        raise InvalidParameterError(f"the erdos edge probability must be in (0, 1], got p={p}.")
    rng = np.random.default_rng(random_state)
    for _ in range(MAX_ERDOS_TRIES):
        G = nx.gnp_random_graph(n, p, seed=int(rng.integers(2**31 - 1)))
        if nx.is_connected(G):
            return G
    raise InvalidParameterError(
        f"no connected G(n={n}, p={p}) graph in {MAX_ERDOS_TRIES} draws; increase p (ln(n)/n = "
        f"{np.log(n) / n:.3g} is the connectivity threshold).")


def adjacency(G: nx.Graph):
    """Sparse symmetric 0/1 adjacency matrix A (CSR) and the degree vector V (|V_i| of [Zhang])."""
    A = nx.to_scipy_sparse_array(G, nodelist=range(G.number_of_nodes()), format="csr", dtype=np.float64)
    return A, np.asarray(A.sum(axis=1)).ravel()


def split_sizes(n_samples: int, n_nodes: int, split: str = "even", ratio: float = 10.0) -> np.ndarray:
    """Number of samples per node for an ``even`` or ``uneven`` split (every node gets >= 1)."""
    if split not in SPLITS:
        raise InvalidParameterError(f"split must be one of {list(SPLITS)}, got split={split!r}.")
    if n_nodes > n_samples:
        raise InvalidParameterError(f"cannot split {n_samples} samples over {n_nodes} nodes; use fewer nodes.")
    if split == "even":
        w = np.ones(n_nodes)
    else:
        if not ratio >= 1.0:
            raise InvalidParameterError(f"the uneven ratio must be >= 1, got ratio={ratio}.")
        w = np.linspace(1.0, ratio, n_nodes)
    sizes = np.floor(w / w.sum() * n_samples).astype(int)
    sizes = np.maximum(sizes, 1)
    rest = n_samples - sizes.sum()
    order = np.argsort(-w, kind="stable")
    i = 0
    while rest != 0:  # hand out (or take back) the rounding remainder, largest nodes first
        j = order[i % n_nodes]
        if rest > 0:
            sizes[j] += 1
            rest -= 1
        elif sizes[j] > 1:
            sizes[j] -= 1
            rest += 1
        i += 1
    return sizes


def split_indices(n_samples: int, n_nodes: int, split: str = "even", *, ratio: float = 10.0,
                  random_state=None) -> list[np.ndarray]:
    """Shuffle ``0 … n_samples−1`` and cut it into per-node index arrays (:func:`split_sizes`)."""
    sizes = split_sizes(n_samples, n_nodes, split, ratio)
    perm = np.random.default_rng(random_state).permutation(n_samples)
    return [np.sort(a) for a in np.split(perm, np.cumsum(sizes)[:-1])]
