"""The option groups of ``dpadmm consensus gossip|madmm``, defined once (:class:`dpadmm.cli._options.OptionGroup`):
each protocol's command takes the groups it honours, so no command lists, or refuses by hand, an option of the other
protocol — the parser's own "no option" line does (naming the sibling command that has it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer

from . import _backend as bk
from ._options import OptionGroup, _option

#: the help panels of every ``dpadmm consensus`` command; docs/reference/cli.md explains each option in full
DATA, MODEL, PRIVACY = "Data and graph", "Model and protocol", "Privacy"


def iterations_option(help: str = "Iterations T (default: auto)."):
    return typer.Option(None, rich_help_panel=MODEL, help=help)


def runs_option():
    return typer.Option(1, rich_help_panel=MODEL, help="Independent runs R.")


def target_option():
    return typer.Option(None, rich_help_panel=MODEL, metavar="binary|regression|multiclass",
                        help="What the label is (default binary; declared, never read off the labels).")


def classes_option():
    return typer.Option(None, rich_help_panel=MODEL, metavar="A,B,...",
                        help="--target multiclass: the classes (labels outside them count as none).")


def peer_to_peer_option():
    return typer.Option(False, "--peer-to-peer", rich_help_panel=bk.BACKEND_PANEL,
                        help="grpc: nodes talk to their neighbours.")


@dataclass(frozen=True)
class Graph(OptionGroup):
    """The data split at random into nodes, and the graph joining them (the "Data and graph" panel)."""

    data: Optional[str] = _option(lambda: typer.Option(
        None, rich_help_panel=DATA, help="adult (bundled, the default) or a LIBSVM FILE, split at random into --nodes."))
    nodes: Optional[int] = _option(lambda: typer.Option(None, rich_help_panel=DATA,
                                                        help="Number of nodes N (default 5)."))
    topology: str = _option(lambda: typer.Option("ring", rich_help_panel=DATA,
                                                 help="ring|line|star|complete|erdos:p|FILE."))
    split: str = _option(lambda: typer.Option("even", rich_help_panel=DATA, help="even|uneven."))
    uneven_ratio: float = _option(lambda: typer.Option(10.0, rich_help_panel=DATA,
                                                       help="Largest/smallest node size (uneven)."))


@dataclass(frozen=True)
class TestRows(OptionGroup):
    """Where the test rows come from (the rest of the "Data and graph" panel)."""

    test: Optional[Path] = _option(lambda: typer.Option(None, rich_help_panel=DATA, help="Held-out LIBSVM file."))
    test_fraction: float = _option(lambda: typer.Option(0.0, rich_help_panel=DATA,
                                                        help="Hold out this share of the rows."))


@dataclass(frozen=True)
class NodeFiles(OptionGroup):
    """The nodes' own files, kept as given (gossip: ``cli/_consensus_nodes.py``)."""

    node: List[Path] = _option(lambda: typer.Option(
        [], "--node", metavar="FILE", rich_help_panel=DATA,
        help="One node's own file, kept as given (repeat once per node; LIBSVM or CSV)."))
    test_node: List[Path] = _option(lambda: typer.Option([], "--test-node", metavar="FILE", rich_help_panel=DATA,
                                                         help="One node's test file (repeat, --node order)."))
    label_column: str = _option(lambda: typer.Option("y", rich_help_panel=DATA,
                                                     help="Label column of CSV --node files."))
    id_column: str = _option(lambda: typer.Option("id", rich_help_panel=DATA,
                                                  help="Id column of CSV --node files (dropped)."))
    own_files: bool = _option(lambda: typer.Option(
        False, "--own-files", rich_help_panel=bk.BACKEND_PANEL,
        help="grpc: each node reads its own file (party serve --data train=FILE)."))


@dataclass(frozen=True)
class Schedules(OptionGroup):
    """M-ADMM's step and noise schedules [Zhang, eq. 10–11] (the "Model and protocol" and "Privacy" panels)."""

    eta: Optional[str] = _option(lambda: typer.Option(None, rich_help_panel=MODEL,
                                                      help="η_i(1), one or one per node."))
    eta_growth: Optional[str] = _option(lambda: typer.Option(None, rich_help_panel=MODEL,
                                                             help="q of η_i(t) = η_i(1) q^(t-1)."))
    alpha: Optional[str] = _option(lambda: typer.Option(None, rich_help_panel=PRIVACY,
                                                        help="α_i(1) of the noise density."))
    alpha_growth: Optional[str] = _option(lambda: typer.Option(None, rich_help_panel=PRIVACY,
                                                               help="q of α_i(t) = α_i(1) q^(t-1)."))
    theta: str = _option(lambda: typer.Option("0.5", rich_help_panel=MODEL,
                                              help="Dual step θ (one or one per node)."))
    theta_growth: str = _option(lambda: typer.Option("1.0", rich_help_panel=MODEL, help="q of θ(t) (1: fixed θ)."))


@dataclass(frozen=True)
class Penalty(OptionGroup):
    """M-ADMM's objective: the loss weight and the regulariser (the "Model and protocol" panel)."""

    C: Optional[float] = _option(lambda: typer.Option(None, "--C", rich_help_panel=MODEL,
                                                      help="Loss weight C (default: auto)."))
    reg_weight: Optional[float] = _option(lambda: typer.Option(None, rich_help_panel=MODEL,
                                                               help="The paper's ρ (default: auto)."))


@dataclass(frozen=True)
class Checkpoints(OptionGroup):
    """Checkpoints and resuming (gossip: M-ADMM's DP fallback releases after the rounds, outside a checkpoint)."""

    checkpoint_every: Optional[int] = _option(bk.checkpoint_every_option)
    resume: Optional[Path] = _option(bk.resume_option)


__all__ = ["Checkpoints", "DATA", "Graph", "MODEL", "NodeFiles", "PRIVACY", "Penalty", "Schedules", "TestRows",
           "iterations_option", "peer_to_peer_option", "runs_option",
           "target_option"]
