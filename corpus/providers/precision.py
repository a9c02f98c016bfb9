"""Which arithmetic the local model runs in (``embed.precision``).

``fp32``, ``int8`` and ``bf16`` are taken as they are. ``auto``, the
default since 2026-11-29, picks ``bf16`` where OpenVINO is installed and
the processor was measured to run it faster than float32: one with AMX-BF16
(0.39 of float32's CPU on an Intel Xeon) or an AMD one with AVX-512 BF16
(0.63 on an EPYC, family 26). Its vectors are float32's to cosine 0.99997
and it keeps found@200 of every corpus in ``bench/retrieval.py`` within
0.01 of float32 (docs/benchmarks.md, "Time to dense"). An Intel processor
with AVX-512 BF16 but no AMX is not such a processor: on an Intel Xeon
(family 6, model 207) whose hypervisor hides AMX, OpenVINO's AVX-512 BF16
kernels took 1.64 times float32's CPU (docs/benchmarks.md, session 22), so
there, and everywhere else, ``auto`` is ``fp32``. ``int8`` (onnxruntime's
dynamic quantization) is faster still but lost 0.02 found@200 on Python,
so ``auto`` never picks it. ``bf16-int8`` (OpenVINO with int8 weights in
the dense layers and inputs quantized per 128 channels of a token) took
0.80-0.86 of bf16's CPU on that EPYC (AVX-512 BF16 and VNNI, no AMX; 0.77
on a Zen 4 EPYC, family 25, session 27) and
kept found@200 of the default ranking within 0.01 of float32 on every
corpus (docs/benchmarks.md, session 24), so ``auto`` picks it on an AMD
processor with both. With AMX (an Intel Xeon, family 6, model 207, with
AMX-BF16 and AMX-INT8) it took 1.02-1.15 times bf16's CPU, and no group size of
the inputs' quantization (32, 128, a whole token, none) made it cheaper than
bf16 (docs/benchmarks.md, session 26), so there ``auto`` stays ``bf16``.
Nor does static int8 pay there (activations quantized too, by NNCF's
post-training quantization, so that the dense layers run on AMX-INT8): 0.85
to 1.01 of bf16's CPU, with short texts' vectors further from float32's
(cosine 0.988 at worst with the attention left at bf16, 0.77 without), so
it is not offered (docs/benchmarks.md, session 31).
The choice is made when the embedder is chosen
and is recorded with the vectors through the model's name, so an index
keeps the precision it was built with wherever it is served from
(docs/configuration.md).

Kept apart from ``corpus.providers.local`` so that the registry can name the
configured model without importing numpy, tokenizers and safetensors.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PRECISIONS = ("fp32", "int8", "bf16", "bf16-int8")
SETTINGS = ("auto", *PRECISIONS)
#: /proc/cpuinfo flags of the bfloat16 dot-product instructions OpenVINO uses
BF16_DOT_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
#: the /proc/cpuinfo vendor whose AVX-512 BF16 (without AMX) ran bf16 faster than float32
BF16_AVX512_VENDORS = frozenset({"AuthenticAMD"})
#: the flags with which such a processor ran bf16-int8 faster than bf16 (an AMD EPYC, family 26;
#: with AMX it was slower than bf16: docs/benchmarks.md, session 26)
BF16_INT8_FLAGS = frozenset({"avx512_bf16", "avx512_vnni"})
CPUINFO = Path("/proc/cpuinfo")


def onnx_available() -> bool:
    """Whether the onnx backend can run here (onnxruntime and onnx importable)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def openvino_available() -> bool:
    """Whether OpenVINO, which runs the graph at bf16, is importable."""
    return importlib.util.find_spec("openvino") is not None


def _first_processor(cpuinfo: Path) -> dict[str, str]:
    """The first processor's ``name: value`` lines of ``cpuinfo`` (empty where it cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The first processor's feature flags (empty where there is no /proc/cpuinfo)."""
    return frozenset(_first_processor(cpuinfo).get("flags", "").split())


def cpu_vendor(cpuinfo: Path = CPUINFO) -> str:
    """The first processor's ``vendor_id`` (``GenuineIntel``, ``AuthenticAMD``; empty where unknown)."""
    return _first_processor(cpuinfo).get("vendor_id", "")


def bf16_pays(flags: frozenset[str], vendor: str) -> bool:
    """Whether OpenVINO's bf16 was measured faster than float32 on such a processor (module docstring)."""
    return "amx_bf16" in flags or ("avx512_bf16" in flags and vendor in BF16_AVX512_VENDORS)


def bf16_int8_pays(flags: frozenset[str], vendor: str) -> bool:
    """Whether bf16-int8 was measured faster than bf16, and as accurate as
    float32 by found@200, on such a processor (module docstring)."""
    return BF16_INT8_FLAGS <= flags and "amx_bf16" not in flags and vendor in BF16_AVX512_VENDORS


def choose_precision(
    setting: str, flags: frozenset[str], *, vendor: str = "", onnx: bool = True, openvino: bool = True
) -> str:
    """``setting`` (``auto``, ``fp32``, ``int8``, ``bf16`` or ``bf16-int8``) as
    the precision to run on a processor with these ``flags`` from this ``vendor``."""
    if setting not in SETTINGS:
        raise ValueError(f"precision must be one of {', '.join(SETTINGS)}, not {setting!r}")
    if setting != "auto":
        return setting
    if not (onnx and openvino and bf16_pays(flags, vendor)):
        return "fp32"
    return "bf16-int8" if bf16_int8_pays(flags, vendor) else "bf16"


def resolve_precision(setting: str) -> str:
    """``setting`` as the precision to run on this processor."""
    if setting != "auto":
        return choose_precision(setting, frozenset())
    return choose_precision(
        setting, cpu_flags(), vendor=cpu_vendor(), onnx=onnx_available(), openvino=openvino_available()
    )
