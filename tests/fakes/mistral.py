"""A fake Mistral API on 127.0.0.1 (reference/wire-formats.md §1.0–1.4, 1.6).

It serves ``/v1/embeddings``, ``/v1/chat/completions``, ``/v1/ocr`` and
``/v1/audio/transcriptions`` (in :mod:`tests.fakes.mistral_media`) with the documented
bodies, validates requests as strictly as the real API (unknown fields and bad
types are 422, bearer auth is 401, the observed token limits are 400), and can
be scripted to fail: ``fail_next(429, count=3, retry_after="1")``,
``fail_next(503)``, ``delay_next(2.0)``. Every request is recorded, with its
arrival time and with credentials redacted, in :attr:`FakeMistral.requests`.

Because it speaks the OpenAI shapes too, it doubles as an openai-compatible
server at ``{url}/v1``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from tests.fakes import mistral_media

EMBED_FIELDS = {"model", "input", "output_dimension", "output_dtype", "encoding_format", "metadata"}
CHAT_FIELDS = {
    "model", "messages", "temperature", "top_p", "max_tokens", "stream", "stop", "random_seed",
    "response_format", "tools", "tool_choice", "presence_penalty", "frequency_penalty", "n",
    "parallel_tool_calls", "prompt_mode", "reasoning_effort", "guardrails", "prompt_cache_key",
    "safe_prompt", "metadata", "prediction",
}  # fmt: skip
MESSAGE_FIELDS = {"role", "content", "name", "tool_calls", "tool_call_id", "prefix"}
ROLES = {"system", "user", "assistant", "tool"}
MAX_BATCH_TOKENS = 16_384
MAX_INPUT_TOKENS = 8_192
# Citation markers of spec §9.3: [path:L1-L9], [path#p=3], [path@t=00:01-00:09].
CITATION_RE = re.compile(r"\[[^\[\]\s]+?(?::L\d+-L\d+|#p=\d+|@t=[^\]\s]+)\]")

UNAUTHORIZED_BODY = {"message": "Unauthorized", "request_id": "933f233947ff6d346065bb297e4a4d56"}
DEFAULT_ERROR_BODIES = {
    401: UNAUTHORIZED_BODY,
    422: {
        "object": "error",
        "message": {
            "detail": [
                {
                    "type": "extra_forbidden",
                    "loc": ["body", "max_completion_tokens"],
                    "msg": "Extra inputs are not permitted",
                    "input": 32000,
                }
            ]
        },
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    },
    429: {
        "object": "error",
        "message": "Rate limit exceeded",
        "type": "rate_limited",
        "param": None,
        "code": "1300",
    },
}


def error_body(
    message: Any, kind: str = "invalid_request_error", *, param: Any = None, code: Any = None
) -> dict:
    """The documented error shape (error-glossary.md)."""
    return {"object": "error", "message": message, "type": kind, "param": param, "code": code}


def validation_error(detail: list[dict]) -> dict:
    """Mistral's 422: the FastAPI detail list nested in ``message`` (eca#231)."""
    return error_body({"detail": detail})


@dataclass
class Recorded:
    method: str
    path: str
    #: lower-case names; Authorization / x-api-key values are "<redacted>"
    headers: dict[str, str]
    body: Any
    time: float
    authorized: bool


@dataclass
class Scripted:
    status: int | None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: only a request to this path takes the step (None: the next request, whatever its path)
    path: str | None = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeMistral


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.server.fake._handle(self)

    def do_GET(self) -> None:  # noqa: N802
        self.server.fake._handle(self)

    def handle(self) -> None:
        self.server.fake._track(self.connection)
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client gave up (a timeout test); nothing to answer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class FakeMistral:
    """The fake server; :func:`fake_mistral` starts one per test."""

    API_KEY = "fake-mistral-key-7f3a9c"

    def __init__(self) -> None:
        self.api_key = self.API_KEY
        self.require_auth = True
        self.dims = {
            "mistral-embed": 1024,
            "mistral-embed-2312": 1024,
            "codestral-embed": 1536,
            "codestral-embed-2505": 1536,
        }
        #: the fake's tokenizer: ceil(len(text) / chars_per_token)
        self.chars_per_token = 4.0
        #: serve ``data`` in reverse order (indices stay correct)
        self.reverse_data = False
        #: None echoes the first citation in the prompt; a str, a list of
        #: content chunks, or a callable(messages) -> either
        self.chat_reply: str | list | Callable[[list[dict]], str | list] | None = None
        #: seconds added to every answer (the benchmark's provider latency)
        self.latency = 0.0
        #: keep every request in :attr:`requests` (a bulk benchmark's bodies
        #: would hold its whole corpus)
        self.record = True
        #: the documented OCR limits (FAQ: 1,000 pages, 50 MB per document)
        self.ocr_max_pages = 1000
        self.ocr_max_bytes = 50 * 1024 * 1024
        self.ocr_pages_served = 0
        #: the most requests this fake was answering at once, in all and per path
        self.max_in_flight = 0
        self.max_in_flight_by_path: dict[str, int] = {}
        self._in_flight = 0
        self._in_flight_by_path: dict[str, int] = {}
        self.requests: list[Recorded] = []
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._connections: list[socket.socket] = []
        self._server: _Server | None = None
        self.url = ""

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> FakeMistral:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}"
        # A short poll interval keeps shutdown (every test's teardown) fast.
        threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-mistral",
            daemon=True,
        ).start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    # -- scripting -----------------------------------------------------------

    def fail_next(
        self,
        status: int,
        *,
        count: int = 1,
        retry_after: str | None = None,
        body: Any = None,
        path: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests (to ``path``, if given) with
        ``status`` (and ``Retry-After``). ``body`` may be a dict (JSON) or
        bytes/str sent verbatim."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        if body is None:
            body = DEFAULT_ERROR_BODIES.get(status) or error_body(f"HTTP {status}", "server_error")
        with self._lock:
            self._script.extend(Scripted(status, body, headers, path=path) for _ in range(count))

    def delay_next(self, seconds: float, *, count: int = 1) -> None:
        """Hold the next ``count`` responses for ``seconds``, then answer normally."""
        with self._lock:
            self._script.extend(Scripted(None, delay=seconds) for _ in range(count))

    def _take_step(self, path: str) -> Scripted | None:
        """The first scripted step this request takes (called under the lock)."""
        for i, step in enumerate(self._script):
            if step.path is None or step.path == path:
                del self._script[i]
                return step
        return None

    def requests_to(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    @staticmethod
    def expected_vector(model: str, text: str, dim: int) -> np.ndarray:
        """The unit vector this fake serves for ``text`` under ``model``."""
        seed = int.from_bytes(hashlib.sha256(f"{model}\0{text}".encode()).digest()[:8], "big")
        vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
        return vector / np.linalg.norm(vector)

    def tokens(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    # -- request handling ----------------------------------------------------

    def _track(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.append(conn)

    def _handle(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0]
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            now = self._in_flight_by_path[path] = self._in_flight_by_path.get(path, 0) + 1
            self.max_in_flight_by_path[path] = max(self.max_in_flight_by_path.get(path, 0), now)
        ended = False

        def end() -> None:
            # A request stops counting as its reply starts: the client may
            # read the reply and send its next request before this thread
            # runs again, and that one must not count twice.
            nonlocal ended
            with self._lock:
                if not ended:
                    ended = True
                    self._in_flight -= 1
                    self._in_flight_by_path[path] -= 1

        handler.before_reply = end
        try:
            self._answer(handler)
        finally:
            end()

    def _answer(self, handler: _Handler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        content_type = handler.headers.get("Content-Type", "")
        try:
            if content_type.startswith("multipart/form-data"):
                body: Any = mistral_media.parse_form(content_type, raw)
            else:
                body = json.loads(raw) if raw else None
            parsed = True
        except ValueError:
            body, parsed = raw.decode("utf-8", "replace"), False
        authorized = self._authorized(handler)
        if self.record:
            self.requests.append(
                Recorded(
                    handler.command, handler.path, _redacted(handler), body, time.monotonic(), authorized
                )
            )
        with self._lock:
            step = self._take_step(handler.path.split("?", 1)[0])
        if step is not None and step.delay:
            if self._stop.wait(step.delay):
                return
        if self.latency and self._stop.wait(self.latency):
            return
        if step is not None and step.status is not None:
            return _send(handler, step.status, step.body, step.headers)
        if self.require_auth and not authorized:
            return _send(handler, 401, UNAUTHORIZED_BODY, {"Content-Type": "application/json; charset=utf-8"})
        if not parsed:
            detail = [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error", "input": {}}]
            return _send(handler, 422, validation_error(detail))
        route = {
            "/v1/embeddings": self._embeddings,
            "/v1/chat/completions": self._chat,
            "/v1/ocr": lambda body: mistral_media.ocr(self, body),
            "/v1/audio/transcriptions": lambda body: mistral_media.transcribe(self, _form(body)),
        }.get(handler.path)
        if route is None or handler.command != "POST":
            return _send(handler, 404, {"detail": "Not Found"})
        status, payload = route(body)
        _send(handler, status, payload)

    def _authorized(self, handler: _Handler) -> bool:
        # The SDK sends Bearer; the docs' curl examples send x-api-key (§1.0).
        bearer = handler.headers.get("Authorization", "")
        return bearer == f"Bearer {self.api_key}" or handler.headers.get("x-api-key") == self.api_key

    def _embeddings(self, body: Any) -> tuple[int, Any]:
        problems = _check_fields(body, EMBED_FIELDS, required=("model", "input"))
        if not problems:
            problems = _check_embed_types(body)
        if problems:
            return 422, validation_error(problems)
        model = body["model"]
        if model not in self.dims:
            message = f"Invalid model: {model}"
            return 400, error_body(message, param="model", code="unknown_model")
        if body.get("output_dtype", "float") != "float" or body.get("encoding_format", "float") != "float":
            return 400, error_body("this fake serves float vectors only")
        inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
        counts = [self.tokens(text) for text in inputs]
        if any(count > MAX_INPUT_TOKENS for count in counts):
            return 400, error_body(f"Input is too long. Max is {MAX_INPUT_TOKENS} tokens per input")
        if sum(counts) > MAX_BATCH_TOKENS:
            return 400, error_body(f"Too many tokens in batch. Max is {MAX_BATCH_TOKENS} got {sum(counts)}")
        dim = body.get("output_dimension") or self.dims[model]
        return 200, self._embedding_list(model, inputs, dim, counts)

    def _embedding_list(self, model: str, inputs: list[str], dim: int, counts: list[int]) -> Any:
        data = [
            {"object": "embedding", "embedding": self.expected_vector(model, text, dim).tolist(), "index": i}
            for i, text in enumerate(inputs)
        ]
        if self.reverse_data:
            data.reverse()
        return {
            "id": uuid.uuid4().hex,
            "object": "list",
            "data": data,
            "model": model,
            "usage": _usage(sum(counts)),
        }

    def _chat(self, body: Any) -> tuple[int, dict]:
        problems = _check_fields(body, CHAT_FIELDS, required=("model", "messages"))
        if not problems:
            problems = _check_chat_types(body)
        if problems:
            return 422, validation_error(problems)
        if body.get("stream"):
            return 400, error_body("this fake does not stream")
        messages = body["messages"]
        reply = self.chat_reply(messages) if callable(self.chat_reply) else self.chat_reply
        if reply is None:
            reply = mistral_media.schema_reply(body.get("response_format"), messages)
        if reply is None:
            reply = _echo_citation(messages)
        prompt = sum(self.tokens(json.dumps(m.get("content"))) for m in messages)
        completion = self.tokens(json.dumps(reply))
        return 200, {
            "id": uuid.uuid4().hex,
            "created": int(time.time()),
            "model": body["model"],
            "usage": {
                "prompt_tokens": prompt,
                "total_tokens": prompt + completion,
                "completion_tokens": completion,
            },
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "tool_calls": None, "content": reply},
                }
            ],
        }


class FastFakeMistral(FakeMistral):
    """The same API, its ``/v1/embeddings`` at bulk speed (a benchmark's
    million texts): one generator per request, seeded from the request's
    texts, draws every vector at once, each component rounded to 1e-4 and
    spelled from a table; the body is the same JSON, built as text.
    Requests are not recorded. A text's vector depends on the batch it came
    in (:meth:`FakeMistral.expected_vector` does not give it)."""

    #: a component's spellings, from -CLIP to +CLIP in steps of 1e-4
    CLIP = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.record = False
        steps = round(self.CLIP * 10_000)
        self._spelled = np.array([f"{i / 10_000:.4f}" for i in range(-steps, steps + 1)], dtype=object)

    def _embedding_list(self, model: str, inputs: list[str], dim: int, counts: list[int]) -> Any:
        digest = hashlib.sha256("\0".join([model, *inputs]).encode("utf-8", "surrogatepass")).digest()
        rows = np.random.default_rng(int.from_bytes(digest[:8], "big")).standard_normal((len(inputs), dim))
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        steps = round(self.CLIP * 10_000)
        codes = np.clip(np.rint(rows * 10_000), -steps, steps).astype(np.int64) + steps
        order = range(len(inputs) - 1, -1, -1) if self.reverse_data else range(len(inputs))
        data = ",".join(
            '{"object":"embedding","embedding":[' + ",".join(self._spelled[codes[i]]) + f'],"index":{i}}}'
            for i in order
        )
        head = json.dumps(
            {"id": uuid.uuid4().hex, "object": "list", "model": model, "usage": _usage(sum(counts))}
        )
        return RawJson((head[:-1] + ',"data":[' + data + "]}").encode())


class RawJson(bytes):
    """A JSON body already encoded (:func:`_send` sends it as is)."""


def _usage(tokens: int) -> dict:
    return {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
        "completion_tokens": 0,
        "prompt_audio_seconds": None,
        "request_count": None,
        "prompt_token_details": None,
    }


def _form(body: Any) -> dict[str, list]:
    return body if isinstance(body, dict) and all(isinstance(v, list) for v in body.values()) else {}


def _send(handler: _Handler, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    if isinstance(body, RawJson):
        data, content_type = bytes(body), "application/json"
    elif isinstance(body, dict | list):
        data, content_type = json.dumps(body).encode(), "application/json"
    else:
        data = body.encode() if isinstance(body, str) else bytes(body or b"")
        content_type = "text/plain; charset=utf-8"
    headers = {"Content-Type": content_type, **(headers or {})}
    before_reply = getattr(handler, "before_reply", None)
    if before_reply is not None:
        before_reply()
    handler.send_response(status)
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()


def _redacted(handler: _Handler) -> dict[str, str]:
    secret = {"authorization", "x-api-key", "xi-api-key"}
    return {k.lower(): ("<redacted>" if k.lower() in secret else v) for k, v in handler.headers.items()}


def _problem(kind: str, loc: list, msg: str, value: Any) -> dict:
    return {"type": kind, "loc": ["body", *loc], "msg": msg, "input": value}


def _check_fields(body: Any, allowed: set[str], *, required: tuple[str, ...]) -> list[dict]:
    if not isinstance(body, dict):
        msg = "Input should be a valid dictionary or object to extract fields from"
        return [_problem("model_attributes_type", [], msg, body)]
    problems = [_problem("missing", [name], "Field required", body) for name in required if name not in body]
    extra = [name for name in body if name not in allowed]
    problems += [_problem("extra_forbidden", [n], "Extra inputs are not permitted", body[n]) for n in extra]
    return problems


def _check_embed_types(body: dict) -> list[dict]:
    problems = []
    if not isinstance(body["model"], str):
        problems.append(_problem("string_type", ["model"], "Input should be a valid string", body["model"]))
    inputs = body["input"]
    if isinstance(inputs, list):
        for i, item in enumerate(inputs):
            if not isinstance(item, str):
                problems.append(_problem("string_type", ["input", i], "Input should be a valid string", item))
    elif not isinstance(inputs, str):
        problems.append(_problem("list_type", ["input"], "Input should be a valid list", inputs))
    dim = body.get("output_dimension")
    if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0):
        msg = "Input should be greater than 0"
        problems.append(_problem("greater_than", ["output_dimension"], msg, dim))
    return problems


def _check_chat_types(body: dict) -> list[dict]:
    problems = []
    if not isinstance(body["model"], str):
        problems.append(_problem("string_type", ["model"], "Input should be a valid string", body["model"]))
    messages = body["messages"]
    if not isinstance(messages, list):
        return [*problems, _problem("list_type", ["messages"], "Input should be a valid list", messages)]
    for i, message in enumerate(messages):
        problems += _check_message(i, message)
    temperature = body.get("temperature")
    if temperature is not None:
        if not isinstance(temperature, int | float) or isinstance(temperature, bool):
            problems.append(
                _problem("float_type", ["temperature"], "Input should be a valid number", temperature)
            )
        elif not 0 <= temperature <= 1.5:
            msg = "Input should be less than or equal to 1.5"
            problems.append(_problem("less_than_equal", ["temperature"], msg, temperature))
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0
    ):
        problems.append(_problem("int_type", ["max_tokens"], "Input should be a valid integer", max_tokens))
    return problems


def _check_message(i: int, message: Any) -> list[dict]:
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        msg = "Unable to extract tag using discriminator 'role'"
        return [_problem("union_tag_invalid", ["messages", i], msg, message)]
    loc = ["messages", i, message["role"]]
    problems = [
        _problem("extra_forbidden", [*loc, key], "Extra inputs are not permitted", message[key])
        for key in message
        if key not in MESSAGE_FIELDS
    ]
    content = message.get("content")
    if message["role"] != "assistant" and "content" not in message:
        problems.append(_problem("missing", [*loc, "content"], "Field required", message))
    elif content is not None and not isinstance(content, str | list):
        problems.append(_problem("string_type", [*loc, "content"], "Input should be a valid string", content))
    return problems


def _echo_citation(messages: list[dict]) -> str:
    text = "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    match = CITATION_RE.search(text)
    if match is None:
        return "I could not find this in the provided context."
    return f"According to the context, the answer is there {match.group(0)}."


@pytest.fixture
def fake_mistral() -> Iterator[FakeMistral]:
    """A running :class:`FakeMistral`; its key is ``fake_mistral.api_key``."""
    server = FakeMistral().start()
    try:
        yield server
    finally:
        server.close()


def serve_forever(fake: FakeMistral | None = None, *, port: int = 0) -> None:
    """Run a fake as a real HTTP process: ``python -m tests.fakes.mistral --port N``."""
    fake = fake or FakeMistral()
    fake._server = _Server(("127.0.0.1", port), _Handler)
    fake._server.fake = fake
    host, bound = fake._server.server_address[:2]
    fake.url = f"http://{host}:{bound}"
    print(json.dumps({"url": fake.url, "api_key": fake.api_key}), flush=True)
    try:
        fake._server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Run the fake Mistral API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0 picks a free one)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument(
        "--fast",
        action="store_true",
        help="embeddings at bulk speed, requests not recorded (FastFakeMistral)",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=DIM",
        help="also serve embedding model NAME with DIM dimensions (repeatable)",
    )
    args = parser.parse_args()
    server = FastFakeMistral() if args.fast else FakeMistral()
    server.latency = args.latency
    for spec in args.model:
        name, _, dim = spec.partition("=")
        server.dims[name] = int(dim)
    serve_forever(server, port=args.port)
