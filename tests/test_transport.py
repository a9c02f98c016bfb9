"""The pure transport checks of mcp_gateway/transport.py, case by case."""

import pytest
from django.http import HttpResponse

from kernel import errors
from kernel.config import DEFAULT_ALLOWED_ORIGINS
from mcp_gateway import transport
from mcp_gateway.transport import HttpError

DEFAULT_ORIGINS = tuple(DEFAULT_ALLOWED_ORIGINS)


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost",
        "http://localhost:5173",
        "http://127.0.0.1:8080",
        "http://LOCALHOST:1",
        "http://127.0.0.1/",
        "https://localhost:8443",
        "https://127.0.0.1:9999",
        "http://[::1]:3000",
    ],
)
def test_loopback_origins_on_any_port_are_allowed_by_default(origin):
    assert transport.origin_allowed(origin, DEFAULT_ORIGINS)


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example.com",
        "ftp://localhost",
        "http://localhost.evil.com",
        "http://127.0.0.1.nip.io",
        "null",
        "file://",
        "http://user@localhost",
        "http://localhost/path",
        "http://localhost:99999",
        "",
    ],
)
def test_other_origins_are_refused(origin):
    assert not transport.origin_allowed(origin, DEFAULT_ORIGINS)
    with pytest.raises(HttpError) as caught:
        transport.check_origin(origin, DEFAULT_ORIGINS)
    assert (caught.value.status, caught.value.code) == (403, "FORBIDDEN_ORIGIN")


def test_an_entry_with_a_port_allows_only_that_port():
    allowed = ("https://app.example.com:8443", "https://docs.example.com")
    assert transport.origin_allowed("https://app.example.com:8443", allowed)
    assert not transport.origin_allowed("https://app.example.com", allowed)
    assert not transport.origin_allowed("https://app.example.com:9443", allowed)
    # an explicit default port is the same origin as none
    assert transport.origin_allowed("https://docs.example.com:443", allowed)
    assert transport.origin_allowed("https://docs.example.com:8443", allowed)


def test_no_origin_header_passes():
    transport.check_origin(None, DEFAULT_ORIGINS)


def test_bearer_check():
    transport.check_bearer("Bearer s3cret", "s3cret")
    transport.check_bearer("bearer s3cret", "s3cret")
    transport.check_bearer(None, None)  # auth off
    for header in (None, "", "Bearer", "Bearer wrong", "Basic s3cret", "s3cret", "Bearer s3cret2"):
        with pytest.raises(HttpError) as caught:
            transport.check_bearer(header, "s3cret")
        assert caught.value.status == 401
        assert caught.value.headers["WWW-Authenticate"].startswith("Bearer")


def test_bearer_error_never_echoes_the_token():
    with pytest.raises(HttpError) as caught:
        transport.check_bearer("Bearer guess", "s3cret")
    assert "s3cret" not in str(caught.value.body()) and "guess" not in str(caught.value.body())


@pytest.mark.parametrize(
    "accept",
    [
        "application/json, text/event-stream",
        "text/event-stream, application/json",
        "application/json;q=0.9, text/event-stream;q=0.8",
        "*/*",
        None,
    ],
)
def test_post_accept_headers_that_take_both_answers(accept):
    transport.check_accept_post(accept)


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream", "text/html", ""])
def test_post_accept_headers_missing_a_type_get_406(accept):
    with pytest.raises(HttpError) as caught:
        transport.check_accept_post(accept)
    assert caught.value.status == 406


def test_content_type():
    transport.check_content_type("application/json")
    transport.check_content_type("application/json; charset=utf-8")
    for value in (None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx"):
        with pytest.raises(HttpError) as caught:
            transport.check_content_type(value)
        assert caught.value.status == 415


def test_declared_length():
    transport.check_declared_length(None, 10)
    transport.check_declared_length("10", 10)
    with pytest.raises(HttpError) as caught:
        transport.check_declared_length("11", 10)
    assert caught.value.status == 413
    with pytest.raises(HttpError) as caught:
        transport.check_declared_length("ten", 10)
    assert caught.value.status == 400


def test_protocol_version_header():
    for version in transport.SUPPORTED_VERSIONS:
        assert transport.check_protocol_version(version) == version
    assert transport.check_protocol_version(None) == "2025-03-26"
    for bad in ("2026-07-28", "1.0", "", "2025-11-25; x"):
        with pytest.raises(HttpError) as caught:
            transport.check_protocol_version(bad)
        assert caught.value.status == 400


def test_session_header():
    assert transport.check_session_header("sess_abc") == "sess_abc"
    with pytest.raises(HttpError) as caught:
        transport.check_session_header(None)
    assert caught.value.status == 400
    for bad in ("has space", "tab\there", "é", "x" * 201):
        with pytest.raises(HttpError) as caught:
            transport.check_session_header(bad)
        assert caught.value.status == 404


@pytest.mark.parametrize(
    "body, rpc_code",
    [
        (b"{not json", -32700),
        (b"\xff\xfe", -32700),
        (b"", -32700),
        (b"[]", -32600),
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600),
        (b'"ping"', -32600),
        (b"42", -32600),
        (b'{"id":1,"method":"ping"}', -32600),
        (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', -32600),
        (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600),
        (b'{"jsonrpc":"2.0","id":{},"method":"ping"}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":""}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":7}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}', -32600),
        (b'{"jsonrpc":"2.0","id":1}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"result":{},"error":{}}', -32600),
        # A lone surrogate is JSON's spelling of bytes that are not UTF-8: no
        # string of a message may hold one (it reached a tool and 500'd).
        (b'{"jsonrpc":"2.0","id":"\\udc80","method":"ping"}', -32700),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"q":["a\\ud800"]}}', -32700),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"\\udfff":1}}', -32700),
    ],
)
def test_malformed_messages_are_refused_with_400(body, rpc_code):
    with pytest.raises(HttpError) as caught:
        transport.parse_message(body)
    assert caught.value.status == 400
    assert caught.value.body()["error"]["code"] == rpc_code
    assert "id" not in caught.value.body()


@pytest.mark.parametrize(
    "body, kind",
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"ping"}', "request"),
        (b'{"jsonrpc":"2.0","id":"a","method":"ping"}', "request"),
        (b'{"jsonrpc":"2.0","method":"notifications/initialized"}', "notification"),
        (b'{"jsonrpc":"2.0","id":3,"result":{}}', "response"),
        (b'{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}', "response"),
    ],
)
def test_message_kinds(body, kind):
    assert transport.parse_message(body).kind == kind


PING = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"q":"%s"}}'


@pytest.mark.parametrize(
    "q, text",
    [
        pytest.param(b"\\ud83d\\ude00", "\U0001f600", id="pair"),
        pytest.param(b"\\\\ud800", "\\ud800", id="escaped-backslash"),
        pytest.param("\U0001f600".encode(), "\U0001f600", id="raw-emoji"),
    ],
)
def test_surrogate_pairs_and_backslashes_are_text(q, text):
    assert transport.parse_message(PING % q).params["q"] == text


@pytest.mark.parametrize(
    "headers",
    [pytest.param({}, id="asgi-response-dict"), pytest.param(HttpResponse().headers, id="django-response")],
)
def test_one_cors_writer_serves_both_kinds_of_response(headers):
    transport.allow_origin(headers, "http://localhost:5173", "Retry-After")
    assert (headers["Access-Control-Allow-Origin"], headers["Vary"]) == ("http://localhost:5173", "Origin")
    assert headers["Access-Control-Expose-Headers"] == "Retry-After"


@pytest.mark.parametrize(
    "refusal, status, code, rpc_code",
    [
        pytest.param(transport.internal_error(), 500, errors.INTERNAL_ERROR, -32603, id="a-bug"),
        pytest.param(
            transport.unavailable(errors.Dir2mcpError(errors.STORE_CORRUPT, "x")),
            503,
            errors.STORE_CORRUPT,
            -32603,
            id="cannot-serve",
        ),
    ],
)
def test_refusals_of_the_server_itself(refusal, status, code, rpc_code):
    assert (refusal.status, refusal.code) == (status, code)
    assert refusal.body()["error"]["code"] == rpc_code
    assert refusal.body()["error"]["data"] == {"code": code}
