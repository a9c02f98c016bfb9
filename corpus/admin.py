"""The corpus in the admin: read-only views of what the indexer stored.
The document list's re-index actions are the gateway's (mcp_gateway/admin.py).

Built to stay fast at 100k chunks: counts come from annotations, related
rows from ``list_select_related``, and a document's chunks are a short
preview plus a link to the filtered chunk list, never a full inline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.contrib import admin
from django.db.models import Count, F, Func, IntegerField, OuterRef, Prefetch, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from corpus.models import Chunk, Document, IndexJob, Representation, Setting, Span
from kernel.admin import ReadOnlyAdmin, stamp

if TYPE_CHECKING:  # names for annotations only
    from django.db.models import Model
    from django.utils.safestring import SafeString
    from django_stubs_ext import WithAnnotations

    # Django's admin classes take type arguments in the stubs only, not at run time.
    _RepresentationInline = admin.TabularInline[Representation, Document]
    _SpanInline = admin.TabularInline[Span, Chunk]
else:
    _RepresentationInline = _SpanInline = admin.TabularInline


class _Counted(TypedDict):
    """The count get_queryset annotates each row with."""

    n_chunks: int


TEXT_PREVIEW = 2000
CHUNK_PREVIEW = 20


def _chunks_url(**query: object) -> str:
    params = "&".join(f"{key}={value}" for key, value in query.items())
    return f"{reverse('admin:corpus_chunk_changelist')}?{params}"


def _spans(chunk: Chunk) -> str:
    return ", ".join(str(span) for span in chunk.spans.all()) or "-"


class RepresentationInline(_RepresentationInline):
    model = Representation
    fields = ("rep_type", "created", "chunk_count", "chunks_link", "deleted", "text_preview")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    class Media:
        css = {"all": ("corpus/admin.css",)}  # the preview's style: pages allow no style attribute (CSP)

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Representation]:
        return super().get_queryset(request).annotate(n_chunks=Count("chunks"))

    @admin.display(description="created")
    def created(self, obj: Representation) -> str:
        return stamp(obj.created_unix)

    @admin.display(description="chunks")
    def chunk_count(self, obj: WithAnnotations[Representation, _Counted]) -> int:
        return obj.n_chunks

    @admin.display(description="")
    def chunks_link(self, obj: Representation) -> SafeString:
        return format_html('<a href="{}">chunks →</a>', _chunks_url(representation__rep_id__exact=obj.pk))

    @admin.display(description="extracted text")
    def text_preview(self, obj: Representation) -> SafeString:
        more = len(obj.text) > TEXT_PREVIEW
        return format_html(
            '<pre class="text-preview">{}{}</pre>',
            obj.text[:TEXT_PREVIEW],
            "\n…" if more else "",
        )


class DocumentAdmin(ReadOnlyAdmin):
    """The document views. mcp_gateway/admin.py registers them with the
    re-index actions, which start the gateway's background re-index."""

    list_display = (
        "rel_path",
        "doc_type",
        "status",
        "problem",
        "size_bytes",
        "modified",
        "deleted",
        "chunk_count",
    )
    list_filter = ("doc_type", "status", "deleted")
    search_fields = ("rel_path",)
    ordering = ("rel_path",)
    show_full_result_count = False
    list_per_page = 100
    inlines = (RepresentationInline,)
    fields = (
        "rel_path",
        "source_type",
        "doc_type",
        "status",
        "error_code",
        "error",
        "size_bytes",
        "modified",
        "indexed",
        "content_hash",
        "deleted",
        "chunks",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        qs: QuerySet[Document] = super().get_queryset(request)
        if request.resolver_match and request.resolver_match.url_name == "corpus_document_changelist":
            # A correlated subquery, not a JOIN + GROUP BY: computed for the 100
            # rows shown only, and left out of the paginator's count and the
            # type filter's DISTINCT, which the join made scan every chunk
            # (docs/benchmarks.md, "Admin").
            per_document = (
                Chunk.objects.filter(representation__document=OuterRef("pk"))
                .order_by()
                .annotate(n=Func(F("chunk_id"), function="COUNT"))
                .values("n")
            )
            qs = qs.annotate(n_chunks=Subquery(per_document, output_field=IntegerField()))
        return qs

    @admin.display(description="chunks", ordering="n_chunks")
    def chunk_count(self, obj: WithAnnotations[Document, _Counted]) -> int:
        return obj.n_chunks

    @admin.display(description="error code")
    def problem(self, obj: Document) -> str:
        """The code of a failed (or skipped) document's error; the full text is on its page."""
        return obj.error_code or ("-" if obj.status == "ok" else Truncator(obj.error or "").chars(40))

    @admin.display(description="modified", ordering="mtime_unix")
    def modified(self, obj: Document) -> str:
        return stamp(obj.mtime_unix)

    @admin.display(description="indexed")
    def indexed(self, obj: Document) -> str:
        return stamp(obj.indexed_unix)

    @admin.display(description="chunks and spans")
    def chunks(self, obj: Document) -> SafeString:
        rows = list(
            Chunk.objects.filter(representation__document=obj)
            .select_related("representation")
            .prefetch_related(Prefetch("spans", queryset=Span.objects.order_by("start")))
            .order_by("representation_id", "ordinal")[: CHUNK_PREVIEW + 1]
        )
        table = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    reverse("admin:corpus_chunk_change", args=[c.pk]),
                    c.pk,
                    c.representation.rep_type,
                    _spans(c),
                    Truncator(c.text).chars(120),
                )
                for c in rows[:CHUNK_PREVIEW]
            ),
        )
        link = _chunks_url(representation__document__doc_id__exact=obj.pk)
        label = "all chunks →" if len(rows) > CHUNK_PREVIEW else "open in the chunk list →"
        return format_html(
            "<table><tr><th>chunk</th><th>representation</th><th>spans</th><th>text</th></tr>{}</table>"
            '<p><a href="{}" id="document-chunks-link">{}</a></p>',
            table,
            link,
            label,
        )


@admin.register(Representation)
class RepresentationAdmin(ReadOnlyAdmin):
    list_display = ("rep_id", "document", "rep_type", "created", "deleted")
    list_filter = ("rep_type", "deleted")
    search_fields = ("document__rel_path",)
    list_select_related = ("document",)
    show_full_result_count = False
    fields = ("document", "rep_type", "rep_hash", "created", "meta_json", "deleted", "chunks", "text")
    readonly_fields = fields

    @admin.display(description="created")
    def created(self, obj: Representation) -> str:
        return stamp(obj.created_unix)

    @admin.display(description="chunks")
    def chunks(self, obj: Representation) -> SafeString:
        return format_html('<a href="{}">chunks →</a>', _chunks_url(representation__rep_id__exact=obj.pk))


class SpanInline(_SpanInline):
    model = Span
    fields = ("span_kind", "start", "end", "extra_json")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin):
    list_display = (
        "chunk_id",
        "document_path",
        "ordinal",
        "index_kind",
        "embedding_status",
        "spans",
        "preview",
    )
    list_filter = ("index_kind", "embedding_status", "deleted")
    # By path: chunk text is stored compressed on SQLite (corpus/packed.py),
    # and a text scan of every chunk was slow on a big tree anyway.
    search_fields = ("representation__document__rel_path",)
    list_select_related = ("representation__document",)
    show_full_result_count = False
    list_per_page = 100
    ordering = ("chunk_id",)
    inlines = (SpanInline,)
    fields = (
        "document_path",
        "representation",
        "ordinal",
        "index_kind",
        "tokens_est",
        "embedding_status",
        "embedding_error",
        "deleted",
        "text",
    )
    readonly_fields = fields
    #: the links from a document and a representation filter on these
    FILTER_LOOKUPS = ("representation__rep_id__exact", "representation__document__doc_id__exact")

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        if lookup in self.FILTER_LOOKUPS:
            return True
        # django-stubs require the request (Django 6's signature); Django 5.2's defaults to None.
        return super().lookup_allowed(lookup, value, request)  # type: ignore[arg-type]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Chunk]:
        qs: QuerySet[Chunk] = super().get_queryset(request).defer("embedding")
        return qs.prefetch_related(Prefetch("spans", queryset=Span.objects.order_by("start")))

    @admin.display(description="document", ordering="representation__document__rel_path")
    def document_path(self, obj: Chunk) -> str:
        return obj.representation.document.rel_path

    @admin.display(description="spans")
    def spans(self, obj: Chunk) -> str:
        return _spans(obj)

    @admin.display(description="text")
    def preview(self, obj: Chunk) -> str:
        return Truncator(obj.text).chars(100)


@admin.register(Setting)
class SettingAdmin(ReadOnlyAdmin):
    list_display = ("key", "value")
    search_fields = ("key",)
    fields = ("key", "value")
    readonly_fields = fields


@admin.register(IndexJob)
class IndexJobAdmin(ReadOnlyAdmin):
    list_display = ("job_id", "mode", "running", "outcome", "started", *IndexJob.COUNTERS)
    list_filter = ("mode", "running", "outcome")
    ordering = ("-started_unix",)

    @admin.display(description="started", ordering="started_unix")
    def started(self, obj: IndexJob) -> str:
        return stamp(obj.started_unix)
