"""A fake x402 facilitator on 127.0.0.1 (reference/wire-formats.md §3.5).

It answers ``GET /supported``, ``POST /verify`` and ``POST /settle`` with the
documented bodies, and really checks what a facilitator checks for the
exact EVM scheme (EIP-3009): x402 version, scheme, network, recipient,
amount, validity window, the EIP-712 signature (recovered with the x402
package's own helpers) and nonce reuse. An invalid payment is HTTP 200 with
``isValid: false`` and the spec's reason, as real facilitators answer.

It can be scripted: ``fail_next(500)`` (or ``fail_next(500, path="/settle")``),
``settle_failure("insufficient_funds")``, ``lose_next_answer("/settle")``
(the request is carried out, then its answer is lost: a 502 instead, as from a
proxy that gave up after the facilitator settled), and ``stop()`` takes it
down. Every request is recorded in :attr:`calls`, and every settlement that
went through (one per nonce, ever) in :attr:`settlements`.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from payments.evm import (
    ExactEIP3009Authorization,
    get_evm_chain_id,
    hash_eip3009_authorization,
    verify_eoa_signature,
)

SIGNER = "0x1234567890abcdef1234567890abcdef12345678"
NETWORKS = ("eip155:84532", "eip155:8453")


@dataclass
class Call:
    method: str
    path: str
    body: Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeFacilitator


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.fake._lock:
            self.server.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.server.fake._lock:
            self.server.fake._connections.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.server.fake._handle(self, "GET")

    def do_POST(self) -> None:  # noqa: N802
        self.server.fake._handle(self, "POST")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def _reply(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class FakeFacilitator:
    """The fake; :func:`fake_facilitator` starts one per test."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.used_nonces: set[str] = set()
        #: the nonce of every successful /settle, in order
        self.settlements: list[str] = []
        self._script: deque[tuple[int, Any, str | None]] = deque()
        self._lose: deque[str] = deque()
        self._settle_failure: str | None = None
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._stopped = False
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # -- scripting -------------------------------------------------------
    def fail_next(
        self, status: int, body: Any = b"upstream error", *, count: int = 1, path: str | None = None
    ) -> None:
        """Answer the next ``count`` requests (to ``path`` only, when given) with ``status``."""
        for _ in range(count):
            self._script.append((status, body, path))

    def lose_next_answer(self, path: str = "/settle") -> None:
        """Carry out the next request to ``path``, then answer 502 instead of its result."""
        self._lose.append(path)

    def settle_failure(self, reason: str | None) -> None:
        self._settle_failure = reason

    def stop(self) -> None:
        """Take the facilitator down: its port refuses connections from now on, and
        the connections clients keep alive are closed."""
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for conn in open_connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def count(self, path: str) -> int:
        return sum(1 for c in self.calls if c.path == path)

    # -- HTTP ------------------------------------------------------------
    def _handle(self, handler: _Handler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("latin-1")
        with self._lock:
            self.calls.append(Call(method, handler.path, body))
            scripted = self._scripted(handler.path.split("?")[0])
        if scripted is not None:
            return _reply(handler, *scripted)
        route = {("GET", "/supported"): self._supported, ("POST", "/verify"): self._verify}
        route[("POST", "/settle")] = self._settle
        action = route.get((method, handler.path.split("?")[0]))
        if action is None:
            return _reply(handler, 404, {"error": "not found"})
        if method == "POST" and not isinstance(body, dict):
            return _reply(handler, 400, {"error": "invalid JSON body"})
        answer = action(body)
        with self._lock:
            lost = handler.path.split("?")[0] in self._lose
            if lost:
                self._lose.remove(handler.path.split("?")[0])
        if lost:
            return _reply(handler, 502, b"upstream timed out")
        _reply(handler, 200, answer)

    def _scripted(self, path: str) -> tuple[int, Any] | None:
        for item in self._script:
            status, body, only = item
            if only is None or only == path:
                self._script.remove(item)
                return status, body
        return None

    def _supported(self, _body: Any) -> dict:
        kinds = [{"x402Version": 2, "scheme": "exact", "network": n} for n in NETWORKS]
        return {"kinds": kinds, "extensions": ["bazaar"], "signers": {"eip155:*": [SIGNER]}}

    def _verify(self, body: dict) -> dict:
        reason, payer = self.check(body)
        if reason:
            return {"isValid": False, "invalidReason": reason, "payer": payer}
        return {"isValid": True, "payer": payer}

    def _settle(self, body: dict) -> dict:
        network = (body.get("paymentRequirements") or {}).get("network", "")
        with self._lock:
            reason, payer = self.check(body)
            reason = reason or self._settle_failure
            if reason:
                return {
                    "success": False,
                    "errorReason": reason,
                    "transaction": "",
                    "network": network,
                    "payer": payer,
                }
            nonce = body["paymentPayload"]["payload"]["authorization"]["nonce"].lower()
            self.used_nonces.add(nonce)
            self.settlements.append(nonce)
        tx = "0x" + hashlib.sha256(nonce.encode()).hexdigest()
        return {"success": True, "transaction": tx, "network": network, "payer": payer}

    # -- the checks ------------------------------------------------------
    def check(self, body: dict) -> tuple[str | None, str]:
        """(invalid reason or None, payer) for a /verify or /settle body."""
        payload = body.get("paymentPayload") or {}
        req = body.get("paymentRequirements") or {}
        inner = payload.get("payload") or {}
        auth = inner.get("authorization") or {}
        payer = str(auth.get("from", ""))
        if body.get("x402Version") != 2 or payload.get("x402Version") != 2:
            return "invalid_x402_version", payer
        if req.get("scheme") != "exact" or (payload.get("accepted") or {}).get("scheme") != "exact":
            return "unsupported_scheme", payer
        if (
            req.get("network") not in NETWORKS
            or (payload.get("accepted") or {}).get("network") != req["network"]
        ):
            return "invalid_network", payer
        if not auth or not inner.get("signature"):
            return "invalid_payload", payer
        if str(auth.get("to", "")).lower() != str(req.get("payTo", "")).lower():
            return "invalid_exact_evm_payload_recipient_mismatch", payer
        if str(auth.get("value")) != str(req.get("amount")):
            return "invalid_exact_evm_payload_authorization_value_mismatch", payer
        now = int(time.time())
        if int(auth.get("validAfter", 0)) > now:
            return "invalid_exact_evm_payload_authorization_valid_after", payer
        if int(auth.get("validBefore", 0)) < now + 6:
            return "invalid_exact_evm_payload_authorization_valid_before", payer
        if not self.signature_ok(auth, inner["signature"], req):
            return "invalid_exact_evm_payload_signature", payer
        if str(auth.get("nonce", "")).lower() in self.used_nonces:
            return "invalid_exact_evm_nonce_already_used", payer
        return None, payer

    @staticmethod
    def signature_ok(auth: dict, signature: str, req: dict) -> bool:
        extra = req.get("extra") or {}
        try:
            digest = hash_eip3009_authorization(
                ExactEIP3009Authorization(
                    from_address=auth["from"],
                    to=auth["to"],
                    value=str(auth["value"]),
                    valid_after=str(auth["validAfter"]),
                    valid_before=str(auth["validBefore"]),
                    nonce=auth["nonce"],
                ),
                get_evm_chain_id(req["network"]),
                req["asset"],
                extra["name"],
                extra["version"],
            )
            return verify_eoa_signature(digest, bytes.fromhex(signature.removeprefix("0x")), auth["from"])
        except (KeyError, ValueError, TypeError):
            return False


@contextmanager
def running_facilitator() -> Iterator[FakeFacilitator]:
    """A fake facilitator for the duration of a ``with`` block (use it from a fixture)."""
    fake = FakeFacilitator()
    try:
        yield fake
    finally:
        fake.stop()
