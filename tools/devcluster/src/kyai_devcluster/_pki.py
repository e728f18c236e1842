"""A throw-away certificate authority and serving certificate for the HTTPS listener.

In-cluster configuration (the ``kubernetes`` client, kopf) always speaks HTTPS to
``KUBERNETES_SERVICE_HOST`` and checks the server against the pod's ``ca.crt``, so the
devcluster serves HTTPS too, with a CA made at start by ``openssl`` (EC P-256, one day).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Names and addresses the serving certificate is valid for.
SERVER_NAMES = (
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
    "IP:127.0.0.1",
)


class PkiError(RuntimeError):
    """The certificates could not be made."""


@dataclass(frozen=True)
class Pki:
    """Paths of the CA certificate and the server's certificate and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        """An SSL context serving the certificate."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert, self.server_key)
        return context


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
    )
    if result.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {result.stderr.strip()[-500:]}")


def make_pki(directory: Path, *, extra_names: tuple[str, ...] = ()) -> Pki:
    """Create a CA and a server certificate signed by it in ``directory``."""
    if shutil.which("openssl") is None:
        raise PkiError("openssl is not installed (needed for the HTTPS listener)")
    directory.mkdir(parents=True, exist_ok=True)
    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=kyai-devcluster-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", *key, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kube-apiserver",
        cwd=directory,
    )  # fmt: skip
    names = ",".join((*SERVER_NAMES, *extra_names))
    (directory / "server.ext").write_text(
        f"subjectAltName={names}\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\n"
        "subjectKeyIdentifier=hash\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext",
        cwd=directory,
    )  # fmt: skip
    for private in ("ca.key", "server.key"):
        (directory / private).chmod(0o600)
    (directory / "ca.crt").chmod(0o644)
    return Pki(directory / "ca.crt", directory / "server.crt", directory / "server.key")
