"""Which arithmetic the local model runs in (``embed.precision``).

``fp32``, ``int8`` and ``bf16`` are taken as they are. ``auto``, the
default since 2026-11-29, picks
``bf16`` on a processor with a bfloat16 dot product (AVX-512 BF16 or
AMX-BF16) where OpenVINO is installed: there the graph costs about 0.6 of
float32's CPU and its vectors are float32's to cosine 0.99997, and it keeps
found@200 of every corpus in ``bench/retrieval.py`` within 0.01 of float32
(docs/benchmarks.md, "Time to dense"). Elsewhere ``auto`` is ``fp32``.
``int8`` (onnxruntime's dynamic quantization) is faster still but lost 0.02
found@200 on Python, so ``auto`` never picks it. The choice is made when the
embedder is chosen and is recorded with the vectors through the model's
name, so an index keeps the precision it was built with wherever it is
served from (docs/configuration.md).

Kept apart from ``corpus.providers.local`` so that the registry can name the
configured model without importing numpy, tokenizers and safetensors.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PRECISIONS = ("fp32", "int8", "bf16")
SETTINGS = ("auto", *PRECISIONS)
#: /proc/cpuinfo flags of the bfloat16 dot-product instructions OpenVINO uses
BF16_DOT_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
CPUINFO = Path("/proc/cpuinfo")


def onnx_available() -> bool:
    """Whether the onnx backend can run here (onnxruntime and onnx importable)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def openvino_available() -> bool:
    """Whether OpenVINO, which runs the graph at bf16, is importable."""
    return importlib.util.find_spec("openvino") is not None


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The first processor's feature flags (empty where there is no /proc/cpuinfo)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def choose_precision(setting: str, flags: frozenset[str], *, onnx: bool = True, openvino: bool = True) -> str:
    """``setting`` (``auto``, ``fp32``, ``int8`` or ``bf16``) as the precision to run."""
    if setting not in SETTINGS:
        raise ValueError(f"precision must be one of {', '.join(SETTINGS)}, not {setting!r}")
    if setting != "auto":
        return setting
    return "bf16" if onnx and openvino and flags & BF16_DOT_FLAGS else "fp32"


def resolve_precision(setting: str) -> str:
    """``setting`` as the precision to run on this processor."""
    if setting != "auto":
        return choose_precision(setting, frozenset())
    return choose_precision(setting, cpu_flags(), onnx=onnx_available(), openvino=openvino_available())
