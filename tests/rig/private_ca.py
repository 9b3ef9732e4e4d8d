"""A private CA and a server certificate it signed for 127.0.0.1, made with openssl(1): what a site that runs its
LLM servers behind its own CA has, which no default trust store trusts."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path
from typing import NamedTuple


class PrivateCA(NamedTuple):
    ca: Path  # the CA's certificate: what --ca-file / ca_file names
    cert: Path  # the server's, signed by the CA, for IP 127.0.0.1 and localhost
    key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


def make(where: Path) -> PrivateCA:
    where.mkdir(parents=True, exist_ok=True)
    ca, ca_key = where / "ca.pem", where / "ca.key"
    key, csr, cert = where / "server.key", where / "server.csr", where / "server.pem"
    ext = where / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    for argv in (
        ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
         "-subj", "/CN=check_vllm test private CA", "-keyout", ca_key, "-out", ca],
        ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", key, "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
         "-extfile", ext, "-out", cert],
    ):
        subprocess.run(["openssl", *map(str, argv)], check=True, capture_output=True, timeout=60)
    return PrivateCA(ca, cert, key)
