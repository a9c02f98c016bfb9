"""Configuration (spec §16): defaults < ``.dir2mcp.yaml`` < env < flags.

The schema is a tree of strict pydantic models: an unknown key or a bad value
raises :class:`~kernel.errors.Dir2mcpError` with code ``CONFIG_INVALID``
(exit 2), naming the dotted key and how to fix it.

Environment overrides use ``DIR2MCP_<SECTION>__<KEY>`` (double underscore
between levels), e.g. ``DIR2MCP_INGEST__PDF__MODE=auto``. A problem names
where the key was set: the file, the environment variable, or a flag.
:func:`validate_layers` also leaves each bad key out and reports it, for
``config print`` to show the configuration with it marked. A few well-known
variables are mapped as well (``MISTRAL_API_KEY``, ``ELEVENLABS_API_KEY``,
``DIR2MCP_AUTH_TOKEN``, ``DIR2MCP_LISTEN``). Secrets never live in this tree
as values: they are resolved by :mod:`kernel.secrets`, which reports only
where each came from.
"""

from __future__ import annotations

import copy
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationError,
)

from kernel import config_trust, errors, secret_scan
from kernel.config_base import Section, Switch
from kernel.jsontypes import JsonObject, JsonValue, walk
from kernel.x402_config import X402Config, layer_switches, merged_switches

CONFIG_FILENAME = ".dir2mcp.yaml"
#: The largest config file read. The root's own file is whatever the tree
#: holds: a cloned repository's ``.dir2mcp.yaml`` may be a symlink to
#: ``/dev/zero`` or to a huge file (read until memory ran out before session
#: 23), or a FIFO (``up`` waited on it for good). Every real one is a few KiB.
MAX_CONFIG_BYTES = 1024 * 1024
#: The most values a config file may stand for, aliases expanded: a YAML
#: alias repeats a node, so ten lines of anchors and aliases stand for 10^10
#: values ("billion laughs"), which validation, the trust check and the
#: error message walked (``status`` on such a root never ended before session 23).
MAX_CONFIG_VALUES = 100_000
ENV_PREFIX = "DIR2MCP_"
#: The MCP protocol version this server speaks (spec §4.3, §5.5).
PROTOCOL_VERSION = "2025-11-25"

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: object) -> float:
    """Parse ``"24h"``, ``"1h30m"``, ``"90s"``, ``"0"`` or a number into seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30m, 24h or 0")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    text = str(value).strip().lower()
    if text in {"0", ""}:
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"{value!r} is not a duration; use forms like 30m, 24h, 1h30m or 0")
    return total


def format_duration(seconds: float) -> str:
    if seconds == 0:
        return "0"
    for unit in ("h", "m", "s"):
        size = _DURATION_UNITS[unit]
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds * 1000)}ms"


Duration = Annotated[float, BeforeValidator(parse_duration), PlainSerializer(format_duration)]


class MistralConfig(Section):
    api_key: str = "${MISTRAL_API_KEY}"
    base_url: str = "https://api.mistral.ai"
    chat_model: str = "mistral-small-2506"
    embed_text_model: str = "mistral-embed"
    embed_code_model: str = "codestral-embed"
    ocr_model: str = "mistral-ocr-latest"


class RagConfig(Section):
    generate_answer: bool = True
    k_default: int = Field(10, ge=1, le=50)
    system_prompt: str = "You are a retrieval-augmented assistant.\nUse citations and never invent sources.\n"
    max_context_chars: int = Field(20000, ge=500)
    # Candidates per wanted hit, used only with search.candidates: 0.
    oversample_factor: int = Field(5, ge=1, le=100)
    # The dense indices' library and vector storage (corpus/index/dense/vectors.py
    # STORES); recorded by the indexing process, a change builds them again
    # from the stored embeddings.
    vector_store: Literal["hnswlib", "usearch-f32", "usearch-bf16", "usearch-i8"] = "usearch-bf16"
    # The most vectors one file of a dense index holds (usearch stores): the
    # indexing process saves a full one and maps it (its vectors leave its
    # memory), and a search merges each file's nearest; 0: one file.
    shard_vectors: int = Field(250_000, ge=0)


class PdfConfig(Section):
    mode: Annotated[Literal["off", "ocr", "auto"], Switch] = "ocr"


class ImagesConfig(Section):
    mode: Annotated[Literal["off", "ocr_auto", "ocr_on"], Switch] = "ocr_auto"


class AudioConfig(Section):
    mode: Annotated[Literal["off", "auto", "on"], Switch] = "auto"
    cache: bool = True


class ArchivesConfig(Section):
    mode: Annotated[Literal["off", "shallow", "deep"], Switch] = "deep"
    max_depth: int = Field(2, ge=1, le=8)
    max_members: int = Field(10000, ge=1)
    max_total_mb: float = Field(512, gt=0)
    max_ratio: float = Field(100, gt=1)


def _default_type_limits() -> dict[str, float]:
    return {"code": 4, "text": 8, "md": 8, "data": 16, "html": 8, "pdf": 64, "image": 32, "audio": 256}


class IngestConfig(Section):
    gitignore: bool = True
    pdf: PdfConfig = PdfConfig()
    images: ImagesConfig = ImagesConfig()
    audio: AudioConfig = AudioConfig()
    archives: ArchivesConfig = ArchivesConfig()
    follow_symlinks: bool = False
    # A file with several names (hard links) may share its content with a
    # file outside the root; off, such files are refused with their reason.
    follow_hardlinks: bool = False
    max_file_mb: float = Field(20, gt=0)
    # Processes that prepare files (extract, cut into units, outline and
    # symbols) beside the one writing the index during a walk; 0 prepares in
    # the writing process. auto: one per core (none on 1 core), at most 4,
    # started once a walk has 500 files to prepare (docs/configuration.md).
    prepare_processes: Literal["auto"] | Annotated[int, Field(ge=0, le=64)] = "auto"
    # Tombstoned chunks (of files changed or deleted, kept so that switching
    # back revives them with their vectors) are collected, oldest first, once
    # they outnumber this share of the live chunks, and once older than
    # tombstone_days whatever their number (0: no age limit).
    tombstone_share: float = Field(1.0, ge=0)
    tombstone_days: float = Field(14, ge=0)
    # Per doc_type ceilings in MB; the effective limit is the smaller of
    # this and max_file_mb.
    max_file_mb_by_type: dict[str, float] = Field(default_factory=_default_type_limits)


class CodeChunking(Section):
    # "units": one chunk per definition (tree-sitter; corpus/ingest/units.py),
    # line windows where no grammar parses the file; "lines": windows only.
    mode: Literal["units", "lines"] = "units"
    max_lines: int = Field(200, ge=5)
    overlap_lines: int = Field(30, ge=0)
    # A definition longer than this is opened: its inner definitions become
    # units and the rest is windowed inside it with its signature as context.
    unit_max_lines: int = Field(80, ge=5)


class TranscriptChunking(Section):
    segment_ms: int = Field(30000, ge=1000)
    overlap_ms: int = Field(5000, ge=0)


class ChunkingConfig(Section):
    # "sections": Markdown, reStructuredText and HTML cut at headings, plain
    # text at paragraphs (corpus/ingest/sections.py); "windows": character
    # windows only.
    prose_mode: Literal["sections", "windows"] = "sections"
    max_chars: int = Field(2500, ge=100)
    overlap_chars: int = Field(250, ge=0)
    min_chars: int = Field(200, ge=0)
    code: CodeChunking = CodeChunking()
    transcript: TranscriptChunking = TranscriptChunking()


class SttProviderConfig(Section):
    api_key: str = ""
    model: str = ""
    timestamps: bool = True


class SttConfig(Section):
    provider: Literal["mistral", "elevenlabs"] = "mistral"
    mistral: SttProviderConfig = SttProviderConfig(api_key="${MISTRAL_API_KEY}", model="voxtral-mini-latest")
    elevenlabs: SttProviderConfig = SttProviderConfig(api_key="${ELEVENLABS_API_KEY}", model="scribe_v1")
    # Seconds one transcription call may take, and calls in flight at once.
    timeout_seconds: float = Field(300, gt=0, le=3600)
    concurrency: int = Field(4, ge=1, le=64)
    # Tries per call: 429, 5xx and timeouts are retried with backoff (Retry-After honoured).
    max_attempts: int = Field(5, ge=1, le=10)


class OcrConfig(Section):
    # The API's documented ceilings (1,000 pages, 50 MB); larger PDFs are split.
    max_pages_per_call: int = Field(1000, ge=1, le=1000)
    max_mb_per_call: float = Field(50, gt=0, le=50)
    timeout_seconds: float = Field(120, gt=0, le=3600)
    concurrency: int = Field(4, ge=1, le=64)
    max_attempts: int = Field(5, ge=1, le=10)


class ElevenLabsConfig(Section):
    base_url: str = "https://api.elevenlabs.io"
    voice_id: str = "JBFqnCBsd6RMkjVDRZzb"
    tts_model: str = "eleven_multilingual_v2"
    output_format: str = "mp3_44100_128"
    timeout_seconds: float = Field(120, gt=0, le=3600)


class AnnotationsConfig(Section):
    model: str = "mistral-small-2506"
    # Characters of the document's text sent for extraction.
    max_input_chars: int = Field(60_000, ge=1000)


class OpenAICompatibleConfig(Section):
    """Any server speaking the OpenAI /v1/embeddings or /v1/chat/completions API."""

    base_url: str = "http://127.0.0.1:11434/v1"
    model: str = ""
    # The name of the variable holding the key (keys never live in this file).
    api_key_env: str = "OPENAI_API_KEY"


class EmbedConfig(Section):
    provider: Literal["auto", "mistral", "openai_compatible", "local", "none"] = "auto"
    batch_size: int = Field(32, ge=1, le=1024)
    # A code unit's vector leans this much towards its signature view (its
    # path, enclosing names and definition line; corpus/index/dense/views.py):
    # stored = (unit + w * signature) / (1 + w). Recorded with the index's
    # vectors; a change takes effect at the next full `reindex` (0: off).
    signature_weight: float = Field(0.3, ge=0, le=4)
    # The local model's arithmetic: fp32; int8 weights and activations in
    # onnxruntime (faster, less accurate); bf16 matmuls in OpenVINO (faster
    # where the processor has AVX-512 BF16 or AMX-BF16; docs/benchmarks.md);
    # bf16-int8, OpenVINO with int8 dense weights (faster still on an AMD
    # EPYC, as accurate as fp32 by found@200); or auto (the default since
    # 2026-11-29): bf16-int8 on an AMD processor with AVX-512 BF16 and VNNI,
    # bf16 on another such processor, with OpenVINO installed, fp32
    # elsewhere (corpus/providers/precision.py).
    # Part of the model's recorded name, so a change applies at the next
    # full `reindex`, as a model change; an index built before keeps its fp32.
    precision: Literal["auto", "fp32", "int8", "bf16", "bf16-int8"] = "auto"
    # The most word pieces of a text (chunk or query) the local model reads:
    # its own 256, or a shorter cut, which costs less CPU (128: 1.32-1.6x less
    # on the units, found@200 within 0.01 on one seed; docs/benchmarks.md,
    # session 31). Part of the model's recorded name, as the precision.
    # The local model's only: other providers ignore it.
    max_tokens: int = Field(256, ge=32, le=256)
    openai_compatible: OpenAICompatibleConfig = OpenAICompatibleConfig()


class ChatConfig(Section):
    provider: Literal["auto", "mistral", "openai_compatible", "none"] = "auto"
    max_tokens: int = Field(1024, ge=16, le=32768)
    temperature: float = Field(0.2, ge=0, le=2)
    openai_compatible: OpenAICompatibleConfig = OpenAICompatibleConfig()


#: the most hits one search returns (``k``): a fixed candidate depth reaches it
MAX_K = 50


def _candidate_depth(value: int) -> int:
    if value and value < MAX_K:
        raise ValueError(f"must be 0 or at least {MAX_K}, the largest k")
    return value


class SearchConfig(Section):
    # How many candidates each ranking (lexical, each dense index) hands the
    # fusion, whatever k is asked: the first k hits are then the first k of
    # any larger k (docs/retrieval.md; depth measured in docs/benchmarks.md).
    # 0: the pool of earlier versions, k × rag.oversample_factor, whose top
    # ten differ between k 10 and k 50 (kept to measure against).
    candidates: Annotated[int, AfterValidator(_candidate_depth)] = Field(200, ge=0, le=5000)
    # How rankings are fused: reciprocal rank fusion, or normalised scores
    # (bench/retrieval.py measured both; docs/benchmarks.md).
    fusion: Literal["rrf", "score"] = "rrf"
    rrf_k: int = Field(30, ge=1)
    # Weight of the text (prose) dense ranking against the lexical one, and
    # of the code dense ranking: the small model matches questions to code
    # far better than words do, and prose less well (docs/benchmarks.md).
    dense_weight: float = Field(0.2, ge=0, le=10)
    code_dense_weight: float = Field(2.0, ge=0, le=10)
    # With index=auto, a query of fewer terms than this keeps that share of
    # the dense weights: a one-word lookup is the lexical index's to answer.
    dense_full_terms: int = Field(4, ge=1, le=32)
    # Queries of up to this many terms rank units holding every term first;
    # longer ones are ranked by BM25 alone (0: always all-terms first).
    all_terms_first_max: int = Field(3, ge=0, le=32)
    # Such long queries leave English function words out of their BM25 ranking.
    drop_stop_words: bool = True
    # A lexical hit on a code unit longer than this many lines counts
    # this/lines of its weight in the fusion: a long block matches many
    # words and costs an agent every one of its lines (0: off). Off by
    # default: at 30 it helped Python and cost JavaScript and Java
    # (docs/benchmarks.md).
    code_lexical_lines: int = Field(0, ge=0, le=100000)
    # A code unit that is only imports and exports (``import``, ``require``,
    # ``module.exports = name``) keeps this share of its fused score: it
    # names what other units are, and took places in the top 50 from them
    # (docs/benchmarks.md; 1: off, as before).
    fragment_share: float = Field(0.0, ge=0, le=1)
    # Among the first fused units, a code unit whose declared name is made
    # of the query's words ("Move the turtle backward" and ``back``) has
    # its score multiplied by 1 + this × the share of its name's words the
    # query holds (ranking.name_match_shares; docs/retrieval.md; 0: off).
    name_match_weight: float = Field(0.75, ge=0, le=10)
    # Among the same units, a code unit whose signature line declares
    # nothing (a comment, a statement, a leftover window) keeps this share
    # of its score (definitions.declared_name; 1: off).
    undeclared_share: float = Field(1.0, ge=0, le=1)
    # A code unit longer than this many lines keeps (this / lines) **
    # long_unit_exponent of its final score: an agent pays every line a hit
    # cites, so a long unit has to be that much likelier to be the answer to
    # be worth reading first (docs/retrieval.md; 0: off).
    long_unit_lines: int = Field(0, ge=0, le=100000)
    long_unit_exponent: float = Field(0.5, ge=0, le=4)
    # A query of up to this many words is a lookup: the units defining a
    # name it gives lead the ranking. In a longer one (a sentence that
    # mentions names, "the base implementation of _.isMap") they join the
    # fusion as one more ranking, of the lexical ranking's weight: the name
    # is as often what the asked-for code uses as what it is
    # (docs/benchmarks.md). A large value makes them always lead.
    definitions_lead_words: int = Field(4, ge=0, le=1000)
    # Pseudo-relevance feedback: each of these dense indices is searched a
    # second time with the query moved towards the mean vector of the best
    # this many units of the first fusion (query + weight * mean), and that
    # ranking takes this share of the index's weight (0 units: one round).
    # Prose is left out: there it cost MRR (docs/benchmarks.md).
    feedback_indices: list[Literal["text", "code"]] = ["code"]
    feedback_units: int = Field(3, ge=0, le=20)
    feedback_weight: float = Field(1.0, ge=0, le=4)
    feedback_share: float = Field(0.5, ge=0, le=1)
    # index=auto searches every dense index holding vectors; the one the
    # query's shape does not point at counts this much of its weight.
    other_index_weight: float = Field(1.0, ge=0, le=10)
    # Below this cosine for the nearest unit, with no unit holding every
    # query term, a result is reported as a weak match.
    weak_cosine: float = Field(0.35, ge=-1, le=1)
    # The query-side adapter (corpus/adapter.py): a matrix moving a query's
    # vector before the code index is searched, fitted on docstring →
    # definition pairs of public packages (bench/query_adapter.py). builtin,
    # off, or the path of another .npy with its .json beside it.
    query_adapter: str = "off"
    snippet_chars: int = Field(300, ge=80, le=4000)


class TlsConfig(Section):
    enabled: bool = False
    cert_file: str = ""
    key_file: str = ""


def _protocol_version(value: str) -> str:
    if value != PROTOCOL_VERSION:
        raise ValueError(
            f"this server speaks MCP {PROTOCOL_VERSION} and each client's version is agreed at "
            f"initialize, so this key cannot choose another; set it to {PROTOCOL_VERSION!r} or remove it"
        )
    return value


class ServerConfig(Section):
    listen: str = "127.0.0.1:0"
    mcp_path: str = "/mcp"
    # In the spec's template (§16.2); the version is negotiated per session
    # (mcp_gateway/transport.py), so the key is checked, not obeyed.
    protocol_version: Annotated[str, AfterValidator(_protocol_version)] = PROTOCOL_VERSION
    tls: TlsConfig = TlsConfig()
    public: bool = False
    session_inactivity_timeout: Duration = 24 * 3600.0
    session_max_lifetime: Duration = 0.0
    # Requests per minute per client (address + credential); 0 turns it off.
    rate_limit_per_minute: int = Field(default=0, ge=0)
    # Tool calls one server process runs at once; more are answered -32001 (busy).
    max_concurrent_calls: int = Field(default=64, ge=1, le=1024)
    # Of those, the most one client runs at once (an MCP session; on the REST
    # mirror an address and credential): no client takes every slot.
    max_calls_per_client: int = Field(default=16, ge=1, le=1024)
    # How long a request waits for its call (a tool, resources/read, prompts/get,
    # a completion) before answering DEADLINE_EXCEEDED; 0 = no deadline.
    call_timeout: Duration = 600.0
    # Sessions one credential may hold; a new one evicts its least recently used.
    max_sessions_per_token: int = Field(default=64, ge=1, le=10_000)
    # Slow clients (`up`): a request head must arrive whole within header_timeout
    # (else 408 and close); a connection with nothing from the client for
    # idle_timeout while a request is awaited is closed. 0 turns either off.
    header_timeout: Duration = 10.0
    idle_timeout: Duration = 60.0
    # Connections `up` keeps open at once; one more makes the oldest still
    # waiting on its client (a head, the rest of a body) close with a 503.
    # 0 = half of what the open-file limit leaves past 256 descriptors.
    max_connections: int = Field(0, ge=0, le=1_000_000)
    # Request bodies being received, across connections, at most this many MiB
    # (each may be up to 4 MiB, in a temporary file); past it, the oldest
    # unfinished upload closes with a 503.
    max_body_buffer_mb: int = Field(256, ge=4, le=65_536)
    # A streamed answer (SSE) a client leaves unread past the socket's own
    # buffer: at most this many MiB a connection; past it the connection is
    # closed (its client resumes or listens again).
    max_unread_mb: int = Field(4, ge=1, le=4096)
    # Any answers (streamed or of known length: a 1 MiB read_bytes is about
    # 1.4 MB) clients leave unread past the sockets' buffers, across
    # connections: at most this many MiB; past it, the connections whose
    # clients have gone longest without reading are closed.
    max_unread_total_mb: int = Field(64, ge=1, le=65_536)
    # Where `up` and `mcp_stdio` index: a supervised child process at a lower
    # CPU priority (searches never wait for extraction or embedding), or a
    # thread of the serving process (docs/operations.md).
    indexer: Literal["process", "thread"] = "process"
    # The indexing child's CPU niceness, added to the server's: 10 yields the
    # CPU to requests; 0 shares it equally (a machine that only indexes).
    indexer_nice: int = Field(default=10, ge=0, le=19)


class KeychainConfig(Section):
    service: str = "dir2mcp"
    account: str = "default"


class SecretFileConfig(Section):
    path: str = ".dir2mcp/secret.env"
    mode: str = "0600"


class SecretsConfig(Section):
    provider: Literal["auto", "keychain", "file", "env", "session"] = "auto"
    keychain: KeychainConfig = KeychainConfig()
    file: SecretFileConfig = SecretFileConfig()


class AuthConfig(Section):
    mode: Literal["auto", "none", "file"] = "auto"
    token_file: str = ""
    token_env: str = "DIR2MCP_AUTH_TOKEN"


# The spec's AWS-secret heuristic `(?i)aws(.{0,20})?secret|([0-9a-zA-Z/+=]{40})`
# matches any 40-character run of letters, digits and slashes (git hashes,
# base64, long paths) and any prose mentioning "AWS secret": it alone skipped
# 106 of the 2,039 text files of the Python standard library, none holding a
# credential. The default here keeps both halves but anchors them to an
# assignment, as the spec's tuning notes recommend. See docs/security.md.
#
# Every rule is written for RE2 (kernel/secret_scan.py), which runs the
# whole list in one pass, in time linear in the text, whatever the rule:
# no look-arounds, no possessive repeats, no back-references (each is also
# valid for Python's re). Where a token must not continue a longer word,
# the character before it is matched ("(?:^|[^A-Za-z0-9_-])ghp_"); where a
# value must be a generated one rather than a placeholder, a named group
# says so and is checked after the match: (?P<mixed>...) must hold a
# lower-case letter, an upper-case letter and a digit, (?P<value>...) must
# not be a placeholder ("changeme", "${DB_PASSWORD}", "xxxx").
# bench/secret_rules.py measures them on code nobody here wrote.
_TOKEN = "A-Za-z0-9_-"  # base64url and the like
_BEFORE = rf"(?:^|[^{_TOKEN}])"  # a token's start does not continue a word
# The characters of a generated password or key, as a value: no space, quote,
# dot, bracket or comma, which end it or make it code (settings.KEY_V2).
_VALUE = r"[A-Za-z0-9+/=_~!@#$%^&*-]"
# How a value is assigned: KEY=v, KEY: v, "key": "v", key := v, key => v.
_ASSIGN = r"""['"]?[ \t]{0,5}(?::=|=>|[:=])[ \t]{0,5}['"]?"""
# The base64 of " PRIVATE KEY" at each of the three alignments, in a
# base64-encoded PEM block (kubeconfig's client-key-data, Kubernetes secrets).
_B64_PRIVATE_KEY = "(?:IFBSSVZBVEUgS0VZ|UFJJVkFURSBLRV|QUklWQVRFIEtFW)"
DEFAULT_SECRET_PATTERNS = [
    r"AKIA[0-9A-Z]{16}",
    r"(?i)aws.{0,20}secret.{0,20}\s*[:=]\s*['\"]?[0-9a-zA-Z/+=]{40}(?:[^0-9a-zA-Z/+=]|$)",
    r"(?i)(?:authorization\s*[:=]\s*bearer\s+|(?:access|id|refresh)_token\s*[:=]\s*)"
    r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    # 3: within one line, and not a name being called: code's `token =
    # getCompleteTokenInBuffer(null)` (the JDK's Scanner.java) and
    # `current_token:` + `dispatch_cache.clear()` on the next line
    # (functools.py) are not credentials (docs/security.md).
    r"(?i)token[^\S\n]*[:=][^\S\n]*[A-Za-z0-9_.-]{20,}(?:[^A-Za-z0-9_.(-]|$)",
    r"sk_[a-z0-9]{32}|api_[A-Za-z0-9]{32}",
    # 5: a private key block of any kind: PEM (RSA, EC, DSA, ENCRYPTED, plain
    # PKCS#8), OpenSSH, PGP ("PRIVATE KEY BLOCK"), SSH2 ("---- BEGIN SSH2 ..."),
    # with key material after it (past headers such as "Proc-Type:", or a
    # JSON "\n"): code that only names the marker, to parse keys, is not a key.
    r"-{4,5} ?BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}[^-]{0,300}?[A-Za-z0-9+/=]{40}",
    # 6: PuTTY private key files (.ppk), whatever their name.
    r"PuTTY-User-Key-File-\d{1,2}: ",
    # 7: GitHub classic tokens: ghp_ personal, gho_ OAuth, ghu_ user-to-server,
    # ghs_ server-to-server, ghr_ refresh.
    rf"{_BEFORE}gh[pousr]_[A-Za-z0-9]{{36,}}(?:[^A-Za-z0-9]|$)",
    # 8: GitHub fine-grained personal access tokens.
    rf"{_BEFORE}github_pat_[A-Za-z0-9_]{{22,}}(?:[^A-Za-z0-9_]|$)",
    # 9: GitLab personal, project, group, deploy, runner and feed tokens.
    rf"{_BEFORE}gl(?:pat|ptt|dt|rt|ft|soat)-[{_TOKEN}]{{20}}",
    # 10: Slack bot, user, app, workspace, refresh and config tokens.
    rf"{_BEFORE}xox[abposre]-[A-Za-z0-9-]{{10}}",
    # 11: Slack incoming webhooks and workflow triggers, and app-level tokens.
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{20}|xapp-\d-[A-Z0-9]{6,20}-",
    # 12: Stripe live secret and restricted keys.
    r"[rs]k_live_[A-Za-z0-9]{20}",
    # 13: Google API keys.
    rf"{_BEFORE}AIza[{_TOKEN}]{{35}}(?:[^{_TOKEN}]|$)",
    # 14: OpenAI (sk-proj-, sk-svcacct-, sk-admin-, legacy sk- + 48) and
    # Anthropic (sk-ant-api03-, sk-ant-admin01-) keys.
    rf"{_BEFORE}sk-(?:(?:proj|svcacct|admin|ant-(?:api|admin|sid)\d\d)-[{_TOKEN}]{{20}}"
    rf"|[A-Za-z0-9]{{32,}}(?:[^{_TOKEN}]|$))",
    # 15: JSON Web Tokens anywhere: a header and a payload that are base64 of
    # JSON objects ("{"" is "eyJ"), and a signature.
    rf"{_BEFORE}eyJ[{_TOKEN}]{{8,}}\.eyJ[{_TOKEN}]{{8,}}\.[{_TOKEN}]{{16}}",
    # 16: npm, PyPI and Hugging Face tokens.
    r"(?:^|[^A-Za-z0-9_])(?:npm_[A-Za-z0-9]{36}|hf_[A-Za-z0-9]{34})(?:[^A-Za-z0-9]|$)"
    r"|pypi-AgE[A-Za-z0-9_-]{50}",
    # 17: a password, secret or key assigned a generated value: 16 or more
    # characters with no space, holding a lower-case letter, an upper-case
    # letter and a digit, and ending the value (a quote, a space, the line's
    # end). "changeme", "${DB_PASSWORD}", "<your key>", "hunter2",
    # "os.environ['X']" and "key: KeyType7," are not; a generated password
    # or key is.
    r"(?i:passw(?:or)?d|secret|api_?key|access_?key|private_?key)[A-Za-z0-9_-]{0,20}"
    rf"{_ASSIGN}(?P<mixed>{_VALUE}{{16,}})(?:[\s'\"]|$)",
    # 18 (issue #34): a base64-encoded PEM private key (kubeconfig's
    # client-key-data, a Kubernetes secret's tls.key), and client-key-data
    # holding anything long enough to be one.
    rf"LS0tLS1CRUdJTi[A-Za-z0-9+/]{{0,60}}{_B64_PRIVATE_KEY}"
    r"|(?i:client-key-data)['\"]?[ \t]*:[ \t]*['\"]?[A-Za-z0-9+/]{40}",
    # 19: the password of a connection string: scheme://user:PASSWORD@host
    # for databases, brokers, caches, mail, directories and HTTP, when it is
    # not a placeholder (user:password@, :${REDIS_PASSWORD}@, %s:%s@).
    r"(?i:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|valkey|amqps?|mssql|sqlserver"
    r"|oracle|cockroachdb|clickhouse|couchdb|neo4j(?:\+s)?|nats|mqtts?|ldaps?|ftps?|sftp|smtps?"
    r"|imaps?|pop3s?|https?|ssh|git|jdbc:[a-z0-9]{2,20}|[a-z0-9]{2,20}\+[a-z0-9]{2,20})://"
    r"[^\s:/@'\"]{0,200}:(?P<value>[^\s:/@'\"]{1,200})@",
    # 20: Azure storage and Service Bus connection strings, SendGrid keys.
    r"(?i:AccountKey|SharedAccessKey)[ \t]*=[ \t]*[A-Za-z0-9+/]{30}"
    rf"|{_BEFORE}SG\.[{_TOKEN}]{{22}}\.[{_TOKEN}]{{43}}(?:[^{_TOKEN}]|$)",
    # 21: HTTP basic credentials in a header or config: Authorization: Basic <base64>.
    # (Authorization: Basic, "authorization": "Basic, nginx's Authorization "Basic.)
    r"(?i:authorization)['\"]?(?:[ \t]*[:=][ \t]*|[ \t]+)['\"]?(?i:basic)[ \t]+"
    r"(?P<value>[A-Za-z0-9+/]{8,}={0,2})",
    # 22: a password or credential assigned under a name rule 17 does not
    # know (DB_PASS, REDIS_AUTH, MYSQL_PWD, ADMIN_PASSWD) or a shorter
    # generated password (8 or more characters, e.g. POSTGRES_PASSWORD in a
    # compose file), still holding a lower-case letter, an upper-case letter
    # and a digit.
    r"(?i:pass(?:w(?:or)?d)?|pwd|auth)"
    rf"{_ASSIGN}(?P<mixed>{_VALUE}{{8,}})(?:[\s'\"]|$)",
]

# The name of each default rule, in order: what a redaction marker says
# ([REDACTED:aws-access-key]); a rule of the user's own is rule-<index>.
DEFAULT_SECRET_RULE_NAMES = [
    "aws-access-key",
    "aws-secret-key",
    "bearer-jwt",
    "token-assignment",
    "api-key",
    "private-key",
    "putty-private-key",
    "github-token",
    "github-pat",
    "gitlab-token",
    "slack-token",
    "slack-webhook",
    "stripe-live-key",
    "google-api-key",
    "openai-anthropic-key",
    "jwt",
    "package-registry-token",
    "password-assignment",
    "base64-private-key",
    "connection-string-password",
    "azure-sendgrid-key",
    "basic-auth",
    "credential-assignment",
]
SECRET_RULE_NAMES = dict(zip(DEFAULT_SECRET_PATTERNS, DEFAULT_SECRET_RULE_NAMES, strict=True))


def secret_rule_names(patterns: Iterable[str]) -> list[str]:
    """The marker name of each rule of ``patterns``."""
    return [SECRET_RULE_NAMES.get(pattern, f"rule-{index}") for index, pattern in enumerate(patterns)]


DEFAULT_ALLOWED_ORIGINS = [
    "http://localhost",
    "http://127.0.0.1",
    "http://[::1]",
    "https://localhost",
    "https://127.0.0.1",
    "https://[::1]",
]

DEFAULT_PATH_EXCLUDES = [
    "**/.git/**",
    "**/node_modules/**",
    "**/.dir2mcp/**",
    # Environment files named the other way round (issue #34): production.env,
    # env.production; the templates (example.env, env.example) stay readable.
    "**/*.env",
    "!**/example.env",
    "!**/sample.env",
    "!**/template.env",
    "**/env.local",
    "**/env.dev",
    "**/env.development",
    "**/env.test",
    "**/env.staging",
    "**/env.prod",
    "**/env.production",
    "**/.env",
    "**/*.pem",
    "**/*.key",
    "**/id_rsa",
    # Environment files of every stage (.env.local, .env.production, ...);
    # the templates projects commit so people know which variables to set
    # stay readable, and their contents are still screened by the patterns.
    "**/.env.*",
    "!**/.env.example",
    "!**/.env.sample",
    "!**/.env.template",
    "**/.envrc",
    # Key stores and SSH private keys (their .pub halves stay readable).
    "**/*.p12",
    "**/*.pfx",
    "**/*.jks",
    "**/*.keystore",
    "**/*.ppk",
    "**/*.kdbx",
    "**/id_dsa",
    "**/id_ecdsa",
    "**/id_ecdsa_sk",
    "**/id_ed25519",
    "**/id_ed25519_sk",
    # Credential files of common tools.
    "**/.npmrc",
    "**/.pypirc",
    "**/.netrc",
    "**/_netrc",
    "**/.git-credentials",
    "**/.pgpass",
    "**/.htpasswd",
    "**/.aws/credentials",
    "**/.docker/config.json",
    "**/.kube/config",
    "**/kubeconfig",
    "**/*.kubeconfig",
    "**/.config/gh/hosts.yml",
    "**/*.tfstate",
    "**/*.tfstate.backup",
]


def _check_patterns(value: list[str]) -> list[str]:
    """Each rule must compile for RE2 (linear, kernel/secret_scan.py) or, failing
    that, for Python's re (look-arounds: run after the set)."""
    for pattern in value:
        if secret_scan.compiles_in_re2(pattern):
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
    return value


class SecurityConfig(Section):
    auth: AuthConfig = AuthConfig()
    # Loopback on any port, over http and https (see docs/security.md).
    allowed_origins: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOWED_ORIGINS))
    path_excludes: list[str] = Field(default_factory=lambda: list(DEFAULT_PATH_EXCLUDES))
    secret_patterns: Annotated[list[str], AfterValidator(_check_patterns)] = Field(
        default_factory=lambda: list(DEFAULT_SECRET_PATTERNS)
    )
    # exclude: a file holding a detected credential is indexed and served
    # nowhere; redact: it is indexed and served with each credential replaced
    # by [REDACTED:<rule>] (corpus/redaction.py). See docs/security.md.
    secret_mode: Literal["exclude", "redact"] = "exclude"


class Config(Section):
    version: Literal[1] = 1
    mistral: MistralConfig = MistralConfig()
    rag: RagConfig = RagConfig()
    ingest: IngestConfig = IngestConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    embed: EmbedConfig = EmbedConfig()
    chat: ChatConfig = ChatConfig()
    search: SearchConfig = SearchConfig()
    stt: SttConfig = SttConfig()
    ocr: OcrConfig = OcrConfig()
    elevenlabs: ElevenLabsConfig = ElevenLabsConfig()
    annotations: AnnotationsConfig = AnnotationsConfig()
    x402: X402Config = X402Config()
    server: ServerConfig = ServerConfig()
    secrets: SecretsConfig = SecretsConfig()
    security: SecurityConfig = SecurityConfig()

    def max_bytes_for(self, doc_type: str) -> int:
        """The size ceiling for a document of ``doc_type``, in bytes."""
        limit = self.ingest.max_file_mb
        per_type = self.ingest.max_file_mb_by_type.get(doc_type)
        if per_type is not None:
            limit = min(limit, per_type)
        return int(limit * 1024 * 1024)


# -- which keys a root's own file may set unapproved ---------------------------------

HARMLESS, SENSITIVE = "harmless", "sensitive"

#: How every key of the schema is taken from a root's own ``.dir2mcp.yaml``
#: (the default file, which whoever wrote the directory wrote: a cloned
#: repository) before the operator has approved it with ``dir2mcp config
#: trust``. A sensitive key sends credentials or data to a network endpoint,
#: names a credential, a file or a variable outside the root, or weakens the
#: gate; set there to anything but its default (or a value
#: :data:`_HARMLESS_VALUES` accepts), it is refused with CONFIG_UNTRUSTED.
#: Harmless keys apply as written. A key covers every key under it; the
#: environment, flags and a file named by ``--config``/``DIR2MCP_CONFIG``
#: are the operator's and always apply. tests/test_config_trust.py checks
#: that every key of :class:`Config` is covered, so a new one must be placed.
KEY_TRUST: dict[str, str] = {
    "version": HARMLESS,
    "mistral.api_key": SENSITIVE,  # ${ANY_VARIABLE}: sends that variable as the key
    "mistral.base_url": SENSITIVE,  # receives the key, queries and corpus text
    "mistral.chat_model": HARMLESS,
    "mistral.embed_text_model": HARMLESS,
    "mistral.embed_code_model": HARMLESS,
    "mistral.ocr_model": HARMLESS,
    "rag": HARMLESS,
    "ingest.gitignore": SENSITIVE,  # false indexes and serves what git ignores
    "ingest.follow_hardlinks": SENSITIVE,  # content shared with files outside the root
    "ingest.follow_symlinks": HARMLESS,  # only links that stay inside the root
    # Up to 64 worker processes of ~275 MiB each: more than the machine holds.
    "ingest.prepare_processes": SENSITIVE,  # only auto, 0 or 1 is harmless
    "ingest.pdf": HARMLESS,
    "ingest.images": HARMLESS,
    "ingest.audio": HARMLESS,
    "ingest.archives": HARMLESS,
    "ingest.max_file_mb": HARMLESS,
    "ingest.max_file_mb_by_type": HARMLESS,
    "ingest.tombstone_share": HARMLESS,
    "ingest.tombstone_days": HARMLESS,
    "chunking": HARMLESS,
    # openai_compatible sends $OPENAI_API_KEY (or the named variable) and the
    # corpus to its base_url, by default a port any local user may hold.
    "embed.provider": SENSITIVE,
    "embed.batch_size": HARMLESS,
    "embed.signature_weight": HARMLESS,
    "embed.precision": HARMLESS,
    "embed.max_tokens": HARMLESS,
    "embed.openai_compatible.base_url": SENSITIVE,  # receives the key and the corpus
    "embed.openai_compatible.api_key_env": SENSITIVE,  # any variable, sent as the key
    "embed.openai_compatible.model": HARMLESS,
    "chat.provider": SENSITIVE,
    "chat.max_tokens": HARMLESS,
    "chat.temperature": HARMLESS,
    "chat.openai_compatible.base_url": SENSITIVE,  # receives the key, questions and passages
    "chat.openai_compatible.api_key_env": SENSITIVE,
    "chat.openai_compatible.model": HARMLESS,
    "search": HARMLESS,
    "search.query_adapter": SENSITIVE,  # a path anywhere (builtin and off are harmless)
    "stt.provider": HARMLESS,
    "stt.mistral.api_key": SENSITIVE,
    "stt.mistral.model": HARMLESS,
    "stt.mistral.timestamps": HARMLESS,
    "stt.elevenlabs.api_key": SENSITIVE,
    "stt.elevenlabs.model": HARMLESS,
    "stt.elevenlabs.timestamps": HARMLESS,
    "stt.timeout_seconds": HARMLESS,
    "stt.concurrency": HARMLESS,
    "stt.max_attempts": HARMLESS,
    "ocr": HARMLESS,
    "elevenlabs.base_url": SENSITIVE,  # receives the ElevenLabs key and the audio
    "elevenlabs.voice_id": HARMLESS,
    "elevenlabs.tts_model": HARMLESS,
    "elevenlabs.output_format": HARMLESS,
    "elevenlabs.timeout_seconds": HARMLESS,
    "annotations": HARMLESS,
    "x402": SENSITIVE,  # the facilitator, where payments go, prices, the mode
    "server": HARMLESS,
    "server.listen": SENSITIVE,  # another interface than loopback
    "server.public": SENSITIVE,
    "server.tls": SENSITIVE,  # key files outside the root, a key someone else holds
    "secrets": SENSITIVE,  # which stores, keychain entries and files credentials come from
    "security.auth": SENSITIVE,  # the bearer token: mode, token file, variable
    "security.allowed_origins": SENSITIVE,  # only fewer than the defaults is harmless
    "security.path_excludes": SENSITIVE,  # only more than the defaults is harmless
    "security.secret_patterns": SENSITIVE,  # only more than the defaults is harmless
    "security.secret_mode": SENSITIVE,  # redact serves files holding credentials
}

_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}


def _only_more_excludes(value: object) -> bool:
    return (
        isinstance(value, list)
        and set(DEFAULT_PATH_EXCLUDES) <= set(value)
        and not any(str(p).startswith("!") for p in value if p not in DEFAULT_PATH_EXCLUDES)
    )


#: Values of a sensitive key that narrow what the default allows, so a root's
#: own file may set them unapproved.
_HARMLESS_VALUES: dict[str, Callable[[object], bool]] = {
    "server.listen": lambda v: isinstance(v, str) and v.rpartition(":")[0] in _LOOPBACK_HOSTS,
    "security.allowed_origins": lambda v: isinstance(v, list) and set(v) <= set(DEFAULT_ALLOWED_ORIGINS),
    "security.path_excludes": _only_more_excludes,
    "security.secret_patterns": lambda v: isinstance(v, list) and set(DEFAULT_SECRET_PATTERNS) <= set(v),
    "search.query_adapter": lambda v: v in ("off", "builtin"),
    "ingest.prepare_processes": lambda v: v in ("auto", 0, 1),
    "embed.provider": lambda v: v != "openai_compatible",
    "chat.provider": lambda v: v != "openai_compatible",
}


def key_trust(dotted: str) -> str | None:
    """The class of ``dotted`` in :data:`KEY_TRUST` (its longest listed prefix), or None."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        found = KEY_TRUST.get(".".join(parts[:end]))
        if found:
            return found
    return None


def schema_keys(model: type[Section] = Config, prefix: str = "") -> list[str]:
    """Every key of the schema, dotted: a section's keys, not the section."""
    keys = []
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, Section):
            keys += schema_keys(sub, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def _leaves(
    data: Mapping[str, JsonValue], model: type[Section] = Config, prefix: str = ""
) -> list[tuple[str, JsonValue]]:
    """The keys ``data`` sets, dotted, with their values (unknown keys left to validation)."""
    found = []
    for name, value in data.items():
        field = model.model_fields.get(str(name))
        if field is None:
            continue
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, Section) and isinstance(value, Mapping):
            found += _leaves(value, sub, f"{prefix}{name}.")
        else:
            found.append((prefix + str(name), value))
    return found


def _is_new(dotted: str, value: JsonValue) -> bool:
    """Whether ``value`` is valid for the key and not its default (``mode: off``
    is ``"off"``); an invalid one is left for validation to report."""
    tree: JsonObject = {}
    _set_dotted(tree, dotted, value)
    try:
        config = Config.model_validate(merged_switches(dict(layer_switches(tree, "file"))))
    except (ValidationError, errors.Dir2mcpError):
        return False
    mine: object = config
    default: object = Config()
    for part in dotted.split("."):
        mine, default = getattr(mine, part), getattr(default, part)
    return bool(mine != default)


def untrusted_keys(data: Mapping[str, JsonValue]) -> list[str]:
    """The keys of ``data`` (a root's own file) that need the operator's approval."""
    return [
        dotted
        for dotted, value in _leaves(data)
        if key_trust(dotted) == SENSITIVE
        and _is_new(dotted, value)
        and not _HARMLESS_VALUES.get(dotted, _never)(value)
    ]


def _never(_value: object) -> bool:
    return False


# Well-known variables that map onto config keys. Secrets (API keys, the auth
# token) are not here: kernel.secrets reads them directly.
ENV_ALIASES: dict[str, str] = {
    "DIR2MCP_LISTEN": "server.listen",
    "DIR2MCP_MCP_PATH": "server.mcp_path",
    "DIR2MCP_PUBLIC": "server.public",
    "DIR2MCP_X402_MODE": "x402.mode",
    "DIR2MCP_X402_FACILITATOR_URL": "x402.facilitator_url",
    "DIR2MCP_X402_RESOURCE_BASE_URL": "x402.resource_base_url",
    "DIR2MCP_X402_NETWORK": "x402.route_policy.tools_call.network",
    "DIR2MCP_X402_PRICE": "x402.route_policy.tools_call.price",
    "DIR2MCP_X402_PAY_TO": "x402.route_policy.tools_call.pay_to",
}

# DIR2MCP_* variables that are not config keys.
_RESERVED_ENV = {
    "DIR2MCP_ROOT",
    "DIR2MCP_STATE_DIR",
    "DIR2MCP_CONFIG",
    "DIR2MCP_AUTH_TOKEN",
    "DIR2MCP_LOG_LEVEL",
    "DIR2MCP_SQLITE_TIMEOUT",
    "DIR2MCP_SQLITE_WAL_MIB",
}


#: one layer of the configuration as read (file, environment or flags), before validation
Layer = Mapping[str, JsonValue]


def _set_dotted(tree: JsonObject, dotted: str, value: JsonValue) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _merge(base: JsonObject, override: Mapping[str, JsonValue]) -> JsonObject:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def env_overrides(environ: Mapping[str, str]) -> JsonObject:
    """Config keys set through the environment, as a nested dict."""
    tree: JsonObject = {}
    for name, dotted in env_names(environ).items():
        _set_dotted(tree, dotted, _env_value(environ[name]))
    return tree


def env_names(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment variables that set config keys: variable -> dotted key,
    in the order they apply (a ``DIR2MCP_<SECTION>__<KEY>`` beats an alias)."""
    names = {name: dotted for name, dotted in ENV_ALIASES.items() if environ.get(name, "") != ""}
    for name in environ:
        if name.startswith(ENV_PREFIX) and "__" in name and name not in _RESERVED_ENV:
            names[name] = name[len(ENV_PREFIX) :].lower().replace("__", ".")
    return names


def _env_value(raw: str) -> JsonValue:
    """Environment values are YAML scalars or flow lists (``[a, b]``)."""
    try:
        return yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        return raw


def read_config_file(path: Path) -> JsonObject:
    """Load a YAML config file; a missing file is an empty config."""
    return parse_config_text(path, read_config_text(path))


def read_config_text(path: Path) -> str:
    """The text of a config file; a missing file is empty. Opened without
    blocking, it must be a regular file (a symlink to one is followed) of at
    most :data:`MAX_CONFIG_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _unreadable(path, "not a regular file")
        try:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise _unreadable(path, exc) from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise _unreadable(path, f"over {MAX_CONFIG_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unreadable(path, exc) from exc


def _more_values_than(data: object, limit: int) -> bool:
    """Whether ``data`` holds more than ``limit`` values, each alias's
    counted again; stops counting past ``limit``."""
    return any(seen > limit for seen, _ in enumerate(walk(data), start=1))


def _unreadable(path: Path, why: object) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(
        errors.CONFIG_INVALID,
        f"cannot read {path}: {why}",
        hint="Check the file's permissions and encoding; a config file is a regular file of YAML.",
    )


def parse_config_text(path: Path, text: str) -> JsonObject:
    """The mapping a config file's ``text`` holds (``path`` names it in errors)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID, f"{path} is not valid YAML: {exc}", hint="Fix the YAML syntax."
        ) from exc
    except RecursionError:  # PyYAML composes nested collections recursively
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID, f"{path} nests collections too deep", hint="Fix the YAML syntax."
        ) from None
    if _more_values_than(data, MAX_CONFIG_VALUES):
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"{path} stands for more than {MAX_CONFIG_VALUES} values once its aliases are expanded",
            hint="Write the configuration out without YAML anchors and aliases.",
        )
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise errors.Dir2mcpError(errors.CONFIG_INVALID, f"{path} must hold a mapping at the top level")
    return data


@dataclass(frozen=True)
class ConfigProblem:
    """One key the configuration cannot take, and where it was set."""

    key: str  # dotted
    unknown: bool  # an unknown key, else a bad value
    detail: str  # pydantic's message, for a bad value
    value: object  # as the layer held it, for its repr
    source: str  # "/abs/.dir2mcp.yaml", "environment variable DIR2MCP_X", "command-line flag"
    untrusted: bool = False  # a sensitive key in a root's own file the operator has not approved

    def describe(self) -> str:
        if self.untrusted:
            return f"'{self.key}' in {self.source}, which {self.detail}, is not applied"
        if self.unknown:
            return f"unknown key '{self.key}' in {self.source}: remove it or fix its spelling"
        return f"bad value for '{self.key}' in {self.source}: {self.detail} (got {self.value!r})"


@dataclass(frozen=True)
class _Layer:
    data: JsonObject
    kind: str  # "file" | "env" | "flags"
    origin: str  # the file's path, for "file"
    names: Mapping[str, str]  # dotted key -> the variable that set it, for "env"

    def source(self, dotted: str) -> str:
        if self.kind == "env":
            name = self.names.get(dotted) or ENV_PREFIX + dotted.upper().replace(".", "__")
            return f"environment variable {name}"
        if self.kind == "flags":
            return "a command-line flag"
        return self.origin

    def depth(self, loc: tuple[str, ...]) -> int:
        """How much of ``loc`` this layer holds: the length of its longest prefix present."""
        node: JsonValue = self.data
        for depth, part in enumerate(loc):
            if not isinstance(node, Mapping) or part not in node:
                return depth
            node = node[part]
        return len(loc)

    def remove(self, loc: tuple[str, ...]) -> None:
        node = self.data
        for part in loc[:-1]:
            node = node[part]
        del node[loc[-1]]


def _problem(
    # Any: item is pydantic's ErrorDetails, a TypedDict of pydantic_core, which
    # the project does not import (not a declared dependency): read as a mapping.
    item: Mapping[str, Any],
    layers: list[_Layer],
) -> tuple[ConfigProblem, _Layer | None, tuple[str, ...]]:
    """The problem pydantic reported, the highest layer that set it, and the key there."""
    loc = tuple(str(part) for part in item["loc"])
    depths = [(layer.depth(loc), -rank, layer) for rank, layer in enumerate(layers)]
    depth, _, layer = max(depths, key=lambda found: found[:2]) if depths else (0, 0, None)
    key = loc[:depth] if depth else loc
    problem = ConfigProblem(
        key=".".join(key) or "(top level)",
        unknown=item["type"] == "extra_forbidden",
        detail=item["msg"],
        value=item.get("input"),
        source=layer.source(".".join(key)) if depth and layer else "the configuration",
    )
    return problem, layer if depth else None, key


def validate_layers(
    file_data: Layer,
    env_data: Layer,
    flag_data: Layer,
    *,
    origin: str = "config",
    env_vars: Mapping[str, str] | None = None,
) -> tuple[Config, list[ConfigProblem]]:
    """Merge the layers (flags > env > file > defaults) and validate; every
    key that fails is left out of the layer that set it and reported. Raises
    CONFIG_INVALID only for what cannot be left out (x402 switches that
    contradict each other, a problem no layer holds)."""
    names = {dotted: name for name, dotted in (env_vars or {}).items()}
    layers = [
        _Layer(copy.deepcopy(dict(flag_data)), "flags", "", {}),
        _Layer(copy.deepcopy(dict(env_data)), "env", "", names),
        _Layer(copy.deepcopy(dict(file_data)), "file", origin, {}),
    ]
    problems: list[ConfigProblem] = []
    while True:
        flags, env, file = (layer.data for layer in layers)
        merged = _x402_switches([(file, origin), (env, "environment"), (flags, "flags")])
        try:
            return Config.model_validate(merged), problems
        except ValidationError as exc:
            found = [_problem(item, layers) for item in exc.errors()]
        for problem, _, _ in found:
            if problem not in problems:  # a union reports one key once per member type
                problems.append(problem)
        held = [(layer, key) for _, layer, key in found if layer is not None]
        if len(held) != len(found):
            raise describe_problems(problems)
        removed = False
        for layer, key in held:
            if layer.depth(key) == len(key):  # not already removed, alone or with a parent key
                layer.remove(key)
                removed = True
        if not removed:
            raise describe_problems(problems)


def describe_problems(problems: list[ConfigProblem]) -> errors.Dir2mcpError:
    sources = sorted({problem.source for problem in problems})
    untrusted = [problem for problem in problems if problem.untrusted]
    rest = [problem.describe() for problem in problems if not problem.untrusted]
    if untrusted:
        keys = ", ".join(problem.key for problem in untrusted)
        rest.insert(
            0,
            f"{untrusted[0].source} sets keys that send credentials or data to a network endpoint or "
            f"weaken the gate, and it {untrusted[0].detail}: {keys}",
        )
    hint = (
        f"Fix it where it is set ({', '.join(sources)}), then retry; `dir2mcp config print` shows the "
        "configuration with it marked."
    )
    if untrusted:
        hint = f"{untrusted_hint(untrusted[0].source)} {hint if len(untrusted) < len(problems) else ''}"
    return errors.Dir2mcpError(
        errors.CONFIG_UNTRUSTED if len(untrusted) == len(problems) else errors.CONFIG_INVALID,
        "; ".join(rest),
        hint=hint.strip(),
    )


def untrusted_hint(path: str) -> str:
    root = Path(path).parent
    return (
        f"Read {path}; if you accept what it sets, approve it with `dir2mcp config trust --dir {root}` "
        "(a later change to the file needs a new approval), or set those keys in the environment, "
        "with flags or in a file you name with --config."
    )


def _x402_switches(layers: list[tuple[Layer, str]]) -> JsonObject:
    """Merge the layers, honouring the x402 switches (kernel/x402_config.py)."""
    merged: JsonObject = {}
    for data, origin in layers:
        merged = _merge(merged, layer_switches(data, origin))
    return merged_switches(merged)


def build_config(file_data: Layer, env_data: Layer, flag_data: Layer, *, origin: str = "config") -> Config:
    """Merge the layers (flags > env > file > defaults) and validate; any
    problem is CONFIG_INVALID naming each key and where it was set
    (``origin`` as :func:`validate_layers` takes it)."""
    return _whole(*validate_layers(file_data, env_data, flag_data, origin=origin))


def _whole(config: Config, problems: list[ConfigProblem]) -> Config:
    if problems:
        raise describe_problems(problems)
    return config


def load_config_marked(
    path: Path | None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Layer | None = None,
    named: bool = False,
) -> tuple[Config, list[ConfigProblem]]:
    """The configuration for ``path`` without the keys it cannot take, and
    those keys (``config print`` shows them marked). Unless the operator
    ``named`` the file (``--config``, ``DIR2MCP_CONFIG``), it is the root's
    own: its sensitive keys (:data:`KEY_TRUST`) apply only once approved."""
    environ = os.environ if environ is None else environ
    file_data: JsonObject = {}
    untrusted: list[ConfigProblem] = []
    if path:
        text = read_config_text(path)
        file_data = parse_config_text(path, text)
        if not named:
            untrusted = _unapproved(path, text, file_data)
    config, problems = validate_layers(
        file_data,
        env_overrides(environ),
        flags or {},
        origin=str(path) if path else "the configuration file",
        env_vars=env_names(environ),
    )
    return config, untrusted + problems


def _unapproved(path: Path, text: str, file_data: JsonObject) -> list[ConfigProblem]:
    """The sensitive keys of an unapproved root file, each taken out of ``file_data``."""
    keys = untrusted_keys(file_data)
    if not keys:
        return []
    state = config_trust.approval(path, text)
    if state == config_trust.APPROVED:
        return []
    if state == config_trust.CHANGED:
        detail = "changed since you approved it, so the approval no longer holds"
    else:
        detail = "is not approved"
    found = []
    for dotted in keys:
        node = file_data
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node[part]
            assert isinstance(child, dict)  # _leaves walked it as a section
            node = child
        found.append(ConfigProblem(dotted, False, detail, node.pop(leaf), str(path), untrusted=True))
    return found


def load_config(
    path: Path | None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Layer | None = None,
    named: bool = False,
) -> Config:
    """The effective configuration for ``path`` (missing file = defaults);
    ``named``: the operator chose the file (see :func:`load_config_marked`)."""
    return _whole(*load_config_marked(path, environ=environ, flags=flags, named=named))


def config_named() -> bool:
    """Whether the operator named the config file (``DIR2MCP_CONFIG``)."""
    return bool(os.environ.get("DIR2MCP_CONFIG"))


def default_config_path(root: Path) -> Path:
    explicit = os.environ.get("DIR2MCP_CONFIG")
    return Path(explicit) if explicit else root / CONFIG_FILENAME
