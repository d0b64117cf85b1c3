"""bench/probe_variants.py on the CPU (--list): one probe per one-factor variant, each the plan's own call and JIT
module, judged by the kernel rules per (backend, phase) as the sample and the sweep judge a probe (issue 38)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = {"dtype": "fp16", "kv_cache_dtype": "nvfp4", "page_size": 256, "sliding_window": 128, "logits_soft_cap": 30.0,
        "sinks": False, "num_speculative_tokens": 3, "head_dim": 64, "num_qo_heads": 57, "num_kv_heads": 1}


def _list(out: Path, *vary: str) -> list[dict]:
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "probe_variants.py"), "--out", str(out), "--list",
                        "--backend", "fa2", "--phase", "decode", "--q-lens", "4,4", "--kv-lens", "301,4097",
                        "--config", json.dumps(BASE), *(f"--vary={v}" for v in vary)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()]


def test_one_probe_per_changed_value_with_the_plans_call_module_and_the_rules_verdict(tmp_path):
    rows = _list(tmp_path, "num_qo_heads=8,57,64", "num_speculative_tokens=0", "head_dim=128", "shape=short")
    by = {r["variant"]: r for r in rows}
    # the base's own value is not a variant; every other value is one probe with that field alone changed
    assert list(by) == ["base", "num_qo_heads=8", "num_qo_heads=64", "num_speculative_tokens=0", "head_dim=128",
                        "shape=short"]
    assert by["num_qo_heads=8"]["config"] == {**BASE, "num_qo_heads": 8}
    # the draft-token variant's query length follows it; shape=short is one request of 37 tokens
    assert by["num_speculative_tokens=0"]["q_lens"] == [1, 1] and by["num_speculative_tokens=0"]["call"] == "paged_decode"
    assert by["shape=short"]["q_lens"] == [4] and by["shape=short"]["kv_lens"] == [37]
    assert by["base"]["module"] == "prefill:fa2:float16:nvfp4:float16:64x64:swa=True:cap=True"
    assert by["head_dim=128"]["module"].endswith("128x128:swa=True:cap=True")
    # judged per (backend, phase) by the kernel rules: the measured wrong side is refused now, q_len 1 accepted
    assert by["base"]["rules"] == "refused: kv.nvfp4-head64-wide-tile"
    assert by["num_speculative_tokens=0"]["rules"] == "accepted" and by["head_dim=128"]["rules"] == "accepted"
