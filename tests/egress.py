"""What egress's tests share: real upstream servers on a loopback address other than the proxy's
(127.0.0.2), over plain HTTP and over TLS with a certificate authority the test makes, and a client that
goes through a proxy the way urllib does for a run."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import http.client
import http.server
import ipaddress
import os
import ssl
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.hostile_egress import UPSTREAM_HOST  # the one address of the hosts tests reach

BIG = 3 * 1024 * 1024  # GET /big's bytes


@dataclass(frozen=True)
class Authority:
    """A test CA (its certificate in `ca_file`) and one server certificate it signed for 127.0.0.2."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def make_authority(directory: Path) -> Authority:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "python-runner-mcp test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, UPSTREAM_HOST)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(UPSTREAM_HOST)), x509.DNSName("upstream.test")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    authority = Authority(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    authority.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    authority.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    authority.key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return authority


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    files: dict[str, tuple[str, bytes]] = {}  # noqa: RUF012  (a subclass per server sets its own)
    seen: list[str] = []  # noqa: RUF012  (likewise: the paths asked for, in order)

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if self.path in self.files:
            kind, body = self.files[self.path]
            self._reply(body, kind)
        elif self.path == "/big":
            self._reply(b"x" * BIG)
        else:
            self._reply(f"hello from {self.path} via {self.headers.get('Host')}".encode())

    def do_POST(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().strip() or b"0", 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._reply(b"echo " + body)

    def _reply(self, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@contextlib.contextmanager
def upstream(
    authority: Authority | None = None,
    host: str = UPSTREAM_HOST,
    files: dict[str, tuple[str, bytes]] | None = None,
    seen: list[str] | None = None,
) -> Iterator[int]:
    """A real HTTP (or, given `authority`, HTTPS) server on `host`, in a thread: its port. It answers
    `files` (path: content type and body) as given, and anything else with a line or a size; the paths
    of GET requests go to `seen`."""
    handler = type("Handler", (_Handler,), {"files": dict(files or {}), "seen": seen if seen is not None else []})
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    if authority is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(authority.cert_file, authority.key_file)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def fetch(proxy: str, url: str, ca_file: Path | None = None, data: bytes | None = None) -> tuple[int, bytes]:
    """`url` through `proxy` with urllib, as a run's code would with HTTP(S)_PROXY set: status and body
    (an error status's too)."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({"http": proxy, "https": proxy})]
    if ca_file is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(ca_file))))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(urllib.request.Request(url, data=data), timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError as error:  # a refused CONNECT: http.client says "Tunnel connection failed: 403 ..."
        return 0, str(error).encode()
    except http.client.IncompleteRead as error:  # the connection closed mid-body
        return -1, error.partial


def tiny_wheel(name: str = "tinypkg", version: str = "1.0") -> tuple[str, bytes]:
    """A real, minimal wheel (a module, METADATA, WHEEL and RECORD): its file name and bytes."""
    import base64
    import hashlib
    import io
    import zipfile

    info = f"{name}-{version}.dist-info"
    members = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    lines = []
    for path, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
    members[f"{info}/RECORD"] = ("\n".join([*lines, f"{info}/RECORD,,"]) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for path, data in members.items():
            wheel.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buffer.getvalue()


def simple_index(name: str, wheel: str, data: bytes) -> dict[str, tuple[str, bytes]]:
    """A PEP 503 simple index of one project with one wheel, its hash in the link, as `upstream` serves."""
    import hashlib

    link = f'<a href="/files/{wheel}#sha256={hashlib.sha256(data).hexdigest()}">{wheel}</a>'
    page = f"<!DOCTYPE html><html><body>{link}</body></html>".encode()
    return {f"/simple/{name}/": ("text/html", page), f"/files/{wheel}": ("application/octet-stream", data)}


@functools.cache
def egress_problem(sandbox: str) -> str:
    """Why a server in `sandbox` could not serve egress here ("" if it can): no such sandbox, or no memory
    cgroup to bound a run's TCP buffers (a server as root makes them; .ci/run runs as root)."""
    from runner.config import Config
    from runner.errors import Unavailable
    from runner.processes.isolation import plan_isolation

    python = os.path.realpath(sys.executable)
    config = dataclasses.replace(Config(), python=python, sandbox=sandbox, egress_allow=("pypi.org",))
    try:
        plan_isolation(config)
    except Unavailable as exc:
        return str(exc)
    return ""
