"""Where the gateway listens: the ``--listen`` address, TLS files, and the
daphne endpoint description and URL they make."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path

from kernel import errors
from kernel.config import ServerConfig

log = logging.getLogger(__name__)


# -- the listen address -----------------------------------------------------


@dataclass(frozen=True)
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{bracket(self.host)}:{self.port}"

    @property
    def wildcard(self) -> bool:
        return self.host in ("0.0.0.0", "::", "")

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_listen(value: str) -> ListenAddress:
    """``host:port``, ``[v6]:port``, ``:port`` (loopback) or a bare port."""
    text = (value or "").strip()
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\s]*):(\d+)|(\d+)", text)
    if not match:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"--listen must be host:port (e.g. 127.0.0.1:0 or [::1]:8080), not {value!r}",
        )
    host = match.group(1) or match.group(3) or "127.0.0.1"
    port = int(match.group(2) or match.group(4) or match.group(5))
    if port > 65535:
        raise errors.Dir2mcpError(errors.CONFIG_INVALID, f"port {port} in --listen {value!r} is out of range")
    return ListenAddress(host, port)


def public_address(address: ListenAddress) -> ListenAddress:
    """``--public``: all interfaces instead of loopback; the port is kept."""
    if address.loopback:
        return ListenAddress("::" if ":" in address.host else "0.0.0.0", address.port)
    return address


def serving_address(server: ServerConfig) -> ListenAddress:
    """Where ``server`` (the ``server`` section) binds: ``listen``, on every interface when ``public``."""
    address = parse_listen(server.listen)
    return public_address(address) if server.public else address


def client_host(host: str) -> str:
    """The host a local client connects to (a wildcard bind answers on loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def endpoint_url(host: str, port: int, mcp_path: str, *, tls: bool) -> str:
    scheme = "https" if tls else "http"
    path = mcp_path if mcp_path.startswith("/") else f"/{mcp_path}"
    return f"{scheme}://{bracket(client_host(host))}:{port}{path}"


# -- TLS ----------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    chain: bool = False  # the cert file carries intermediates after the leaf


def check_tls(cert: str | os.PathLike[str] | None, key: str | os.PathLike[str] | None) -> TlsFiles | None:
    """Both files or neither; readable PEM, and the key must match the cert."""
    if not cert and not key:
        return None
    if not cert or not key:
        missing = "--tls-key" if cert else "--tls-cert"
        raise errors.Dir2mcpError(
            errors.TLS_CONFIG_INVALID,
            f"TLS needs both a certificate and a key; {missing} is missing",
            hint="Pass both --tls-cert and --tls-key (PEM files), or neither.",
        )
    cert_path, key_path = Path(cert), Path(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path)
        count = cert_path.read_bytes().count(b"-----BEGIN CERTIFICATE-----")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if isinstance(exc, ssl.SSLError):
            reason = exc.reason or str(exc)
        raise errors.Dir2mcpError(
            errors.TLS_CONFIG_INVALID,
            f"cannot use TLS certificate {cert_path} with key {key_path}: {reason}",
            hint="Both must be readable PEM files, and the key must belong to the certificate.",
        ) from None
    return TlsFiles(cert_path, key_path, chain=count > 1)


def endpoint_description(address: ListenAddress, tls: TlsFiles | None) -> str:
    """A twisted server endpoint string for daphne."""
    from twisted.internet.endpoints import quoteStringArgument

    interface = address.host.strip("[]").replace(":", r"\:")
    if tls is None:
        kind = "tcp6" if ":" in address.host else "tcp"
        return f"{kind}:port={address.port}:interface={interface}"
    text = (
        f"ssl:port={address.port}:interface={interface}"
        f":privateKey={quoteStringArgument(str(tls.key))}:certKey={quoteStringArgument(str(tls.cert))}"
    )
    if tls.chain:
        text += f":extraCertChain={quoteStringArgument(str(tls.cert))}"
    return text
