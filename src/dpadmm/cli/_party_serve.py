"""The work of ``dpadmm party serve`` (:mod:`dpadmm.cli.party`), one concern each: the party's policy from its
options, its identity, its service (a peer-to-peer node with ``--neighbour``) and the lines it prints when ready."""

from __future__ import annotations

import sys
from pathlib import Path

from ..exceptions import InvalidParameterError


def _declared_bounds(path: Path) -> tuple:
    """``party serve --bounds FILE``: the operator's column bounds, or one line naming the problem (exit code 2)."""
    from ..privacy.ranges import read_bounds

    try:
        lo, hi = read_bounds(path)
    except OSError:
        raise InvalidParameterError(f"--bounds {path}: file not found or unreadable; give a CSV with a 'lo,hi' header "
                                    "and one row per feature column.") from None
    except ValueError as e:
        raise InvalidParameterError(f"--bounds {path}: {e}.") from None
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)


def policy_of(name: str, p):
    """The party's :class:`~dpadmm.privacy.policy.PartyPolicy` from its ``--policy`` file and flags (``p``: a
    :class:`~dpadmm.cli._party_serve_options.PartyPolicy` group), after the name and budget checks."""
    from ..backends.grpc_tls import check_party_name
    from ..privacy.policy import load_policy

    check_party_name(name)
    if (p.max_epsilon is None) != (p.delta is None):
        raise InvalidParameterError("a party's own budget needs both --max-epsilon E and --delta D.")
    if p.ledger_dir is not None:
        raise InvalidParameterError("--ledger-dir is gone: a budget is kept in the organisation's ledger store; give "
                                    "--ledger sqlite:///PATH (or postgresql://…) and --ledger-key FILE "
                                    "(docs/howto/budgets.md).")
    return load_policy(p.policy_file, max_epsilon=p.max_epsilon, delta=p.delta, no_budget=p.no_budget or None,
                       private_only=p.private_only or None, max_rounds=p.max_rounds, relation=p.relation,
                       min_noise_multiplier=p.min_noise_multiplier, row_clip=p.row_clip,
                       normalize_vertical_rows=p.normalize_rows or None, ledger=p.ledger,
                       ledger_key=None if p.ledger_key is None else str(p.ledger_key), data_set=p.data_set,
                       psi_max_query=p.psi_max_query, psi_max_runs=p.psi_max_runs, psi_period=p.psi_period,
                       column_bounds=None if p.bounds is None else _declared_bounds(p.bounds),
                       accept_premises=tuple(p.accept_premise) if p.accept_premise else None)


def limit_threads(threads: int) -> None:
    """``--threads``: this party's BLAS threads."""
    if threads < 1:
        raise InvalidParameterError(f"--threads must be a positive integer, got {threads}.")
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=int(threads))


def protocols(names):
    """The declared protocols this party serves (one clear error for an unknown name)."""
    from ..protocol import find_protocol

    return [find_protocol(p) for p in names]


def credentials(name: str, ident, insecure: bool):
    """The party's TLS files (None with ``--insecure``); its certificate must be issued for ``--name``."""
    from ..backends.grpc_tls import TLSFiles

    if insecure and (ident.tls or ident.cert or ident.key or ident.ca):
        raise InvalidParameterError("give either --insecure or TLS files (--tls / --cert --key --ca), not both.")
    if insecure:
        return None
    creds = TLSFiles.load(tls_dir=ident.tls, cert=ident.cert, key=ident.key, ca=ident.ca)
    if creds.name != name:
        raise InvalidParameterError(f"the certificate is issued for {creds.name!r}, not --name {name!r}; a party's "
                                    "identity is its certificate.")
    return creds


def make_service(neighbour, creds, **kw):
    """The party's service: a peer-to-peer consensus node with ``--neighbour`` (backends/grpc_p2p.py), else the
    ordinary party."""
    from ..backends.grpc_party import PartyService

    if neighbour:
        from ..backends.grpc_backend import parse_peers
        from ..backends.grpc_p2p import NodeService

        return NodeService(neighbours=parse_peers(neighbour), tls=creds, **kw)
    return PartyService(**kw)


def announce(service, name: str, protos, listen: str, port, insecure: bool, round_where) -> None:
    """The lines a party prints once it listens: where, how, its round channel and its budget."""
    host = listen.rsplit(":", 1)[0]
    how = "INSECURE plaintext" if insecure else "mutual TLS"
    print(f"party {name} serving {'+'.join(p.name for p in protos)} on {host}:{port} ({how}); "
          f"audit log {service.audit_path}", flush=True)
    if getattr(service, "round_port", None):
        print(f"party {name} round channel (Step frames, {how}) at {round_where[0]}:{service.round_port}", flush=True)
    if service.budget is None:
        print(f"party {name} WARNING: no privacy budget (--no-budget): it keeps no ledger and the coordinator's "
              "report is the only account of what it releases", file=sys.stderr, flush=True)
        return
    b = service.budget.status()
    spent = b["epsilon_spent"] if isinstance(b["epsilon_spent"], str) else format(b["epsilon_spent"], ".4g")
    print(f"party {name} privacy budget: ε ≤ {b['max_epsilon']:g} at δ = {b['delta']:g}; spent so far ε = {spent} over "
          f"{b['releases']} releases on {service.budget.where} (store {service.store.where}, verified; shared by "
          "every server of the organisation that serves these rows)", flush=True)
