"""The CLI's Typer app and its root callback; every command module (:mod:`dpadmm.cli.vertical`, …) registers its
commands on ``app``, and :mod:`dpadmm.cli` imports them all (so this module sits below both).
"""

from __future__ import annotations

from typing import Optional

import typer

from .. import __version__


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Differentially private distributed learning with ADMM.")


def _version_callback(value: bool) -> None:
    if value:
        print(f"dpadmm {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: Optional[bool] = typer.Option(None, "--version", callback=_version_callback, is_eager=True,
                                                  help="Print the version and exit.")):
    """Differentially private distributed learning with ADMM.

    Vertical ADMM sharing [Hu] (`vertical admm|experts|encrypted`, `demo`), decentralised consensus over a graph [Zhang]
    (`consensus gossip|madmm`, `attack kkt`), distributed functional quantile regression [Zhou] (`functional`),
    paper reproductions (`reproduce`) and an empirical privacy audit (`audit`).
    """

#: ``dpadmm vertical admm|experts|encrypted``: one command per protocol (:mod:`dpadmm.cli.vertical`,
#: :mod:`dpadmm.cli._vertical_experts`, :mod:`dpadmm.cli._vertical_encrypted` register on it)
vertical_app = typer.Typer(no_args_is_help=True, help="Logistic regression on vertically partitioned data: one "
                                                      "command per protocol (admm, experts, encrypted).")
app.add_typer(vertical_app, name="vertical")

#: ``dpadmm consensus gossip|madmm``: one command per protocol (:mod:`dpadmm.cli._consensus_gossip` and
#: :mod:`dpadmm.cli.consensus` register on it)
consensus_app = typer.Typer(no_args_is_help=True, help="Logistic regression over a graph of nodes: one command per "
                                                       "protocol (gossip, madmm).")
app.add_typer(consensus_app, name="consensus")
