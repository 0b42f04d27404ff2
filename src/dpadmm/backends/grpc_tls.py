"""Certificates for a cross-organisation deployment: one CA, one certificate + key per party.

:func:`provision` (``dpadmm provision --parties coordinator,party1,party2 --out DIR``; one name at a
time adds a party to the CA already in DIR) writes::

    DIR/ca.pem                 the CA certificate (public: every party gets a copy)
    DIR/ca.key                 the CA's private key (keep it offline; it is never needed at run time)
    DIR/NAME/ca.pem            a copy of the CA certificate
    DIR/NAME/cert.pem          NAME's certificate: CN = NAME, SAN = DNS:NAME, client + server auth
    DIR/NAME/key.pem           NAME's private key (file mode 0600; hand DIR/NAME/ to that organisation only)
    DIR/deployment.json        the party names, fingerprints and validity

A party's identity *is* its certificate: the coordinator connects to a party under the name it
expects (TLS verifies the party's certificate was issued for that name by the CA), and the party
accepts a call only from a client certificate issued by the same CA whose common name is on its
allow list. An organisation that keeps its key to itself uses the CSR flow: ``dpadmm party request
--name NAME --out DIR`` makes its key and a request (:func:`make_request`); the CA's operator runs
``dpadmm provision --csr NAME.csr --out CADIR`` (:func:`sign_request`) and returns ``cert.pem`` and
``ca.pem``. An organisation that prefers its own PKI can give any certificate with the right CN/SAN.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..exceptions import DataFileError, InvalidParameterError

_NAME_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.")


def check_party_name(name: str) -> str:
    """Party names become certificate names (DNS labels): letters, digits, '-' and '.'."""
    if not name or not set(name) <= _NAME_OK or name[0] in "-." or len(name) > 63:
        raise InvalidParameterError(f"party name {name!r} must be 1-63 letters, digits, '-' or '.' (it becomes the "
                                    "certificate's name), e.g. party1.")
    return name


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _ca(out: Path, days: int, ca_name: str, create: bool):
    """The deployment CA under ``out``: loaded (``ca.pem`` + ``ca.key``) or, with ``create``, made."""
    if (out / "ca.key").is_file():
        try:
            cert = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
            key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise DataFileError(f"{out} holds an unreadable CA (ca.pem / ca.key: {exc}); restore it or choose a new "
                                "--out.") from None
        return cert, key, False
    if not create:
        raise DataFileError(f"no CA in {out} (ca.pem and ca.key); make one with `dpadmm provision --parties NAMES "
                            f"--out {out}`.")

    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=int(days)))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    _write(out / "ca.key", key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
           True)
    _write(out / "ca.pem", cert.public_bytes(pem))
    return cert, key, True


def _issue(ca_cert, ca_key, public_key, name: str, days: int):
    """A certificate for ``name`` (CN = NAME, SAN = DNS:NAME, client + server auth) signed by the CA."""
    now = datetime.datetime.now(datetime.timezone.utc)
    end = min(now + datetime.timedelta(days=int(days)), ca_cert.not_valid_after_utc)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject).public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))


def _record(out: Path, ca_cert, name: str, cert, how: str) -> dict:

    path = out / "deployment.json"
    summary = json.loads(path.read_text()) if path.is_file() else {}
    summary.setdefault("ca", {"subject": ca_cert.subject.rfc4514_string(),
                              "sha256": ca_cert.fingerprint(hashes.SHA256()).hex()})
    summary["not_after"] = ca_cert.not_valid_after_utc.isoformat()
    info = {"dir": str(out / name), "sha256": cert.fingerprint(hashes.SHA256()).hex(), "issued": how,
            "not_after": cert.not_valid_after_utc.isoformat()}
    summary.setdefault("parties", {})[name] = info
    _write(path, (json.dumps(summary, indent=2) + "\n").encode())
    return info


def provision(names: Sequence[str], out, *, days: int = 365, ca_name: str = "dpadmm deployment CA") -> dict:
    """Certificates + keys for the named parties under ``out``, signed by the CA there (made if absent).

    One party at a time is fine (``--parties party3`` adds party3 to an existing deployment); a name
    that already has a certificate there is refused (revoke by hand, or choose another name).
    """
    names = [check_party_name(n.strip()) for n in names]
    if not names:
        raise InvalidParameterError("give at least one party name, e.g. --parties coordinator,party1,party2.")
    if len(set(names)) != len(names):
        raise InvalidParameterError(f"party names must be distinct, got {names}.")
    out = Path(out)
    taken = [n for n in names if (out / n / "cert.pem").exists()]
    if taken:
        raise InvalidParameterError(f"{out} already holds a certificate for {taken[0]!r}; choose another name (a "
                                    "party's name is its identity).")
    ca_cert, ca_key, _ = _ca(out, days, ca_name, create=True)
    pem = serialization.Encoding.PEM
    ca_pem = ca_cert.public_bytes(pem)
    parties = {}
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(ca_cert, ca_key, key.public_key(), name, days)
        _write(out / name / "ca.pem", ca_pem)
        _write(out / name / "key.pem", key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()), True)
        _write(out / name / "cert.pem", cert.public_bytes(pem))
        parties[name] = _record(out, ca_cert, name, cert, "key made by the CA")
    return {"ca": str(out / "ca.pem"), "parties": parties}


def make_request(name: str, out) -> Path:
    """The organisation's side of the CSR flow: a private key that never leaves ``out`` and a certificate
    signing request for ``name`` (``out/key.pem``, ``out/NAME.csr``); the CA signs the request."""
    name = check_party_name(name)
    out = Path(out)
    if (out / "key.pem").exists():
        raise InvalidParameterError(f"{out} already holds a key (key.pem); choose a new --out directory.")
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
           .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
           .sign(key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    _write(out / "key.pem", key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
           True)
    _write(out / f"{name}.csr", csr.public_bytes(pem))
    return out / f"{name}.csr"


def sign_request(csr_path, out, *, days: int = 365) -> dict:
    """The CA's side: check the request's signature and name, issue ``out/NAME/cert.pem`` (+ ``ca.pem``)
    for the requester's own public key. The certificate's names are the CA's choice (CN = SAN = the
    requested CN); other requested extensions are ignored."""
    out = Path(out)
    try:
        csr = x509.load_pem_x509_csr(Path(csr_path).read_bytes())
    except OSError:
        raise DataFileError(f"certificate signing request {csr_path} not found; check the path.") from None
    except ValueError:
        raise DataFileError(f"{csr_path} is not a PEM certificate signing request (make one with `dpadmm party "
                            "request`).") from None
    if not csr.is_signature_valid:
        raise InvalidParameterError(f"{csr_path}: its signature does not match its key (a tampered request); ask the "
                                    "organisation for a new one.")
    cns = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(cns) != 1:
        raise InvalidParameterError(f"{csr_path} must name exactly one party (one common name).")
    name = check_party_name(str(cns[0].value))
    if (out / name / "cert.pem").exists():
        raise InvalidParameterError(f"{out} already holds a certificate for {name!r}; choose another name.")
    ca_cert, ca_key, _ = _ca(out, days, "", create=False)
    cert = _issue(ca_cert, ca_key, csr.public_key(), name, days)
    pem = serialization.Encoding.PEM
    _write(out / name / "ca.pem", ca_cert.public_bytes(pem))
    _write(out / name / "cert.pem", cert.public_bytes(pem))
    return {"name": name, **_record(out, ca_cert, name, cert, "signed request (the key stays with its organisation)")}


@dataclass(frozen=True)
class TLSFiles:
    """One party's credentials: its certificate chain, private key and the CA it trusts (PEM bytes)."""
    cert: bytes
    key: bytes
    ca: bytes
    name: str = ""

    @classmethod
    def load(cls, *, tls_dir=None, cert=None, key=None, ca=None) -> "TLSFiles":
        """From ``tls_dir`` (``cert.pem``, ``key.pem``, ``ca.pem`` as :func:`provision` writes them) and/or
        explicit paths (which win)."""
        paths = {}
        if tls_dir is not None:
            d = Path(tls_dir)
            if not d.is_dir():
                raise DataFileError(f"TLS directory {d} not found; run `dpadmm provision` or pass --cert/--key/--ca.")
            paths = {"cert": d / "cert.pem", "key": d / "key.pem", "ca": d / "ca.pem"}
        for k, v in (("cert", cert), ("key", key), ("ca", ca)):
            if v is not None:
                paths[k] = Path(v)
        missing = [k for k in ("cert", "key", "ca") if k not in paths]
        if missing:
            raise InvalidParameterError(f"mutual TLS needs a certificate, key and CA; missing --{missing[0]} "
                                        "(or give --tls DIR from `dpadmm provision`, or --insecure for a local test).")
        data = {}
        for k, p in paths.items():
            if not p.is_file():
                raise DataFileError(f"{k} file {p} not found; check the path (dpadmm provision writes cert.pem, "
                                    "key.pem and ca.pem per party).")
            data[k] = p.read_bytes()
        return cls(data["cert"], data["key"], data["ca"], common_name(data["cert"]))


def common_name(cert_pem: bytes) -> str:
    """The CN of a PEM certificate ('' if it has none or cannot be parsed)."""
    try:
        attrs = x509.load_pem_x509_certificate(cert_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(attrs[0].value) if attrs else ""
    except Exception:
        return ""
