"""Scans, recordings and slides end to end: ``up`` over HTTP, the official MCP client, fake providers.

The fakes listen on real loopback ports; ``up`` runs as its own process and
reaches them through the base-URL settings, exactly as it would reach the
real APIs.
"""

from __future__ import annotations

import base64
import json

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.fakes.elevenlabs import FakeElevenLabs
from tests.fakes.media import make_scanned_pdf, make_wav
from tests.mcp_http import wait_for_index
from tests.support import TLS
from tests.test_mcp_client import start_up
from tests.test_office import make_pptx

LIMIT = 2
SCRIPT = [
    (0.0, 20.0, "Welcome to the depot briefing."),
    (20.0, 45.0, "The night shift starts at nine sharp."),
]


@pytest.fixture
def elevenlabs():
    server = FakeElevenLabs().start()
    yield server
    server.close()


@pytest.fixture
def served(tmp_path, fake_mistral, elevenlabs):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "scan.pdf").write_bytes(
        make_scanned_pdf(["cover page", "the pangolin inventory is in aisle four"])
    )
    (root / "briefing.wav").write_bytes(make_wav(SCRIPT))
    (root / "deck.pptx").write_bytes(make_pptx([("Intro", "hello"), ("Plan", "the wombat roadmap")]))
    (root / "invoice.txt").write_text("Vendor: Okapi Logistics\nTotal: 1250\nReference: QX-4471\n")
    env = {
        "MISTRAL_API_KEY": fake_mistral.api_key,
        "ELEVENLABS_API_KEY": elevenlabs.api_key,
        "DIR2MCP_MISTRAL__BASE_URL": fake_mistral.url,
        "DIR2MCP_ELEVENLABS__BASE_URL": elevenlabs.url,
        # Annotations share the OCR limit; transcription and speech the STT one.
        "DIR2MCP_OCR__CONCURRENCY": str(LIMIT),
        "DIR2MCP_STT__CONCURRENCY": str(LIMIT),
    }
    proc, connection, _ = start_up(root, env=env)
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    yield connection["url"], token
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    for secret in (token, fake_mistral.api_key, elevenlabs.api_key):
        assert secret not in out + err
    assert "Traceback" not in err, err[-2000:]


async def _call(session, name: str, arguments: dict, **kw):
    result = await session.call_tool(name, arguments, **kw)
    assert result.isError is not True, result.content[0].text
    return result


async def walkthrough(url: str, token: str, elevenlabs: FakeElevenLabs) -> None:
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=60, verify=TLS
    ) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                stats = await wait_for_index(session)
                assert stats["indexing"]["indexed"] == 4, stats

                found = (
                    await _call(session, "dir2mcp.search", {"query": "pangolin inventory"})
                ).structuredContent
                assert found["hits"][0]["rel_path"] == "scan.pdf"
                assert found["hits"][0]["span"] == {"kind": "page", "page": 2}
                page = (
                    await _call(session, "dir2mcp.open_file", {"rel_path": "scan.pdf", "page": 2})
                ).structuredContent
                assert "aisle four" in page["content"]

                heard = (await _call(session, "dir2mcp.search", {"query": "night shift"})).structuredContent
                span = heard["hits"][0]["span"]
                assert heard["hits"][0]["rel_path"] == "briefing.wav"
                assert span == {"kind": "time", "start_ms": 20_000, "end_ms": 45_000}
                excerpt = await _call(
                    session,
                    "dir2mcp.open_file",
                    {"rel_path": "briefing.wav", "start_ms": 20_000, "end_ms": 45_000},
                )
                assert "nine sharp" in excerpt.structuredContent["content"]

                slide = (
                    await _call(session, "dir2mcp.search", {"query": "wombat roadmap"})
                ).structuredContent
                assert slide["hits"][0]["span"] == {"kind": "page", "page": 2}
                assert slide["hits"][0]["label"] == "slide 2"

                asked = await _call(session, "dir2mcp.ask", {"question": "where is the pangolin inventory?"})
                assert "[scan.pdf#p=2]" in asked.content[0].text

                progress: list[float] = []

                async def on_progress(value, total, message):
                    progress.append(value)

                about = await _call(
                    session,
                    "dir2mcp.transcribe_and_ask",
                    {"rel_path": "briefing.wav", "question": "when does the night shift start?"},
                    progress_callback=on_progress,
                )
                assert about.structuredContent["transcribed"] is False
                assert about.structuredContent["transcript_provider"] == "mistral"
                assert "[briefing.wav@t=00:20-00:45]" in about.content[0].text
                assert progress and progress == sorted(progress)

                schema = {
                    "type": "object",
                    "properties": {"vendor": {"type": "string"}, "total": {"type": "integer"}},
                }
                annotated = await _call(
                    session, "dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": schema}
                )
                assert annotated.structuredContent["annotation_json"] == {
                    "vendor": "Okapi Logistics",
                    "total": 1250,
                }
                found = (await _call(session, "dir2mcp.search", {"query": "vendor okapi"})).structuredContent
                kinds = [h["rep_type"] for h in found["hits"] if h["rel_path"] == "invoice.txt"]
                assert "annotation_text" in kinds

                spoken = await _call(
                    session, "dir2mcp.ask_audio", {"question": "where is the pangolin inventory?"}
                )
                audio = [item for item in spoken.content if item.type == "audio"]
                assert len(audio) == 1 and audio[0].mimeType == "audio/mpeg"
                answer = spoken.structuredContent["answer"]
                assert base64.b64decode(audio[0].data) == elevenlabs.expected_audio(answer)
                assert elevenlabs.tts_texts == [answer]


def test_scans_recordings_and_slides_are_cited_by_page_and_time(served, elevenlabs, fake_mistral):
    url, token = served

    anyio.run(walkthrough, url, token, elevenlabs)

    assert len(fake_mistral.requests_to("/v1/ocr")) == 1
    assert len(fake_mistral.requests_to("/v1/audio/transcriptions")) == 1
    logged = json.dumps([r.headers for r in fake_mistral.requests + elevenlabs.requests])
    assert fake_mistral.api_key not in logged and elevenlabs.api_key not in logged


async def concurrent_calls(url: str, token: str, mistral) -> tuple[list, dict]:
    """Five annotations and five transcriptions at once, then five spoken answers at once."""
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=120, verify=TLS
    ) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await wait_for_index(session)
                results: list = []

                async def one(name: str, arguments: dict) -> None:
                    results.append(await _call(session, name, arguments))

                async with anyio.create_task_group() as group:
                    for i in range(5):
                        schema = {"type": "object", "properties": {f"field_{i}": {"type": "string"}}}
                        group.start_soon(
                            one, "dir2mcp.annotate", {"rel_path": "invoice.txt", "schema_json": schema}
                        )
                        group.start_soon(
                            one, "dir2mcp.transcribe", {"rel_path": "briefing.wav", "retranscribe": True}
                        )
                # ask_audio's answer is a chat completion too, outside the annotation limit.
                mistral_peaks = dict(mistral.max_in_flight_by_path)
                async with anyio.create_task_group() as group:
                    for i in range(5):
                        group.start_soon(
                            one, "dir2mcp.ask_audio", {"question": f"where is the pangolin inventory {i}?"}
                        )
                return results, mistral_peaks


def test_concurrent_tool_calls_share_one_limit_per_provider(served, elevenlabs, fake_mistral):
    url, token = served
    fake_mistral.latency = elevenlabs.latency = 0.3

    results, peaks = anyio.run(concurrent_calls, url, token, fake_mistral)

    assert len(results) == 15
    assert len(fake_mistral.requests_to("/v1/chat/completions")) == 5 + 5  # annotations, then answers
    assert len(fake_mistral.requests_to("/v1/audio/transcriptions")) == 1 + 5  # indexing, then each call
    assert len(elevenlabs.tts_texts) == 5
    # Each call builds its own client; one limit per provider holds across all of them.
    assert peaks["/v1/chat/completions"] <= LIMIT
    assert peaks["/v1/audio/transcriptions"] <= LIMIT
    [tts] = [path for path in elevenlabs.max_in_flight_by_path if path.startswith("/v1/text-to-speech/")]
    assert elevenlabs.max_in_flight_by_path[tts] <= LIMIT
