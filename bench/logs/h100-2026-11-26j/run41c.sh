#!/bin/bash
# Issue 41 item 3 (per-shape decode choice), one device call on a one-GPU H100 (<= 4 min):
#   bash bench/logs/h100-2026-11-26j/run41c.sh
# 1. one ninja over the decode modules the --engine flashinfer plan lists (fa2 tensor-core decode and XQA
#    decode: both decode calls of plan.decode_choice; not 9.0's fa3 prefill, minutes to build, which only
#    test_warmup_runs_both_decode_calls needs: run it with the full GPU suite), 2. the GPU test (both calls
#    and the adapter's pick against the float32 reference on both sides of the boundary), 3. bench/xqa_vs_fa2.py --phase choice
#    (per shape: each call forced and the pick, CUDA-event medians; "within 2 %" per shape and overall).
# Logs under $OUT: build.log, gpu-test.log, choice.log, decode-choice.json.
set -u
OUT=${OUT:-/tmp/out41c}; mkdir -p "$OUT"
t0=$SECONDS
bash .gpu-bundle/install.sh > "$OUT/install.log" 2>&1 || { echo "install failed"; tail -20 "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "install: $((SECONDS - t0)) s"
timeout 150 python3 - > "$OUT/build.log" 2>&1 <<'PY'
import sys, time
sys.path.insert(0, "tests/gpu")
from gpu_common import plan_or_raise
from attnplan.adapter.warmup import plan_modules, prebuild
a = plan_or_raise(dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, page_size=16), "flashinfer",
                  lambda a: a.plan.decode_choice is not None, "a per-shape decode choice")
c = a.plan.decode_choice
print("plan: prefill", a.plan.prefill.call, "decode", a.plan.decode.call, "alternative", c.alternative.call,
      "small", c.small, "large", c.large, "up to", c.small_up_to_kv_tokens, "KV tokens")
mods = [m for m in plan_modules(a.plan) if m.phase == "decode"]   # both decode calls; not 9.0's fa3 prefill
t0 = time.perf_counter(); prebuild(mods)
print(f"prebuilt {len(mods)} decode modules in {time.perf_counter() - t0:.1f}s: {[m.name for m in mods]}")
PY
echo "build exit $? at $((SECONDS - t0)) s"; tail -3 "$OUT/build.log"
timeout 90 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_decode_per_shape_gpu.py -k "not warmup" > "$OUT/gpu-test.log" 2>&1
echo "gpu test exit $? at $((SECONDS - t0)) s"; grep -E "decode choice|passed|failed|skipped|Error" "$OUT/gpu-test.log" | tail -12
remaining=$((230 - (SECONDS - t0)))
[ $remaining -lt 40 ] && remaining=40
timeout $remaining python3 bench/xqa_vs_fa2.py --phase choice --out "$OUT" > "$OUT/choice.log" 2>&1
echo "choice bench exit $? at $((SECONDS - t0)) s"
grep -E '^\||within 2 %|^\{"batch"|Error|xqa_vs_fa2' "$OUT/choice.log" | tail -40
