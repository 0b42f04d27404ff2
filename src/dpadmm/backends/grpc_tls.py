"""Certificates for a cross-organisation deployment: one CA, one certificate + key per party.

:func:`provision` (``dpadmm provision --parties coordinator,party1,party2 --out DIR``) writes::

    DIR/ca.pem                 the CA certificate (public: every party gets a copy)
    DIR/ca.key                 the CA's private key (keep it offline; it is never needed at run time)
    DIR/NAME/ca.pem            a copy of the CA certificate
    DIR/NAME/cert.pem          NAME's certificate: CN = NAME, SAN = DNS:NAME, client + server auth
    DIR/NAME/key.pem           NAME's private key (file mode 0600; hand DIR/NAME/ to that organisation only)
    DIR/deployment.json        the party names, fingerprints and validity

A party's identity *is* its certificate: the coordinator connects to a party under the name it
expects (TLS verifies the party's certificate was issued for that name by the CA), and the party
accepts a call only from a client certificate issued by the same CA whose common name is on its
allow list. An organisation that prefers its own PKI can give any certificate with the right
CN/SAN instead.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

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


def provision(names: Sequence[str], out, *, days: int = 365, ca_name: str = "dpadmm deployment CA") -> dict:
    """Make a CA and a certificate + key per party under ``out``; return the deployment summary."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names = [check_party_name(n.strip()) for n in names]
    if len(names) < 2:
        raise InvalidParameterError("give at least two party names, e.g. --parties coordinator,party1,party2.")
    if len(set(names)) != len(names):
        raise InvalidParameterError(f"party names must be distinct, got {names}.")
    out = Path(out)
    if (out / "ca.key").exists():
        raise InvalidParameterError(f"{out} already holds a CA (ca.key); choose a new --out directory.")
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=int(days))
    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_subject).issuer_name(ca_subject)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False),
                              critical=True)
               .sign(ca_key, hashes.SHA256()))
    ca_pem = ca_cert.public_bytes(pem)
    summary = {"ca": {"subject": ca_name, "sha256": ca_cert.fingerprint(hashes.SHA256()).hex()},
               "not_after": end.isoformat(), "parties": {}}
    files = {out / "ca.pem": (ca_pem, False),
             out / "ca.key": (ca_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()), True)}
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                .issuer_name(ca_subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        files[out / name / "ca.pem"] = (ca_pem, False)
        files[out / name / "cert.pem"] = (cert.public_bytes(pem), False)
        files[out / name / "key.pem"] = (key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()), True)
        summary["parties"][name] = {"dir": str(out / name), "sha256": cert.fingerprint(hashes.SHA256()).hex()}
    for path, (data, private) in files.items():
        _write(path, data, private)
    _write(out / "deployment.json", (json.dumps(summary, indent=2) + "\n").encode())
    return summary


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
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        attrs = x509.load_pem_x509_certificate(cert_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(attrs[0].value) if attrs else ""
    except Exception:
        return ""
