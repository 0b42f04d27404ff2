"""``dpadmm party serve`` (one organisation's party process) and ``dpadmm provision`` (certificates)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import click
import typer
from typer.core import TyperCommand

from . import _options as opt
from . import _party_serve as ps
from . import _party_serve_options as so
from ._app import app
from ._party_limits import MAX_MESSAGE_OPTION, handshake_refusals, max_message_bytes
from ..exceptions import InvalidParameterError
from ..protocol import protocol_names

party_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Run a party in its own organisation (gRPC over mutual TLS).")
app.add_typer(party_app, name="party")


def _parse_data(items: List[str], required: bool = True) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            key, path = "train", item
        else:
            key, path = (s.strip() for s in item.split("=", 1))
        if not key or not path:
            raise InvalidParameterError(f"--data must look like KEY=FILE (e.g. train=party2.csv), got {item!r}.")
        if key in out:
            raise InvalidParameterError(f"--data {key}=… is given twice.")
        out[key] = path
    if not out and required:
        raise InvalidParameterError("give the party's training file: --data train=FILE (and e.g. --data test=FILE).")
    return out


#: the --protocol help before the registry's names are filled in (at help time, by _ServeCommand)
_PROTOCOL_HELP = "The protocol this party serves (repeat for several)."


class _ServeCommand(TyperCommand):
    """``party serve``: its --protocol help lists every protocol the registry declares, read when help is shown.

    Reading the registry imports every algorithm (scikit-learn, pandas, …), which the CLI's start-up must not pay
    for, so the list is filled in here rather than when the module is imported.
    """

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = ", ".join(protocol_names())
        for param in self.params:
            if param.name == "protocol":
                param.help = f"{_PROTOCOL_HELP} One of: {names}."
        super().format_help(ctx, formatter)



@party_app.command("serve", cls=_ServeCommand)
@opt.grouped
def serve(
    protocol: List[str] = typer.Option(..., "--protocol", help=_PROTOCOL_HELP),
    name: str = typer.Option(..., "--name", help="The party name this process is willing to be (its certificate's name)."),
    data: List[str] = typer.Option([], "--data", help="KEY=FILE of this party's own data (repeat): train=…, test=…"),
    listen: str = typer.Option("127.0.0.1:7001", "--listen", help="HOST:PORT to listen on (the coordinator dials it)."),
    rounds_listen: str = typer.Option("auto", "--rounds-listen",
                                      help="Where the rounds' own mutual-TLS channel listens (Step frames only; same "
                                           "certificates and allow list): auto (the --listen host, a port the OS "
                                           "picks, announced to the coordinator in Hello), HOST:PORT (a fixed port to "
                                           "open in a firewall beside --listen), or off (rounds on gRPC)."),
    ident: so.PartyTLS = None,  # --tls/--cert/--key/--ca, spelled out for typer by @opt.grouped
    allow: List[str] = typer.Option(["coordinator"], "--allow", help="Certificate names allowed to call (repeat)."),
    allow_monitoring: bool = typer.Option(False, "--allow-monitoring",
                                          help="Answer monitoring requests in a private run (un-noised values)."),
    out: Path = typer.Option(..., "--out", help="This party's own directory: audit.jsonl, checkpoint/, model.npz."),
    id_column: str = typer.Option("id", help="Id column of the party's CSV files."),
    label_column: str = typer.Option("y", help="Label column (vertical: only in the label party's file)."),
    insecure: bool = typer.Option(False, "--insecure", help="Plaintext, no identities: local tests only."),
    accept_coordinator_data: bool = typer.Option(False, "--accept-coordinator-data",
                                                 help="Accept this party's data from the coordinator in the setup "
                                                      "message (a simulation of a deployment; default: refuse)."),
    once: bool = typer.Option(False, "--once", help="Exit after one run has finished."),
    allow_seeded_noise: bool = typer.Option(False, "--allow-seeded-noise",
                                            help="Accept a coordinator-chosen noise seed (a reproducible simulation: "
                                                 "whoever knows the seed can remove the noise)."),
    requests: Optional[str] = typer.Option(None, "--requests", help="Declared requests this party answers, e.g. "
                                                                    "score,rank,refit (default: all declared but refit; "
                                                                    "refit only at the label party)."),
    policy: so.PartyPolicy = None,  # the party's own policy, budget and ledger
    max_message_mb: Optional[float] = MAX_MESSAGE_OPTION,
    threads: int = typer.Option(1, "--threads", help="BLAS threads of this party (the per-round work is vector "
                                                     "algebra; more threads mostly add contention)."),
):
    """Serve one declared protocol to the coordinator; refuse everything else; keep an audit log."""
    from ..backends.grpc_ops import capture_handshake_refusals
    from ..backends.grpc_party import serve as run_server
    from ..backends.tls_rounds import parse_listen

    holder: list = []  # the service, once made: TLS handshake refusals go to its audit log and to this log
    tls_refused = handshake_refusals(holder)
    party_policy = ps.policy_of(name, policy)
    max_message = max_message_bytes(max_message_mb)  # one clear line before anything starts
    ps.limit_threads(threads)
    protos = ps.protocols(protocol)
    files = _parse_data(data, required=any(p.load is not None for p in protos) and not accept_coordinator_data)
    round_where = parse_listen(rounds_listen, listen)  # a malformed value: one clear error before anything starts
    creds = ps.credentials(name, ident, insecure)
    if not party_policy.budgeted and not party_policy.no_budget:  # safe by default: no silent party without a ledger
        raise InvalidParameterError("give this party a privacy budget: --max-epsilon E --delta D (or max_epsilon and "
                                    "delta in its --policy FILE); to serve without one, opt out with --no-budget.")
    service = ps.make_service(policy.neighbour, creds, name=name, protocol=protos, data=files, out=out,
                              allow=tuple(allow), allow_monitoring=allow_monitoring, secure=not insecure,
                              describe_options={"id_column": id_column, "label_column": label_column},
                              accept_coordinator_data=accept_coordinator_data, allow_seeded_noise=allow_seeded_noise,
                              requests=None if requests is None else [r.strip() for r in requests.split(",")
                                                                     if r.strip()],
                              policy=party_policy,
                              echo=lambda line: print(f"party {name}: {line}", file=sys.stderr, flush=True))
    service.max_message = max_message
    holder.append(service)
    restore = capture_handshake_refusals(tls_refused) if not insecure else (lambda: None)
    try:
        run_server(service, listen, creds, once=once, rounds=rounds_listen,
                   ready=lambda port: ps.announce(service, name, protos, listen, port, insecure, round_where))
    finally:
        restore()


@party_app.command("ledger")
def ledger_list(
    ledger: Optional[str] = typer.Option(None, "--ledger", envvar="DPADMM_LEDGER",
                                         help="The organisation's ledger store (as given to party serve)."),
    ledger_key: Optional[Path] = typer.Option(None, "--ledger-key", envvar="DPADMM_LEDGER_KEY",
                                              help="The store's key file (as given to party serve)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Only the budget of this data file (its rows' digest)."),
    data_set: Optional[str] = typer.Option(None, "--data-set", help="Only the budget of this declared data set."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document instead of the table."),
    import_dir: Optional[Path] = typer.Option(None, "--import-dir", help="Import the ledger the former files layout "
                                                                       "kept for --data FILE (its --ledger-dir, or a "
                                                                       "party's --out) into the store, once."),
):
    """What was spent on each data set, and by which runs (every row of the store verified with its key)."""
    # dpadmm.privacy loads dp-accounting: not in the CLI's start-up path
    from ..privacy.ledger_listing import list_ledgers, render_ledger
    from ..privacy.ledger_store import configured

    if data is not None and not data.is_file():
        raise InvalidParameterError(f"--data {data} is not a file; give the data file whose ledger to list.")
    url, key = configured(ledger, None if ledger_key is None else str(ledger_key))
    if import_dir is not None:
        from ..privacy.ledger_listing import import_files_ledger

        if data is None:
            raise InvalidParameterError("--import-dir needs --data FILE: the data file whose former ledger to import.")
        led = import_files_ledger(url, key, data, import_dir, data_set=data_set)
        print(f"imported: {render_ledger(led)}")
        return
    found = list_ledgers(url, key, data=data, data_set=data_set)
    if as_json:
        print(json.dumps(found, indent=1))
        return
    if not found:
        print("no budget in the store" + (f" for {data.name}" if data is not None else ""))
    for led in found:
        print(render_ledger(led))


@app.command()
def provision(
    parties: Optional[str] = typer.Option(None, "--parties", help="Comma-separated names, e.g. coordinator,party1,"
                                                                  "party2 (one name adds a party to DIR's CA)."),
    csr: Optional[Path] = typer.Option(None, "--csr", help="Sign an organisation's certificate signing request "
                                                           "(from `dpadmm party request`) with DIR's CA instead."),
    out: Path = typer.Option(..., "--out", help="Directory for ca.pem, ca.key and one folder per party."),
    days: int = typer.Option(365, "--days", help="Validity of the certificates in days."),
):
    """Make (or reuse) the deployment CA in DIR and a certificate + key per party, or sign a request."""
    from ..backends.grpc_tls import provision as make, sign_request

    if days < 1:
        raise InvalidParameterError(f"--days must be a positive integer, got {days}.")
    if (parties is None) == (csr is None):
        raise InvalidParameterError("give --parties NAMES (the CA makes their keys) or --csr FILE (an organisation's "
                                    "own key), not both or neither.")
    if csr is not None:
        info = sign_request(csr, out, days=days)
        print(f"{info['name']}: {info['dir']}/ (cert.pem, ca.pem; the key stays with its organisation)  sha256 "
              f"{info['sha256'][:16]}…")
        return
    summary = make([p for p in parties.split(",") if p.strip()], out, days=days)
    for name, info in summary["parties"].items():
        print(f"{name}: {info['dir']}/ (cert.pem, key.pem, ca.pem)  sha256 {info['sha256'][:16]}…")
    print(f"CA: {out}/ca.pem (public), {out}/ca.key (keep offline); summary in {out}/deployment.json")


@party_app.command("request")
def request(
    name: str = typer.Option(..., "--name", help="The party name this organisation will be (its certificate's name)."),
    out: Path = typer.Option(..., "--out", help="This organisation's TLS directory: key.pem (never leaves it) and "
                                                "NAME.csr (send it to the CA)."),
):
    """Make this organisation's private key and a certificate signing request for the deployment's CA."""
    from ..backends.grpc_tls import make_request

    path = make_request(name, out)
    print(f"wrote {out}/key.pem (keep it here) and {path}: send the request to the CA's operator "
          f"(`dpadmm provision --csr {path.name} --out CADIR`) and put the cert.pem and ca.pem you get back in {out}/")


def vertical_remote_data(backend, party_files, test_party_files, *, id_column: str = "id", label_column: str = "y",
                         normalize: bool = False, other=(None, None), psi: bool = False, private: bool = False,
                         classes=None):
    """The coordinator's side of a cross-organisation vertical run (``--backend grpc``).

    The coordinator is the label party's organisation: it reads only the id and label columns of
    its own ``--party`` file (and ``--test-party`` file); every party, the label party's feature
    block included, is a ``dpadmm party serve`` process that reads its own file. The parties must be
    named ``party1`` (the label party's features), ``party2``, … and report their column counts.

    With ``psi`` the rows are aligned by private set intersection (:mod:`dpadmm.algorithms.psi`, every
    party also serving ``--protocol psi-align``): no id list is sent; each party reads the rows of
    the intersection in its canonical order, and this side keeps the labels of those rows.
    """
    from ._common import party_data_refs
    from ..data.remote import party_sources
    from ..data.vertical import VerticalData, encode_labels

    if any(v is not None for v in other):
        raise InvalidParameterError("with --backend grpc give the label party's --party FILE (ids and labels); "
                                    "--train/--data do not apply (the features stay at the parties).")
    if len(party_files) != 1 or len(test_party_files) > 1:
        raise InvalidParameterError("with --backend grpc give one --party FILE (the label party's ids and labels) and "
                                    "at most one --test-party FILE; every party reads its own features.")
    names = list(backend.peers)
    expected = [f"party{m}" for m in range(1, len(names) + 1)]
    if sorted(names) != sorted(expected):
        raise InvalidParameterError(f"vertical parties must be named party1 (the label party), party2, …; got --peer "
                                    f"{', '.join(names)}.")
    info = backend.hello(expected)

    def refs(key, ids):
        return party_data_refs(info, expected, key, ids, psi=psi, first_index=1, normalize=bool(normalize))

    def sources(key, path):
        _, lab, ids = party_sources([path], id_column=id_column, label_column=label_column)
        if psi:  # the intersection with every party, in its canonical order; the parties keep their alignment
            from ..fit.psi import align_parties

            aligned = align_parties(backend, expected, key, ids, id_column=id_column)
            psi_info[key] = {"rows": int(len(aligned.ids)), "own_rows": int(len(ids)), "parties": aligned.parties,
                             "sha256": aligned.digest}
            _, lab, ids = party_sources([path], id_column=id_column, label_column=label_column, ids=aligned.ids)
        return lab, ids

    psi_info: dict = {}
    labels, ids = sources("train", party_files[0])
    test = test_labels = None
    if test_party_files:
        test_labels, test_ids = sources("test", test_party_files[0])
        test = refs("test", test_ids)
    labels, test_labels = encode_labels(labels, test_labels, "the label party's file", private=private, classes=classes)
    return VerticalData(refs("train", ids), labels, test, test_labels,
                        {"party_files": [str(p) for p in party_files], "peers": dict(backend.peers),
                         "data_locality": "every party is a separate organisation reading its own file (grpc)",
                         "normalized_rows": normalize, **({"psi": psi_info} if psi else {})})
