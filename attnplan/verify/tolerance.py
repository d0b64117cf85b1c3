"""How close a correct kernel comes to the float32 reference: one family for every KV dtype.

The reference (calls.reference) reads the *same* cache the kernel reads, dequantized (fp8 as
stored, nvfp4 as e2m1 codes times their block scales), and quantizes the query where the kernel
does (``query_quantized_to``): XQA over an fp8 cache converts Q to e4m3 before its MMA
(csrc/xqa/mha.cu and mha_sm90.cu: ``needInputCvt``), fa3 with an fp8 query reads it as given.
What is left is the kernel's own rounding (bf16/fp16 output, fp8 P where the kernel keeps P in
the cache type, accumulation order): its *spread*, measured per kernel on the GPU and kept as
data in attnplan/rules/verify_tolerances.yaml beside the threshold. A probe whose relative error
(max |out - ref| / max |ref|) exceeds FACTOR x the kernel's spread is wrong; an uncalibrated
kernel gets the floor of its output dtype (half an ulp) as its spread.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from .call_facts import facts

DATA = Path(__file__).resolve().parent.parent / "rules" / "verify_tolerances.yaml"


_PATH = [str(DATA)]


def use(path: str) -> None:
    """Judge by another table (``attnplan verify --tolerances``)."""
    _PATH[0] = str(path)


def table() -> dict[str, Any]:
    return _load(_PATH[0])


@functools.cache
def _load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def kernel_key(spec: dict[str, Any]) -> str:
    """One kernel: backend, call (tensor-core decode is another kernel), query and cache dtype."""
    call = spec["call"] + (":tc" if facts(spec["call"]).tensor_core_kernel and spec.get("use_tensor_cores") else "")
    q = spec.get("quantize_query") or spec["query_dtype"]
    return f"{spec['backend']}:{call}:q={q}:kv={spec['kv_view_dtype']}"


def query_quantized_to(spec: dict[str, Any]) -> str | None:
    """The dtype the kernel converts the query to before its first MMA, when it does."""
    if facts(spec["call"]).query_to_fp8_over_fp8_kv and str(spec["kv_view_dtype"]).startswith("float8"):
        return "float8_e4m3fn"
    return None


def floor(output_dtype: str, data: dict[str, Any] | None = None) -> float:
    data = data or table()
    return float(data["floor"].get(output_dtype, data["floor"]["bfloat16"]))


def spread(key: str, output_dtype: str = "bfloat16", data: dict[str, Any] | None = None) -> float:
    data = data or table()
    rec = (data.get("spreads") or {}).get(key)
    measured = float(rec["spread"]) if rec and not rec.get("suspect") else 0.0
    return max(measured, floor(output_dtype, data))


def tolerance(key: str, output_dtype: str = "bfloat16", data: dict[str, Any] | None = None) -> float:
    data = data or table()
    return float(data["factor"]) * spread(key, output_dtype, data)


def calibrate(results: list[tuple[str, float]], data: dict[str, Any], *, device: str, flashinfer: str,
              date: str) -> dict[str, Any]:
    """A new table: each kernel's spread is the largest relative error its calibration probes
    (correct configs the kernel is known to run) showed, with how many and where."""
    out = {k: v for k, v in data.items() if k != "spreads"}
    spreads: dict[str, Any] = {}
    for key, err in results:
        rec = spreads.setdefault(key, {"spread": 0.0, "probes": 0, "device": device, "flashinfer": flashinfer,
                                       "date": date})
        rec["spread"] = max(rec["spread"], float(err))
        rec["probes"] += 1
    for rec in spreads.values():
        rec["spread"] = float(f"{rec['spread']:.3g}")
        rec["threshold"] = float(f"{rec['spread'] * float(data['factor']):.3g}")
        if rec["spread"] > float(data.get("max_spread", 0.05)):
            # Far beyond any rounding: the calibration config itself computes wrong. Not a spread
            # to judge others by (they keep the floor); the sweep reports that config as dangerous.
            rec["suspect"] = True
    out["spreads"] = dict(sorted(spreads.items()))
    return out
