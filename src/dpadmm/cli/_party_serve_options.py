"""The option groups of ``dpadmm party serve`` (:class:`dpadmm.cli._options.OptionGroup`): the party's TLS identity
and its own privacy policy, budget and ledger — typed values the command hands to the helpers of
:mod:`dpadmm.cli._party_serve`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer

from ._options import OptionGroup, _option


@dataclass(frozen=True)
class PartyTLS(OptionGroup):
    """This party's identity: its certificate, key and CA (or a TLS directory)."""

    tls: Optional[Path] = _option(lambda: typer.Option(None, "--tls", help="Directory with cert.pem, key.pem, ca.pem "
                                                                "(from dpadmm provision)."))
    cert: Optional[Path] = _option(lambda: typer.Option(None, "--cert", help="This party's certificate (PEM)."))
    key: Optional[Path] = _option(lambda: typer.Option(None, "--key", help="This party's private key (PEM)."))
    ca: Optional[Path] = _option(lambda: typer.Option(None, "--ca", help="The CA certificate this party trusts (PEM)."))


@dataclass(frozen=True)
class PartyPolicy(OptionGroup):
    """This party's own policy: what it refuses, its budget and ledger, its premises, preparation, graph neighbours and PSI caps."""

    private_only: bool = _option(lambda: typer.Option(False, "--private-only", help="Refuse runs that add no noise."))
    max_rounds: Optional[int] = _option(lambda: typer.Option(None, "--max-rounds", help="Refuse more than N rounds (releases) per run."))
    max_epsilon: Optional[float] = _option(lambda: typer.Option(None, "--max-epsilon",
                                                    help="This party's own privacy budget: every run is priced at Setup "
                                                         "and refused if it would bring the composed ε of all its "
                                                         "releases on its data set (across runs, servers and hosts, in "
                                                         "the organisation's --ledger store) above E at --delta. Implies "
                                                         "--private-only."))
    ledger: Optional[str] = _option(lambda: typer.Option(None, "--ledger", envvar="DPADMM_LEDGER",
                                             help="The organisation's ledger store, the same for all its servers: "
                                                  "sqlite:///PATH (embedded, one host) or postgresql://… (several "
                                                  "hosts; pip install 'dpadmm[postgres]'). Needed with a budget."))
    ledger_key: Optional[Path] = _option(lambda: typer.Option(None, "--ledger-key", envvar="DPADMM_LEDGER_KEY",
                                                  help="The operator's key of the store (made with the store on first "
                                                       "use; keep it apart from the store, the same file on every "
                                                       "server). Needed with a budget."))
    data_set: Optional[str] = _option(lambda: typer.Option(None, "--data-set", help="The operator's name of the data set this party "
                                                                       "serves (its budget is then kept under that name; "
                                                                       "default: the digest of its rows)."))
    ledger_dir: Optional[Path] = _option(lambda: typer.Option(None, "--ledger-dir", hidden=True))
    delta: Optional[float] = _option(lambda: typer.Option(None, "--delta", help="The δ of --max-epsilon."))
    no_budget: bool = _option(lambda: typer.Option(False, "--no-budget", help="Serve without a privacy budget or ledger (an explicit "
                                                                  "opt-out, e.g. for non-private runs; recorded in the "
                                                                  "audit log)."))
    policy_file: Optional[Path] = _option(lambda: typer.Option(None, "--policy", help="This party's privacy policy (JSON or TOML: "
                                                                          "max_epsilon, delta, relation, column_change, "
                                                                          "min_noise_multiplier, max_score_clip, … — see "
                                                                          "docs/algorithms.md); flags override it."))
    relation: Optional[str] = _option(lambda: typer.Option(None, "--relation", help="Vertical: the neighbouring relation this party "
                                                                        "protects (feature_column or record; default "
                                                                        "feature_column)."))
    accept_premise: Optional[List[str]] = _option(lambda: typer.Option(None, "--accept-premise", metavar="NAME",
                                                           help="Accept a trust premise a protocol's guarantee rests on "
                                                                "(repeatable; vertical-encrypted: honest-label-party, and "
                                                                "honest-peers with three or more parties). Without it a "
                                                                "party with private work refuses such a run."))
    row_clip: Optional[float] = _option(lambda: typer.Option(None, "--row-clip", help="vertical-experts: the norm R at which this "
                                                                          "party clips its rows (a coordinator's other R "
                                                                          "is refused; default: the coordinator's R)."))
    normalize_rows: bool = _option(lambda: typer.Option(False, "--normalize-rows", help="Vertical: this party scales its rows to unit "
                                                                            "norm (its own preparation, whatever the "
                                                                            "coordinator asks; needs --relation record)."))
    min_noise_multiplier: Optional[float] = _option(lambda: typer.Option(None, "--min-noise-multiplier",
                                                             help="Refuse a private run whose σ/sensitivity is below this "
                                                                  "floor (default 0.5)."))
    neighbour: List[str] = _option(lambda: typer.Option([], "--neighbour", help="consensus peer to peer (graph-consensus, "
                                                                    "noisy-gradient-gossip): a graph neighbour "
                                                                    "NAME=HOST:PORT (repeat); this node then exchanges "
                                                                    "broadcasts with these nodes only and refuses others."))
    psi_max_query: Optional[int] = _option(lambda: typer.Option(None, "--psi-max-query", help="PSI: refuse a query of more ids than "
                                                                                  "this (each queried id's membership is "
                                                                                  "what the coordinator learns; default "
                                                                                  "10000)."))
    psi_max_runs: Optional[int] = _option(lambda: typer.Option(None, "--psi-max-runs", help="PSI: refuse more than N PSI runs per "
                                                                                "--psi-period on this data set, by every "
                                                                                "server of the store (default 20)."))
    psi_period: Optional[float] = _option(lambda: typer.Option(None, "--psi-period", help="PSI: the period of --psi-max-runs in "
                                                                              "seconds (default 86400, a day)."))
    bounds: Optional[Path] = _option(lambda: typer.Option(None, "--bounds", help="vertical-experts: this party's column bounds (CSV "
                                                                      "with a lo,hi header, one row per feature column; "
                                                                      "or JSON {\"lo\": [...], \"hi\": [...]})."))


__all__ = ["PartyPolicy", "PartyTLS"]
