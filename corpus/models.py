"""The corpus metadata store (spec §5): documents, representations, chunks,
spans and settings, plus the progress row of each indexing job."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models

from corpus import counters
from corpus.packed import PackedTextField


class DocStatus(models.TextChoices):
    OK = "ok"
    SKIPPED = "skipped"
    ERROR = "error"


class SourceType(models.TextChoices):
    FILE = "file"
    ARCHIVE_MEMBER = "archive_member"


class RepType(models.TextChoices):
    RAW_TEXT = "raw_text"
    OCR_MARKDOWN = "ocr_markdown"
    TRANSCRIPT = "transcript"
    ANNOTATION_JSON = "annotation_json"
    ANNOTATION_TEXT = "annotation_text"


class IndexKind(models.TextChoices):
    TEXT = "text"
    CODE = "code"


class EmbeddingStatus(models.TextChoices):
    OK = "ok"
    PENDING = "pending"
    ERROR = "error"


class SpanKind(models.TextChoices):
    LINES = "lines"
    PAGE = "page"
    TIME = "time"


class Document(models.Model):
    """A file under the root, or a member of an archive (``a.zip!/x.txt``)."""

    doc_id = models.BigAutoField(primary_key=True)
    rel_path = models.CharField(max_length=4096, unique=True)
    source_type = models.CharField(max_length=16, choices=SourceType.choices, default=SourceType.FILE)
    doc_type = models.CharField(max_length=32)
    size_bytes = models.BigIntegerField(default=0)
    mtime_unix = models.BigIntegerField(default=0)
    # Nanosecond mtime catches edits within the same second; with size it
    # lets a no-op re-index skip a file without reading it.
    mtime_ns = models.BigIntegerField(default=0)
    content_hash = models.CharField(max_length=64, blank=True, default="")
    # Fingerprint of the settings that shaped this document's representations
    # (chunking, modes, provider availability): a change re-processes it.
    policy_hash = models.CharField(max_length=64, blank=True, default="")
    status = models.CharField(max_length=16, choices=DocStatus.choices, default=DocStatus.OK)
    error = models.TextField(null=True, blank=True, help_text="Error or skip reason.")
    #: the canonical code of ``error`` (kernel/errors.py); "" when it has none
    error_code = models.CharField(max_length=32, blank=True, default="")
    deleted = models.BooleanField(default=False)
    indexed_unix = models.BigIntegerField(default=0)

    class Meta:
        db_table = "documents"
        indexes = [
            models.Index(fields=["deleted", "rel_path"], name="doc_live_path"),
            models.Index(fields=["deleted", "doc_type", "status"], name="doc_live_type_status"),
        ]

    def __str__(self) -> str:
        return self.rel_path

    @property
    def archive_path(self) -> str | None:
        """The containing archive's rel_path for a member, else ``None``."""
        if "!/" not in self.rel_path:
            return None
        return self.rel_path.rsplit("!/", 1)[0]


class Representation(models.Model):
    """A text view of a document (raw text, OCR, transcript, annotation)."""

    rep_id = models.BigAutoField(primary_key=True)
    # rep_doc_type leads with the document: no index of its own (each one
    # costs every insert; see migration 0010).
    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="representations", db_index=False
    )
    rep_type = models.CharField(max_length=32, choices=RepType.choices)
    rep_hash = models.CharField(max_length=64)
    created_unix = models.BigIntegerField(default=0)
    meta_json = models.JSONField(default=dict, blank=True)
    # The full representation text: open_file slices it for converted
    # formats (HTML, PDF pages), and chunks can always be rebuilt from it.
    # Compressed on SQLite (corpus/packed.py).
    text = PackedTextField(blank=True, default="")
    deleted = models.BooleanField(default=False)

    class Meta:
        db_table = "representations"
        indexes = [models.Index(fields=["document", "rep_type", "deleted"], name="rep_doc_type")]

    def __str__(self) -> str:
        return f"{self.document_id}:{self.rep_type}"


class Chunk(models.Model):
    """A span of a representation; ``chunk_id`` is the ANN label."""

    chunk_id = models.BigAutoField(primary_key=True)
    # chunk_rep_live leads with the representation.
    representation = models.ForeignKey(
        Representation, on_delete=models.CASCADE, related_name="chunks", db_index=False
    )
    ordinal = models.IntegerField()
    #: the file's own text of the span, as stored (compressed on SQLite:
    #: corpus/packed.py): "" when the chunk is a slice of its
    #: representation's text, ``text_start`` to ``text_end`` (corpus/slices.py).
    #: :attr:`text` reads either; a query reads them with ``slices.texts``.
    stored_text = PackedTextField(db_column="text")
    text_start = models.IntegerField(null=True, blank=True)
    text_end = models.IntegerField(null=True, blank=True)
    #: what the unit sits in (its path, enclosing definitions or headings):
    #: indexed and embedded with ``text`` (see :func:`with_context`)
    context = models.TextField(blank=True, default="")
    tokens_est = models.IntegerField(default=0)
    index_kind = models.CharField(max_length=8, choices=IndexKind.choices, default=IndexKind.TEXT)
    embedding_status = models.CharField(
        max_length=8, choices=EmbeddingStatus.choices, default=EmbeddingStatus.PENDING
    )
    embedding_error = models.TextField(null=True, blank=True)
    #: The embeddings version its vector was stored under (corpus/index/dense/embedding.py), so a
    #: server adds only what is newer than what it has.
    embed_seq = models.BigIntegerField(null=True, blank=True, db_index=True)
    # float32 little-endian vector; the .hnsw files are caches rebuilt from it.
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    #: A code unit whose stored vector is still its own alone: the signature
    #: view it leans towards is embedded in a later pass, once every unit has
    #: a vector (corpus/index/dense/embedding.py, "views later").
    view_pending = models.BooleanField(default=False, db_default=False)
    deleted = models.BooleanField(default=False)
    #: when the chunk was last tombstoned (unix seconds; None while it is
    #: live or was never tombstoned): the oldest go first when tombstones are
    #: collected (corpus/ingest/collect.py)
    deleted_unix = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "chunks"
        indexes = [
            models.Index(fields=["representation", "deleted", "ordinal"], name="chunk_rep_live"),
            models.Index(fields=["deleted", "embedding_status", "index_kind"], name="chunk_embed_queue"),
            models.Index(fields=["chunk_id"], condition=models.Q(view_pending=True), name="chunk_view_queue"),
        ]

    def __str__(self) -> str:
        return f"chunk {self.chunk_id}"

    @property
    def text(self) -> str:
        """The file's own text of the span; what hits and snippets show (read
        from the representation's text when the chunk is a slice of it)."""
        if self.text_start is None:
            return str(self.stored_text)
        return str(self.representation.text)[self.text_start : self.text_end]

    @text.setter
    def text(self, value: str) -> None:
        self.stored_text, self.text_start, self.text_end = value, None, None


def with_context(context: str, text: str) -> str:
    """What the lexical index and the embedder read of a chunk."""
    return f"{context}\n{text}" if context else text


class Span(models.Model):
    """Provenance of a chunk: a line range, a page, or a time range (ms)."""

    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="spans", db_index=False)
    span_kind = models.CharField(max_length=8, choices=SpanKind.choices)
    start = models.BigIntegerField()
    end = models.BigIntegerField()
    extra_json = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "spans"
        indexes = [models.Index(fields=["chunk"], name="span_chunk")]

    def __str__(self) -> str:
        return f"{self.span_kind} {self.start}-{self.end}"


class Symbol(models.Model):
    """Where a code file defines a name: one row per outline entry
    (corpus/navigation/outline.py), replaced with the document's text and
    deleted with the document (corpus/ingest/writer.py)."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="symbols", db_index=False)
    #: the name as declared, its last part for a qualified one (``m`` of ``A.prototype.m``)
    name = models.CharField(max_length=200)
    #: ``name`` lowercased: every look-up reads this index, the exact one
    #: too (``name_lower`` and ``name``; an index on ``name`` took another
    #: 4% of the text a code tree indexes, docs/benchmarks.md)
    name_lower = models.CharField(max_length=200)
    #: the declared name where it differs from ``name`` (``Foo::bar``, ``impl Display for Config``)
    qualified = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(max_length=16)
    #: the 1-based line the name is on; the span (with decorators or comments) is start-end
    line = models.IntegerField()
    start = models.IntegerField()
    end = models.IntegerField()
    #: the enclosing definition's name ("" at the top level)
    enclosing = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "symbols"
        indexes = [
            models.Index(fields=["name_lower"], name="symbol_name_lower"),
            models.Index(fields=["document"], name="symbol_doc"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class ReferenceName(models.Model):
    """A name some code file uses, stored once: a reference row holds its id
    (a few bytes) where it held the name, and its index on (name, document)
    is of integers (migration 0023; docs/benchmarks.md). Names stay when the
    last file using them goes: a tree's identifiers recur across versions."""

    name = models.CharField(max_length=200, unique=True)

    class Meta:
        db_table = "symbol_names"

    def __str__(self) -> str:
        return self.name


class Reference(models.Model):
    """Where a code file uses a name: the lines of the identifiers of its
    syntax tree spelled ``name`` that are not a definition's own name
    (corpus/navigation/symbols.py). One row per file and name, its lines
    packed (:func:`pack_lines`), since most names recur in a file: a row per
    use took several times the space (docs/benchmarks.md). The enclosing
    definition of a use is read from the file's symbols when it is returned.

    The row is keyed by (document, name) and, on SQLite, stored ``WITHOUT
    ROWID`` in that order (migration 0023): a file's rows are written
    together and deleted together, and a look-up by name reads the
    (name, document) index."""

    pk = models.CompositePrimaryKey("document", "name")
    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="references", db_index=False
    )
    name = models.ForeignKey(ReferenceName, on_delete=models.PROTECT, related_name="uses", db_index=False)
    #: the 1-based line numbers, ascending: :func:`pack_lines`
    lines = models.BinaryField()

    class Meta:
        db_table = "symbol_references"
        indexes = [models.Index(fields=["name", "document"], name="reference_name_doc")]

    def __str__(self) -> str:
        return f"{self.name_id} ({len(unpack_lines(bytes(self.lines)))} lines)"


def pack_lines(lines: Iterable[int]) -> bytes:
    """Ascending line numbers as the differences between them, each a
    varint (seven bits a byte, the high bit set on all but a number's last
    byte): about 6 bytes a row on the kernel's fs/ where their decimal text took 21."""
    out = bytearray()
    previous = 0
    for line in lines:
        gap = line - previous
        if gap < 0:
            raise ValueError("lines must ascend")
        previous = line
        while gap >= 0x80:
            out.append((gap & 0x7F) | 0x80)
            gap >>= 7
        out.append(gap)
    return bytes(out)


def unpack_lines(data: bytes) -> list[int]:
    """The line numbers :func:`pack_lines` packed."""
    lines: list[int] = []
    value = shift = previous = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            continue
        previous += value
        lines.append(previous)
        value = shift = 0
    return lines


class Setting(models.Model):
    """Key/value facts about the index: format version, models, dimensions."""

    key = models.CharField(max_length=128, primary_key=True)
    value = models.TextField()

    class Meta:
        db_table = "settings"

    def __str__(self) -> str:
        return self.key


class IndexJob(models.Model):
    """One indexing run and its live counters.

    Counters are flushed here every fraction of a second while the job runs,
    so ``status`` and ``stats`` in another process read current figures.
    """

    job_id = models.CharField(max_length=40, primary_key=True)
    mode = models.CharField(max_length=16, default="incremental")
    running = models.BooleanField(default=True)
    pid = models.IntegerField(default=0)
    started_unix = models.FloatField(default=0)
    updated_unix = models.FloatField(default=0)
    finished_unix = models.FloatField(null=True, blank=True)
    outcome = models.CharField(max_length=32, blank=True, default="")
    scanned = models.IntegerField(default=0)
    indexed = models.IntegerField(default=0)
    skipped = models.IntegerField(default=0)
    unchanged = models.IntegerField(default=0)
    deleted = models.IntegerField(default=0)
    representations = models.IntegerField(default=0)
    chunks_total = models.IntegerField(default=0)
    embedded_ok = models.IntegerField(default=0)
    errors = models.IntegerField(default=0)
    #: Where a distributed job was dispatched from, and the ingestion policy
    #: its workers must share (corpus.tasks refuses a worker whose differs).
    host = models.CharField(max_length=255, blank=True, default="")
    policy = models.TextField(blank=True, default="")

    COUNTERS = counters.NAMES  # one field above for each

    class Meta:
        db_table = "index_jobs"
        indexes = [models.Index(fields=["-started_unix"], name="job_recent")]

    def __str__(self) -> str:
        return self.job_id

    def counters(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTERS}


class JobItem(models.Model):
    """One path a distributed job handed to a Celery worker (corpus.tasks).

    The row is the task's idempotency record: a worker moves it to
    ``written`` in the same transaction that writes the document and adds to
    the job's counters, and to ``done`` once the document's chunks are
    embedded, so a redelivered task finds where the first one stopped and
    does nothing twice.
    """

    QUEUED, WRITTEN, DONE, FAILED = "queued", "written", "done", "failed"
    #: The states a job no longer waits for.
    FINISHED = (DONE, FAILED)

    job = models.ForeignKey(IndexJob, on_delete=models.CASCADE, related_name="items", db_column="job_id")
    rel_path = models.TextField()
    state = models.CharField(max_length=8, default=QUEUED)
    #: Deliveries that started on this item; past a limit it is failed, so a
    #: file that kills its worker cannot be redelivered for ever.
    attempts = models.IntegerField(default=0)
    #: why the item failed, and its canonical code (kernel/errors.py)
    error = models.TextField(blank=True, default="")
    error_code = models.CharField(max_length=32, blank=True, default="")
    worker = models.CharField(max_length=255, blank=True, default="")
    finished_unix = models.FloatField(null=True, blank=True)

    class Meta:
        db_table = "index_job_items"
        constraints = [models.UniqueConstraint(fields=["job", "rel_path"], name="job_item_unique")]
        indexes = [models.Index(fields=["job", "state"], name="job_item_state")]

    def __str__(self) -> str:
        return self.rel_path


class Worker(models.Model):
    """A Celery worker process seen doing dir2mcp work (``status`` lists them)."""

    name = models.CharField(max_length=255, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField(default=0)
    started_unix = models.FloatField(default=0)
    last_seen_unix = models.FloatField(default=0)
    tasks_done = models.IntegerField(default=0)

    class Meta:
        db_table = "workers"

    def __str__(self) -> str:
        return self.name
