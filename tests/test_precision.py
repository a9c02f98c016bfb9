"""``embed.precision: auto``: bf16 where OpenVINO is installed and the
processor was measured to run it faster than float32 (AMX-BF16, or AVX-512
BF16 on AMD), fp32 elsewhere; never int8.

The choice takes the processor's flags and vendor as arguments, so a CPU with and
without AVX-512 BF16/AMX-BF16 is tested here whatever this machine has; the recorded
model is then the chosen precision's, and a recorded precision other than
the configured one is kept until a full reindex (tests/test_embedder_change.py
re-embeds a real index on such a change).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.providers import registry
from corpus.providers.precision import (
    BF16_DOT_FLAGS,
    choose_precision,
    cpu_flags,
    cpu_vendor,
    onnx_available,
    openvino_available,
    resolve_precision,
)
from corpus.providers.registry import EmbedderModels, plan_embedder
from kernel.config import build_config

AVX2_ONLY = frozenset({"fpu", "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw"})
#: the int8 dot products (VNNI, AMX-INT8) that made auto pick int8 before it failed acceptance
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse4_2 avx avx2 avx512f avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16
bogomips\t: 4800.00

processor\t: 1
flags\t\t: fpu
"""


@pytest.mark.parametrize(
    ("flags", "vendor"),
    [
        (AVX2_ONLY | BF16_DOT_FLAGS, "GenuineIntel"),  # AMX: 0.39 of fp32's CPU on a Xeon
        # AMX with int8 dot products too: bf16-int8 took 1.02-1.15x bf16's CPU there (session 26)
        (AVX2_ONLY | BF16_DOT_FLAGS | INT8_DOT_FLAGS | {"amx_tile"}, "GenuineIntel"),
        (AVX2_ONLY | {"amx_bf16"}, ""),
        (AVX2_ONLY | {"avx512_bf16"}, "AuthenticAMD"),  # 0.63 on an EPYC, family 26
    ],
)
def test_auto_is_bf16_where_bf16_was_measured_faster(flags, vendor):
    assert choose_precision("auto", flags, vendor=vendor) == "bf16"


@pytest.mark.parametrize("vnni", [{"avx512_vnni"}, INT8_DOT_FLAGS - {"amx_int8"}])
def test_auto_is_bf16_int8_on_amd_with_avx512_bf16_and_vnni(vnni):
    # an AMD EPYC, family 26 (Zen 5): 0.80-0.86 of bf16's CPU, found@200 of the
    # default ranking within 0.01 of fp32 on every corpus (docs/benchmarks.md, session 24)
    flags = AVX2_ONLY | {"avx512_bf16"} | vnni
    assert choose_precision("auto", flags, vendor="AuthenticAMD") == "bf16-int8"
    # slower than bf16 with AMX (docs/benchmarks.md, session 26); not measured on
    # Intel's AVX-512 BF16 without AMX (where bf16 itself was slower than fp32)
    assert choose_precision("auto", flags | {"amx_bf16"}, vendor="AuthenticAMD") == "bf16"
    assert choose_precision("auto", flags, vendor="GenuineIntel") == "fp32"


@pytest.mark.parametrize("vendor", ["GenuineIntel", ""])
def test_auto_is_fp32_on_avx512_bf16_without_amx_outside_amd(vendor):
    # an Intel Xeon (family 6, model 207) whose hypervisor hides AMX: bf16 took
    # 1.64 times fp32's CPU there (docs/benchmarks.md, session 22)
    assert choose_precision("auto", AVX2_ONLY | INT8_DOT_FLAGS | {"avx512_bf16"}, vendor=vendor) == "fp32"


@pytest.mark.parametrize("flags", [AVX2_ONLY, AVX2_ONLY | INT8_DOT_FLAGS, frozenset()])
def test_auto_is_fp32_without_one_even_with_an_int8_dot_product(flags):
    # int8 lost 0.02 found@200 on Python (docs/benchmarks.md): auto never picks it
    assert choose_precision("auto", flags) == "fp32"


@pytest.mark.parametrize("missing", [{"onnx": False}, {"openvino": False}])
def test_auto_is_fp32_without_onnx_or_openvino_whatever_the_processor(missing):
    flags = AVX2_ONLY | {"avx512_bf16"} | INT8_DOT_FLAGS
    assert choose_precision("auto", flags, vendor="AuthenticAMD", **missing) == "fp32"


@pytest.mark.parametrize("setting", ["fp32", "int8", "bf16", "bf16-int8"])
@pytest.mark.parametrize("flags", [AVX2_ONLY, INT8_DOT_FLAGS, BF16_DOT_FLAGS])
def test_an_explicit_precision_is_kept_on_any_processor(setting, flags):
    assert choose_precision(setting, flags) == setting


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision"):
        choose_precision("fp16", BF16_DOT_FLAGS)


def test_the_flags_are_the_first_processors(tmp_path: Path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)

    flags = cpu_flags(cpuinfo)

    assert {"avx2", "avx512_bf16", "amx_bf16"} <= flags and "bogomips" not in flags
    assert cpu_vendor(cpuinfo) == "GenuineIntel"
    assert choose_precision("auto", flags, vendor=cpu_vendor(cpuinfo)) == "bf16"
    assert cpu_flags(tmp_path / "missing") == frozenset() and cpu_vendor(tmp_path / "missing") == ""


def auto_here() -> str:
    return choose_precision(
        "auto", cpu_flags(), vendor=cpu_vendor(), onnx=onnx_available(), openvino=openvino_available()
    )


def test_the_configured_model_is_the_precision_chosen_here():
    config = build_config({"embed": {"provider": "local", "precision": "auto"}}, {}, {})
    model = registry.local_model(auto_here())

    choice = plan_embedder(config, secrets_lookup=lambda name: None, recorded=None)

    assert resolve_precision("auto") == auto_here()
    assert choice.as_dict()["active"] == {"provider": "local", "text_model": model, "code_model": model}


def test_an_index_of_the_other_precision_is_kept_until_a_full_reindex():
    config = build_config({"embed": {"provider": "local", "precision": "auto"}}, {}, {})
    other = registry.local_model("int8")
    recorded = EmbedderModels("local", other, other, 384, 384)

    kept = plan_embedder(config, secrets_lookup=lambda name: None, recorded=recorded)
    switching = plan_embedder(config, secrets_lookup=lambda name: None, recorded=recorded, switch=True)

    assert kept.status == registry.KEPT and kept.as_dict()["active"]["text_model"] == other
    assert switching.status == registry.SWITCHING
    assert switching.as_dict()["active"]["text_model"] == registry.local_model(auto_here())


def test_the_default_is_auto_and_fp32_stays_selectable():
    # bf16 where the processor has a bfloat16 dot product: 0.39 of fp32's CPU on
    # AMX, found@200 within 0.01 on every corpus (docs/benchmarks.md, 2026-11-29)
    assert build_config({}, {}, {}).embed.precision == "auto"
    assert build_config({"embed": {"precision": "fp32"}}, {}, {}).embed.precision == "fp32"
