"""Provider clients over real HTTP against the fake Mistral server."""

from __future__ import annotations

import importlib.util
import logging
import socket
from datetime import UTC, datetime

import numpy as np
import pytest

from corpus.providers.base import ChatMessage, ModelInfo
from corpus.providers.http import HttpOptions, ProviderClient, retry_after_seconds
from corpus.providers.mistral import (
    INPUT_TOKEN_BUDGET,
    REQUEST_TOKEN_BUDGET,
    MistralChat,
    MistralEmbedder,
    estimate_tokens,
)
from corpus.providers.openai_compatible import DIM_PROBE, OpenAICompatibleChat, OpenAICompatibleEmbedder
from corpus.providers.registry import make_chat, make_embedder
from kernel import errors
from kernel.config import OpenAICompatibleConfig, build_config

FAST = HttpOptions(
    connect_timeout=2.0,
    read_timeout=5.0,
    max_attempts=3,
    backoff_initial=0.01,
    backoff_max=0.05,
    max_wait=5.0,
)
EMBED = "/v1/embeddings"
CHAT = "/v1/chat/completions"


def mistral_config(fake, **sections):
    return build_config({"mistral": {"base_url": fake.url}, **sections}, {}, {})


def keys(value: str | None):
    return lambda name: value if name == "mistral_api_key" else None


@pytest.fixture
def closing():
    """Close every provider a test opens."""
    opened = []
    yield lambda provider: opened.append(provider) or provider
    for provider in opened:
        provider.close()


@pytest.fixture
def embedder(fake_mistral, closing):
    return closing(MistralEmbedder(mistral_config(fake_mistral), api_key=fake_mistral.api_key, options=FAST))


def expected(fake, model: str, texts: list[str], dim: int) -> np.ndarray:
    return np.vstack([fake.expected_vector(model, text, dim) for text in texts])


def failure(call) -> errors.Dir2mcpError:
    with pytest.raises(errors.Dir2mcpError) as caught:
        call()
    return caught.value


# -- embeddings: success paths ----------------------------------------------


def test_text_embeddings_send_the_documented_body_and_return_unit_rows(fake_mistral, embedder):
    vectors = embedder.embed(["alpha", "beta"], kind="text")

    assert vectors.shape == (2, 1024) and vectors.dtype == np.float32
    assert np.allclose(vectors, expected(fake_mistral, "mistral-embed", ["alpha", "beta"], 1024), atol=1e-6)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    [request] = fake_mistral.requests
    assert (request.path, request.body) == (EMBED, {"model": "mistral-embed", "input": ["alpha", "beta"]})
    assert request.authorized and request.headers["authorization"] == "<redacted>"


def test_code_kind_uses_codestral_embed_with_its_documented_dimension(fake_mistral, embedder):
    assert embedder.model_info("code") == ModelInfo("mistral", "codestral-embed", 1536)
    assert embedder.model_info("text") == ModelInfo("mistral", "mistral-embed", 1024)
    assert fake_mistral.requests == []

    vectors = embedder.embed(["def f(): pass"], kind="code")

    assert vectors.shape == (1, 1536)
    assert fake_mistral.requests[0].body["model"] == "codestral-embed"


def test_code_dimension_is_taken_from_the_response(fake_mistral, embedder):
    fake_mistral.dims["codestral-embed"] = 768

    vectors = embedder.embed(["x = 1"], kind="code")

    assert vectors.shape == (1, 768)
    assert embedder.model_info("code").dim == 768


def test_unknown_model_dimension_is_probed_once(fake_mistral, closing):
    fake_mistral.dims["codestral-embed-2599"] = 256
    config = mistral_config(
        fake_mistral, mistral={"base_url": fake_mistral.url, "embed_code_model": "codestral-embed-2599"}
    )
    embedder = closing(MistralEmbedder(config, api_key=fake_mistral.api_key, options=FAST))

    assert embedder.model_info("code").dim == 256
    assert embedder.model_info("code").dim == 256
    assert [r.body["input"] for r in fake_mistral.requests] == [[DIM_PROBE]]


def test_rows_follow_each_items_index_not_the_response_order(fake_mistral, embedder):
    fake_mistral.reverse_data = True
    texts = ["one", "two", "three"]

    vectors = embedder.embed(texts, kind="text")

    assert np.allclose(vectors, expected(fake_mistral, "mistral-embed", texts, 1024), atol=1e-6)


def test_batches_are_bounded_by_item_count(fake_mistral, closing):
    config = mistral_config(fake_mistral, embed={"batch_size": 3})
    embedder = closing(MistralEmbedder(config, api_key=fake_mistral.api_key, options=FAST))
    texts = [f"text {i}" for i in range(7)]

    vectors = embedder.embed(texts, kind="text")

    sent = [r.body["input"] for r in fake_mistral.requests]
    assert [len(batch) for batch in sent] == [3, 3, 1]
    assert sum(sent, []) == texts
    assert np.allclose(vectors, expected(fake_mistral, "mistral-embed", texts, 1024), atol=1e-6)


def test_batches_are_bounded_by_the_token_budget(fake_mistral, embedder):
    texts = [f"{i} " + "word " * 4000 for i in range(6)]  # ~20,000 chars, ~5,700 estimated tokens

    vectors = embedder.embed(texts, kind="text")

    sent = [r.body["input"] for r in fake_mistral.requests]
    assert [len(batch) for batch in sent] == [2, 2, 2]
    for batch in sent:
        assert sum(estimate_tokens(t) for t in batch) <= REQUEST_TOKEN_BUDGET
        assert sum(fake_mistral.tokens(t) for t in batch) <= 16_384
    assert vectors.shape == (6, 1024)


def test_an_over_long_text_is_truncated_to_fit_not_sent_whole(fake_mistral, embedder):
    text = "abcdefghij" * 10_000

    vectors = embedder.embed([text], kind="text")

    [sent] = fake_mistral.requests[0].body["input"]
    assert len(sent) < len(text) and text.startswith(sent)
    assert estimate_tokens(sent) <= INPUT_TOKEN_BUDGET
    assert np.allclose(vectors[0], fake_mistral.expected_vector("mistral-embed", sent, 1024), atol=1e-6)


def test_non_ascii_text_is_budgeted_at_a_token_per_character(fake_mistral, embedder):
    embedder.embed(["日本語のテキスト" * 2000], kind="text")

    [sent] = fake_mistral.requests[0].body["input"]
    assert len(sent) <= INPUT_TOKEN_BUDGET


def test_a_batch_is_split_when_the_server_counts_more_tokens(fake_mistral, embedder):
    fake_mistral.chars_per_token = 1.5  # a tokenizer far hungrier than the estimate
    texts = [f"{i}" + "x" * 10_000 for i in range(3)]

    vectors = embedder.embed(texts, kind="text")

    assert [len(r.body["input"]) for r in fake_mistral.requests] == [3, 1, 2]
    assert np.allclose(vectors, expected(fake_mistral, "mistral-embed", texts, 1024), atol=1e-6)


# -- embeddings: failures -----------------------------------------------------


def test_wrong_key_is_mistral_auth_and_not_retried(fake_mistral, closing):
    embedder = closing(MistralEmbedder(mistral_config(fake_mistral), api_key="wrong-key-123", options=FAST))

    error = failure(lambda: embedder.embed(["a"], kind="text"))

    assert error.code == errors.MISTRAL_AUTH and not error.retryable
    assert "401" in error.message and "MISTRAL_API_KEY" in error.hint
    assert len(fake_mistral.requests) == 1


def test_422_is_mistral_failed_with_the_servers_detail_and_not_retried(fake_mistral, embedder):
    fake_mistral.fail_next(422)

    error = failure(lambda: embedder.embed(["a"], kind="text"))

    assert error.code == errors.MISTRAL_FAILED and not error.retryable
    assert "body.max_completion_tokens: Extra inputs are not permitted" in error.message
    assert len(fake_mistral.requests) == 1


def test_an_unknown_body_field_is_rejected_with_its_location(fake_mistral, closing):
    client = closing(
        ProviderClient(fake_mistral.url, api_key=fake_mistral.api_key, prefix="MISTRAL", label="Mistral")
    )

    error = failure(
        lambda: client.post_json(EMBED, {"model": "mistral-embed", "input": ["a"], "dimensions": 8})
    )

    assert error.code == errors.MISTRAL_FAILED
    assert "HTTP 422" in error.message and "body.dimensions: Extra inputs are not permitted" in error.message


def test_429_with_retry_after_is_retried_after_that_many_seconds(fake_mistral, embedder, caplog):
    caplog.set_level(logging.WARNING, logger="corpus.providers.http")
    fake_mistral.fail_next(429, retry_after="1")

    vectors = embedder.embed(["a"], kind="text")

    assert len(fake_mistral.requests) == 2  # one refusal, one retry
    # The wait is the server's Retry-After, not the backoff (FAST: at most 0.075 s).
    [wait] = [r.getMessage() for r in caplog.records if "retry 1/" in r.getMessage()]
    assert "HTTP 429" in wait and wait.endswith("retry 1/2 in 1.0 s")
    assert vectors.shape == (1, 1024)


def test_retry_after_is_capped_by_max_wait(fake_mistral, closing, caplog):
    caplog.set_level(logging.WARNING, logger="corpus.providers.http")
    options = HttpOptions(max_attempts=2, max_wait=0.5)
    embedder = closing(
        MistralEmbedder(mistral_config(fake_mistral), api_key=fake_mistral.api_key, options=options)
    )
    fake_mistral.fail_next(429, retry_after="120")

    embedder.embed(["a"], kind="text")

    assert len(fake_mistral.requests) == 2
    # The server asked for 120 s; the wait is max_wait.
    [wait] = [r.getMessage() for r in caplog.records if "retry 1/" in r.getMessage()]
    assert wait.endswith("retry 1/1 in 0.5 s")


def test_429_that_never_clears_is_a_retryable_rate_limit_error(fake_mistral, embedder):
    fake_mistral.fail_next(429, count=10, retry_after="0")

    error = failure(lambda: embedder.embed(["a"], kind="text"))

    assert error.code == errors.MISTRAL_RATE_LIMIT and error.retryable
    assert error.as_dict()["retryable"] is True
    assert len(fake_mistral.requests) == FAST.max_attempts


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_server_error_is_retried_and_then_succeeds(fake_mistral, embedder, status):
    fake_mistral.fail_next(status, body="<html>upstream down</html>")

    vectors = embedder.embed(["a"], kind="text")

    assert len(fake_mistral.requests) == 2
    assert vectors.shape == (1, 1024)


def test_server_errors_until_attempts_run_out_are_mistral_failed(fake_mistral, embedder):
    fake_mistral.fail_next(500, count=10)

    error = failure(lambda: embedder.embed(["a"], kind="text"))

    # An outage, not a bad request: the same call may succeed later.
    assert error.code == errors.MISTRAL_FAILED and error.retryable
    assert "HTTP 500" in error.message
    assert len(fake_mistral.requests) == FAST.max_attempts


def test_a_400_is_not_retried(fake_mistral, embedder):
    fake_mistral.fail_next(400, body={"object": "error", "message": "Invalid model", "type": "invalid_model"})

    error = failure(lambda: embedder.embed(["a"], kind="text"))

    assert error.code == errors.MISTRAL_FAILED and "Invalid model" in error.message
    assert len(fake_mistral.requests) == 1


def test_a_timeout_is_mistral_failed(fake_mistral, closing):
    options = HttpOptions(read_timeout=0.3, max_attempts=2, backoff_initial=0.01)
    embedder = closing(
        MistralEmbedder(mistral_config(fake_mistral), api_key=fake_mistral.api_key, options=options)
    )
    fake_mistral.delay_next(5.0, count=2)

    error = failure(lambda: embedder.embed(["a"], kind="text"))

    assert error.code == errors.MISTRAL_FAILED and "timed out" in error.message
    assert len(fake_mistral.requests) == 2


def test_a_refused_connection_is_mistral_failed(closing):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = build_config({"mistral": {"base_url": f"http://127.0.0.1:{port}"}}, {}, {})
    embedder = closing(
        MistralEmbedder(config, api_key="k", options=HttpOptions(max_attempts=2, backoff_initial=0.01))
    )

    error = failure(lambda: embedder.embed(["a"], kind="text"))

    assert error.code == errors.MISTRAL_FAILED and "could not connect" in error.message


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("{not json", id="not-json"),
        pytest.param({"object": "list", "data": []}, id="no-rows"),
        pytest.param(
            {"data": [{"embedding": [0.1], "index": 0}, {"embedding": [0.2], "index": 0}]}, id="dup-index"
        ),
        pytest.param(
            {"data": [{"embedding": [0.1, 0.2], "index": 0}, {"embedding": [0.2], "index": 1}]}, id="ragged"
        ),
    ],
)
def test_a_malformed_embeddings_response_is_mistral_failed(fake_mistral, embedder, body):
    fake_mistral.fail_next(200, body=body)

    error = failure(lambda: embedder.embed(["a", "b"], kind="text"))

    assert error.code == errors.MISTRAL_FAILED
    assert len(fake_mistral.requests) == 1


def test_the_key_never_appears_in_errors_or_logs(fake_mistral, embedder, caplog):
    caplog.set_level(logging.DEBUG)
    key = fake_mistral.api_key
    fake_mistral.fail_next(429, retry_after="0")
    fake_mistral.fail_next(400, body={"message": f"Bad request for key {key}"})

    error = failure(lambda: embedder.embed(["a"], kind="text"))

    assert "[redacted]" in error.message
    for text in (error.message, error.hint, str(error), repr(error), caplog.text):
        assert key not in text
    assert "retry 1/" in caplog.text  # the retry was logged, without the key


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("1", 1.0, id="seconds"),
        pytest.param("1.5", 1.5, id="float"),
        pytest.param("-3", 0.0, id="negative"),
        pytest.param("Wed, 21 Oct 2026 07:28:02 GMT", 2.0, id="http-date"),
        pytest.param("Wed, 21 Oct 2026 07:27:00 GMT", 0.0, id="past-date"),
        pytest.param("", None, id="empty"),
        pytest.param("soon", None, id="garbage"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_retry_after_accepts_seconds_and_http_dates(value, seconds):
    now = datetime(2026, 10, 21, 7, 28, 0, tzinfo=UTC)

    assert retry_after_seconds(value, now=now) == seconds


# -- chat -----------------------------------------------------------------------


def test_chat_sends_the_documented_body_and_returns_the_reply(fake_mistral, closing):
    chat = closing(MistralChat(mistral_config(fake_mistral), api_key=fake_mistral.api_key, options=FAST))
    messages = [
        ChatMessage("system", "Use citations."),
        ChatMessage("user", "Context:\n[src/app.py:L10-L20] def main(): ...\nQuestion: where is main?"),
    ]

    reply = chat.complete(messages, max_tokens=256, temperature=0.2)

    assert "[src/app.py:L10-L20]" in reply
    [request] = fake_mistral.requests
    assert request.path == CHAT
    assert request.body == {
        "model": "mistral-small-2506",
        "messages": [{"role": m.role, "content": m.content} for m in messages],
        "max_tokens": 256,
        "temperature": 0.2,
    }


def test_chat_content_given_as_chunks_is_joined(fake_mistral, closing):
    chat = closing(MistralChat(mistral_config(fake_mistral), api_key=fake_mistral.api_key, options=FAST))
    fake_mistral.chat_reply = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "world"}]

    assert chat.complete([ChatMessage("user", "hi")], max_tokens=32, temperature=0) == "Hello world"


def test_chat_temperature_is_clamped_to_the_apis_maximum(fake_mistral, closing):
    chat = closing(MistralChat(mistral_config(fake_mistral), api_key=fake_mistral.api_key, options=FAST))

    chat.complete([ChatMessage("user", "hi")], max_tokens=32, temperature=2.0)

    assert fake_mistral.requests[0].body["temperature"] == 1.5


def test_chat_rate_limit_is_retried(fake_mistral, closing):
    chat = closing(MistralChat(mistral_config(fake_mistral), api_key=fake_mistral.api_key, options=FAST))
    fake_mistral.chat_reply = "ok"
    fake_mistral.fail_next(429, retry_after="0")

    assert chat.complete([ChatMessage("user", "hi")], max_tokens=32, temperature=0) == "ok"
    assert len(fake_mistral.requests_to(CHAT)) == 2


# -- openai-compatible ----------------------------------------------------------


def oai_section(fake, **overrides) -> OpenAICompatibleConfig:
    values = {"base_url": fake.url + "/v1", "model": "nomic-embed-text", "api_key_env": "FAKE_OAI_KEY"}
    return OpenAICompatibleConfig(**{**values, **overrides})


def test_openai_compatible_embedder_needs_no_key_and_learns_the_dimension(fake_mistral, closing, monkeypatch):
    monkeypatch.delenv("FAKE_OAI_KEY", raising=False)
    fake_mistral.require_auth = False
    fake_mistral.dims["nomic-embed-text"] = 768
    embedder = closing(OpenAICompatibleEmbedder(oai_section(fake_mistral), options=FAST))

    vectors = embedder.embed(["alpha", "beta"], kind="code")

    assert np.allclose(vectors, expected(fake_mistral, "nomic-embed-text", ["alpha", "beta"], 768), atol=1e-6)
    assert embedder.model_info("text") == ModelInfo("openai_compatible", "nomic-embed-text", 768)
    [request] = fake_mistral.requests
    assert request.body == {"model": "nomic-embed-text", "input": ["alpha", "beta"]}
    assert "authorization" not in request.headers


def test_openai_compatible_model_info_probes_for_the_dimension(fake_mistral, closing):
    fake_mistral.require_auth = False
    fake_mistral.dims["nomic-embed-text"] = 384
    embedder = closing(OpenAICompatibleEmbedder(oai_section(fake_mistral), options=FAST))

    assert embedder.model_info("text").dim == 384
    assert fake_mistral.requests[0].body["input"] == [DIM_PROBE]


def test_openai_compatible_key_comes_from_the_named_env_var(fake_mistral, monkeypatch, closing):
    monkeypatch.setenv("FAKE_OAI_KEY", fake_mistral.api_key)
    section = oai_section(fake_mistral, model="mistral-embed").model_dump()
    config = build_config({"embed": {"provider": "openai_compatible", "openai_compatible": section}}, {}, {})
    embedder = closing(make_embedder(config, secrets_lookup=keys(None), options=FAST))

    assert isinstance(embedder, OpenAICompatibleEmbedder)
    assert embedder.embed(["a"], kind="text").shape == (1, 1024)
    assert fake_mistral.requests[0].authorized


def test_openai_compatible_failures_use_provider_codes(fake_mistral, monkeypatch, closing):
    monkeypatch.setenv("FAKE_OAI_KEY", "not-the-key")
    embedder = closing(
        OpenAICompatibleEmbedder(oai_section(fake_mistral), api_key="not-the-key", options=FAST)
    )

    assert failure(lambda: embedder.embed(["a"], kind="text")).code == errors.PROVIDER_AUTH

    fake_mistral.require_auth = False
    fake_mistral.fail_next(429, count=10, retry_after="0")
    error = failure(lambda: embedder.embed(["a"], kind="text"))
    assert error.code == errors.PROVIDER_RATE_LIMIT and error.retryable


def test_openai_compatible_without_a_model_is_config_invalid(fake_mistral):
    error = failure(lambda: OpenAICompatibleEmbedder(oai_section(fake_mistral, model=" ")))

    assert error.code == errors.CONFIG_INVALID and "embed.openai_compatible.model" in error.message


def test_openai_compatible_chat_against_the_fake(fake_mistral, closing):
    fake_mistral.require_auth = False
    fake_mistral.chat_reply = "compatible"
    chat = closing(OpenAICompatibleChat(oai_section(fake_mistral, model="llama3"), options=FAST))

    reply = chat.complete([ChatMessage("user", "hi")], max_tokens=64, temperature=0.5)

    assert reply == "compatible"
    [request] = fake_mistral.requests
    assert request.path == CHAT and request.body["model"] == "llama3"


# -- registry -----------------------------------------------------------------


def test_auto_embedder_is_mistral_when_a_key_is_available(fake_mistral, closing):
    embedder = closing(make_embedder(mistral_config(fake_mistral), secrets_lookup=keys(fake_mistral.api_key)))

    assert isinstance(embedder, MistralEmbedder)
    assert embedder.max_batch == 32
    assert embedder.embed(["a"], kind="text").shape == (1, 1024)


def test_auto_embedder_without_a_key_is_local(caplog):
    config = build_config({}, {}, {})

    embedder = make_embedder(config, secrets_lookup=keys(None))

    if importlib.util.find_spec("corpus.providers.local") is not None:
        assert embedder is not None and embedder.provider == "local"
    else:  # the local embedder is not installed: lexical only, said out loud
        assert embedder is None and "lexical only" in caplog.text


def test_explicit_local_embedder_takes_the_configured_batch_size():
    config = build_config({"embed": {"provider": "local", "batch_size": 7}}, {}, {})

    if importlib.util.find_spec("corpus.providers.local") is not None:
        embedder = make_embedder(config, secrets_lookup=keys("a-key"))
        assert (embedder.provider, embedder.max_batch) == ("local", 7)
    else:
        assert (
            failure(lambda: make_embedder(config, secrets_lookup=keys("a-key"))).code == errors.CONFIG_INVALID
        )


def test_explicit_mistral_without_a_key_is_config_invalid():
    config = build_config({"embed": {"provider": "mistral"}}, {}, {})

    error = failure(lambda: make_embedder(config, secrets_lookup=keys(None)))

    assert (error.code, error.message) == (errors.CONFIG_INVALID, "Missing MISTRAL_API_KEY")
    assert error.hint == "Set env: MISTRAL_API_KEY=...\nOr run: dir2mcp config init"


def test_embed_provider_none_means_no_embedder():
    config = build_config({"embed": {"provider": "none"}}, {}, {})

    assert make_embedder(config, secrets_lookup=keys("a-key")) is None


@pytest.mark.parametrize(
    ("provider", "key", "expected_type"),
    [
        pytest.param("auto", "a-key", MistralChat, id="auto-with-key"),
        pytest.param("auto", None, type(None), id="auto-without-key"),
        pytest.param("mistral", "a-key", MistralChat, id="mistral"),
        pytest.param("none", "a-key", type(None), id="none"),
    ],
)
def test_chat_selection(provider, key, expected_type):
    config = build_config({"chat": {"provider": provider}}, {}, {})

    chat = make_chat(config, secrets_lookup=keys(key))

    assert type(chat) is expected_type
    if chat is not None:
        chat.close()


def test_mistral_chat_without_a_key_is_config_invalid():
    config = build_config({"chat": {"provider": "mistral"}}, {}, {})

    error = failure(lambda: make_chat(config, secrets_lookup=keys(None)))

    assert (error.code, error.message) == (errors.CONFIG_INVALID, "Missing MISTRAL_API_KEY")
