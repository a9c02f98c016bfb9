"""The multimodal tools (spec §15.7–15.10): transcribe, annotate, transcribe_and_ask, ask_audio.

Provider calls are long: each handler reports progress between steps and
stops at the next step once the client cancels.
"""

from __future__ import annotations

import base64

from corpus.answer import ask as answer
from corpus.ingest.ondemand import Workspace, annotate_document, stored_transcript, transcribe_file
from corpus.providers.tts import speak
from corpus.retrieval import Filters
from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import budgets, media_schemas, summaries
from mcp_gateway.registry import Budget, Tool
from mcp_gateway.tools import Call

# They leave the directory untouched (what they write is index data, as
# indexing does) but reach external providers.
PROVIDER_CALL = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": True,
}
MAX_SPOKEN_CHARS = 5000


def _workspace(call: Call) -> Workspace:
    ctx = call.ctx
    return Workspace(config=ctx.config, state=ctx.state, engine=ctx.engine, secret=ctx.secret)


def transcribe(call: Call, args: JsonObject) -> JsonObject:
    call.progress(0, 1, f"transcribing {args['rel_path']}")
    call.check()
    result = transcribe_file(
        _workspace(call),
        args["rel_path"],
        language=args.get("language"),
        timestamps=args["timestamps"],
        refresh=args["retranscribe"],
    )
    call.progress(1, 1, "transcribed and indexed")
    return result


def annotate(call: Call, args: JsonObject) -> JsonObject:
    call.progress(0, 1, f"annotating {args['rel_path']}")
    call.check()
    result = annotate_document(
        _workspace(call),
        args["rel_path"],
        args["schema_json"],
        index_flattened_text=args["index_flattened_text"],
    )
    call.progress(1, 1, "annotation stored")
    return result


def transcribe_and_ask(call: Call, args: JsonObject) -> JsonObject:
    ws = _workspace(call)
    call.progress(0, 3, "checking the transcript")
    rep = stored_transcript(ws, args["rel_path"])
    transcribed = rep is None
    if rep is None:
        call.check()
        call.progress(1, 3, "transcribing")
        made = transcribe_file(ws, args["rel_path"])
        meta = {"provider": made["provider"], "model": made["model"]}
        rel = made["rel_path"]
    else:
        meta, rel = rep.meta_json, rep.document.rel_path
    call.check()
    call.progress(2, 3, "answering")
    ctx = call.ctx
    result = answer(
        args["question"], searcher=ctx.searcher, chat=ctx.chat, config=ctx.config, k=args["k"],
        filters=Filters(path_prefix=rel),
    ).as_dict()  # fmt: skip
    call.progress(3, 3, "answered")
    return result | {
        "transcript_provider": str(meta.get("provider", "")),
        "transcript_model": str(meta.get("model", "")),
        "transcribed": transcribed,
    }


def ask_audio(call: Call, args: JsonObject) -> JsonObject:
    ctx = call.ctx
    key = ctx.secret("elevenlabs_api_key")
    if not key:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID, "Missing ELEVENLABS_API_KEY", hint="set env ELEVENLABS_API_KEY=..."
        )
    call.progress(0, 2, "answering")
    result = answer(args["question"], searcher=ctx.searcher, chat=ctx.chat, config=ctx.config).as_dict()
    call.check()
    call.progress(1, 2, "speaking the answer")
    voice = args.get("voice_id") or ctx.config.elevenlabs.voice_id
    audio, mime = speak(
        ctx.config, api_key=key, text=result["answer"][:MAX_SPOKEN_CHARS], voice_id=voice, fmt=args["format"]
    )
    call.progress(2, 2, "done")
    return result | {
        "audio": {"mimeType": mime, "bytes": len(audio), "voice_id": voice},
        "_audio_data": base64.b64encode(audio).decode("ascii"),
    }


def _audio_content(result: JsonObject) -> tuple[JsonObject, list[JsonObject]]:
    data = result.pop("_audio_data", None)
    if data is None:
        return result, []
    return result, [{"type": "audio", "data": data, "mimeType": result["audio"]["mimeType"]}]


#: The multimodal tools, registered after the core ones (``McpGatewayConfig.ready``).
TOOLS: tuple[Tool, ...] = (
    budgets.declared(
        Tool(
            name="dir2mcp.transcribe",
            title="Transcribe an audio file",
            description=(
                "Transcribe an audio file under the root now (Mistral or ElevenLabs, as configured), store "
                "and index the transcript, and return its timed segments. Afterwards search and ask cite it "
                "as [file@t=mm:ss-mm:ss] and open_file reads start_ms/end_ms ranges. Cached: an unchanged "
                "file is not sent again unless retranscribe is true."
            ),
            input_schema=media_schemas.TRANSCRIBE_INPUT,
            output_schema=media_schemas.TRANSCRIBE_OUTPUT,
            handler=transcribe,
            summarize=summaries.transcribe,
            annotations=dict(PROVIDER_CALL),
        ),
        Budget(items="segments", advice="open_file with start_ms/end_ms reads the rest"),
    ),
    Tool(
        name="dir2mcp.annotate",
        title="Extract structured fields from a document",
        description=(
            "Run structured extraction over an indexed document's best text (OCR, transcript or raw text) "
            "with the JSON Schema you give in schema_json, store the JSON, and (index_flattened_text) index "
            "it as 'key: value' lines so the very next search finds the fields."
        ),
        input_schema=media_schemas.ANNOTATE_INPUT,
        output_schema=media_schemas.ANNOTATE_OUTPUT,
        handler=annotate,
        summarize=summaries.annotate,
        annotations=dict(PROVIDER_CALL),
    ),
    budgets.declared(
        Tool(
            name="dir2mcp.transcribe_and_ask",
            title="Answer a question about one recording",
            description=(
                "Answer a question about one audio file: it is transcribed first if its transcript is "
                "missing or stale, then the answer is grounded in that transcript with time-range citations."
            ),
            input_schema=media_schemas.TRANSCRIBE_AND_ASK_INPUT,
            output_schema=media_schemas.TRANSCRIBE_AND_ASK_OUTPUT,
            handler=transcribe_and_ask,
            summarize=summaries.ask,
            annotations=dict(PROVIDER_CALL),
        ),
        Budget(knob="k", floor=1, advice="dir2mcp.search with a cursor reads further"),
    ),
    Tool(
        name="dir2mcp.ask_audio",
        title="Answer a question out loud",
        description=(
            "Like dir2mcp.ask, and the answer also comes back spoken (ElevenLabs text-to-speech) as an audio "
            "content item (base64, mp3 or wav) next to the text with its citations."
        ),
        input_schema=media_schemas.ASK_AUDIO_INPUT,
        output_schema=media_schemas.ASK_AUDIO_OUTPUT,
        handler=ask_audio,
        summarize=summaries.ask,
        annotations=dict(PROVIDER_CALL),
        split_content=_audio_content,
    ),
)
