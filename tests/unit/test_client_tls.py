"""The SDK checks the certificate of a sidecar reached over https, and builds no TLS context for
sidecars on plain HTTP. A small local server stands in for the sidecar (a self-signed
certificate made by the openssl command): what is tested is the client's TLS, not kpd.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from json_stub import JsonHandler, serve

from kpd_client import KpdClient


class _Sidecar(JsonHandler):
    """Answers a group's stats, named after the server: which sidecar answered."""

    def do_GET(self) -> None:
        self.answer(b'{"group": "%s", "topics": {}}' % self.server.label)  # type: ignore[attr-defined]


def _labelled(server: ThreadingHTTPServer, label: bytes) -> Iterator[str]:
    server.label = label  # type: ignore[attr-defined]
    yield from serve(server)


@pytest.fixture
def https_sidecar(tmp_path: Path) -> Iterator[str]:
    """host:port of a sidecar answering over https with a certificate nobody signed."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sidecar)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    yield from _labelled(server, b"tls")


@pytest.fixture
def http_sidecar() -> Iterator[str]:
    yield from _labelled(ThreadingHTTPServer(("127.0.0.1", 0), _Sidecar), b"plain")


def test_an_https_sidecar_with_an_unsigned_certificate_is_refused(https_sidecar: str) -> None:
    kpd = KpdClient(f"https://{https_sidecar}", retry_deadline_s=0)
    with kpd, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        kpd.group("g")


def test_an_https_sidecar_among_plain_ones_is_checked(https_sidecar: str, http_sidecar: str):
    """The https one, asked first, is refused; the call goes on to the plain one."""
    with KpdClient([f"https://{https_sidecar}", f"http://{http_sidecar}"]) as kpd:
        assert kpd.group("g")["group"] == "plain"


def test_plain_http_sidecars_get_no_tls_context(http_sidecar: str) -> None:
    with KpdClient(f"http://{http_sidecar}") as kpd:
        assert kpd.group("g")["group"] == "plain"
        assert kpd._http._transport._pool._ssl_context.verify_mode == ssl.CERT_NONE
