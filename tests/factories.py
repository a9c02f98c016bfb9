"""factory-boy factories for the corpus models."""

from __future__ import annotations

import time

import factory

from corpus.models import Chunk, Document, Representation, Span


class DocumentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Document

    rel_path = factory.Sequence(lambda n: f"docs/file_{n}.md")
    doc_type = "md"
    size_bytes = 100
    mtime_ns = 1_700_000_000_000_000_000
    mtime_unix = 1_700_000_000
    content_hash = factory.Sequence(lambda n: f"{n:064x}")
    status = "ok"


class RepresentationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Representation

    document = factory.SubFactory(DocumentFactory)
    rep_type = "raw_text"
    rep_hash = factory.Sequence(lambda n: f"{n:064x}")
    text = "hello world"


class ChunkFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Chunk

    representation = factory.SubFactory(RepresentationFactory)
    ordinal = factory.Sequence(lambda n: n)
    text = "hello world"
    tokens_est = 3


class SpanFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Span

    chunk = factory.SubFactory(ChunkFactory)
    span_kind = "lines"
    start = 1
    end = 1


class McpSessionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "mcp_gateway.McpSession"

    session_id = factory.Sequence(lambda n: f"sess_{n:032x}")
    protocol_version = "2025-11-25"
    client_name = "test-client"
    created_unix = factory.LazyFunction(time.time)
    last_seen_unix = factory.LazyFunction(time.time)
