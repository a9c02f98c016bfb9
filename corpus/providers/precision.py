"""Which arithmetic the local model runs in (``embed.precision``).

``fp32`` and ``int8`` are taken as they are. ``auto`` picks ``int8`` on a
processor with an int8 dot-product instruction (AVX-512 VNNI, AVX-VNNI or
AMX-INT8): there onnxruntime's uint8 x int8 kernels multiply and add into
int32 in one instruction and the quantized graph costs about half the CPU
of float32's (docs/benchmarks.md, "Time to dense"). Elsewhere, and where
onnxruntime is missing, ``auto`` is ``fp32``. The choice is made when the
embedder is chosen and is recorded with the vectors through the model's
name, so an index keeps the precision it was built with wherever it is
served from (docs/configuration.md).

Kept apart from ``corpus.providers.local`` so that the registry can name the
configured model without importing numpy, tokenizers and safetensors.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PRECISIONS = ("fp32", "int8")
SETTINGS = ("auto", *PRECISIONS)
#: /proc/cpuinfo flags of the int8 dot-product instructions onnxruntime uses
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
CPUINFO = Path("/proc/cpuinfo")


def onnx_available() -> bool:
    """Whether the onnx backend can run here (onnxruntime and onnx importable)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


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


def choose_precision(setting: str, flags: frozenset[str], *, onnx: bool = True) -> str:
    """``setting`` (``auto``, ``fp32`` or ``int8``) as the precision to run."""
    if setting not in SETTINGS:
        raise ValueError(f"precision must be one of {', '.join(SETTINGS)}, not {setting!r}")
    if setting != "auto":
        return setting
    return "int8" if onnx and flags & INT8_DOT_FLAGS else "fp32"


def resolve_precision(setting: str) -> str:
    """``setting`` as the precision to run on this processor."""
    if setting != "auto":
        return choose_precision(setting, frozenset())
    return choose_precision(setting, cpu_flags(), onnx=onnx_available())
