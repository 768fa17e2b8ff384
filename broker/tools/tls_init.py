"""``cormorant tls init``: a development CA, broker and client certificates, and the settings.

Everything is written as PEM into ``--dir``: ``ca.pem`` (the CA certificate every side
trusts), ``ca-key.pem``, ``broker.pem``/``broker-key.pem`` (valid for ``--hosts``),
``client.pem``/``client-key.pem`` (subject ``CN=<--client-name>``, for mutual TLS), the
same keys with their chains in ``broker-bundle.pem``/``client-bundle.pem`` (one-file PEM
keystores, as Java's clients read them), plus
``server-tls.properties`` and ``client-tls.properties`` with Kafka's settings that use them.
The CA key sits unprotected next to the certificates: this is for development and tests,
never for production, and the command says so.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker.tools.common import P

WARNING = "Development certificates: NOT for production (the CA key is stored unprotected)."


def add_parser(sub: argparse._SubParsersAction[P]) -> None:
    tls = sub.add_parser("tls", help="development TLS certificates (not for production)")
    actions = tls.add_subparsers(dest="action", required=True)
    init = actions.add_parser("init", help="a development CA, broker and client certificates, and settings")
    init.add_argument("--dir", required=True, help="directory to write into (created if missing)")
    init.add_argument("--hosts", default="localhost,127.0.0.1",
                      help="comma-separated host names and IP addresses the broker certificate is valid for")
    init.add_argument("--client-name", default="client", help="common name of the client certificate")
    init.add_argument("--days", type=int, default=365, help="validity of the certificates")
    init.add_argument("--force", action="store_true", help="overwrite existing files")
    tls.set_defaults(func=run_tls)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _issue(subject: str, key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, ca_key: ec.EllipticCurvePrivateKey,
           days: int, usage: x509.ObjectIdentifier, hosts: list[str] | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(ca_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def init_tls(directory: Path, hosts: list[str], client_name: str = "client", days: int = 365) -> dict[str, Path]:
    """Writes the development CA, certificates and settings; returns the files by role."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("Cormorant development CA")
    now = datetime.datetime.now(datetime.UTC)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    broker_key, client_key = _key(), _key()
    broker = _issue(hosts[0] if hosts else "localhost", broker_key, ca_name, ca_key, days,
                    ExtendedKeyUsageOID.SERVER_AUTH, hosts)
    client = _issue(client_name, client_key, ca_name, ca_key, days, ExtendedKeyUsageOID.CLIENT_AUTH)
    files = {name: directory / name for name in (
        "ca.pem", "ca-key.pem", "broker.pem", "broker-key.pem", "client.pem", "client-key.pem",
        "broker-bundle.pem", "client-bundle.pem",
        "server-tls.properties", "client-tls.properties")}
    _write(files["ca.pem"], _pem(ca))
    _write(files["ca-key.pem"], _key_pem(ca_key), private=True)
    _write(files["broker.pem"], _pem(broker) + _pem(ca))
    _write(files["broker-key.pem"], _key_pem(broker_key), private=True)
    _write(files["client.pem"], _pem(client) + _pem(ca))
    _write(files["client-key.pem"], _key_pem(client_key), private=True)
    # Java reads a PEM keystore file holding the key and its chain: these bundles.
    _write(files["broker-bundle.pem"], _key_pem(broker_key) + _pem(broker) + _pem(ca), private=True)
    _write(files["client-bundle.pem"], _key_pem(client_key) + _pem(client) + _pem(ca), private=True)
    _write(files["server-tls.properties"], server_properties(directory).encode())
    _write(files["client-tls.properties"], client_properties(directory).encode())
    return files


def server_properties(directory: Path) -> str:
    d = directory.resolve()
    return (f"# {WARNING}\n"
            "listeners=SSL://127.0.0.1:9093\n"
            "ssl.keystore.type=PEM\n"
            f"ssl.keystore.location={d / 'broker-bundle.pem'}\n"
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={d / 'ca.pem'}\n"
            "# mutual TLS: clients must present a certificate signed by ca.pem\n"
            "ssl.client.auth=required\n")


def client_properties(directory: Path) -> str:
    d = directory.resolve()
    return (f"# {WARNING}\n"
            "# Java clients and the cormorant tools (--command-config)\n"
            "security.protocol=SSL\n"
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={d / 'ca.pem'}\n"
            "ssl.keystore.type=PEM\n"
            f"ssl.keystore.location={d / 'client-bundle.pem'}\n"
            "# librdkafka (confluent-kafka, kcat):\n"
            f"#   ssl.ca.location={d / 'ca.pem'}\n"
            f"#   ssl.certificate.location={d / 'client.pem'}\n"
            f"#   ssl.key.location={d / 'client-key.pem'}\n")


def run_tls(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    if not hosts:
        print("cormorant tls init: --hosts names no host", file=sys.stderr)
        return 2
    existing = [p for p in ("ca.pem", "broker.pem", "client.pem") if (directory / p).exists()]
    if existing and not args.force:
        print(f"cormorant tls init: {directory} already holds {', '.join(existing)} (--force overwrites)",
              file=sys.stderr)
        return 1
    files = init_tls(directory, hosts, args.client_name, args.days)
    print(WARNING)
    print(f"Wrote the CA, broker and client certificates to {directory.resolve()}.\n")
    print("Broker (server.properties):")
    print(files["server-tls.properties"].read_text())
    print("Clients:")
    print(files["client-tls.properties"].read_text())
    return 0
