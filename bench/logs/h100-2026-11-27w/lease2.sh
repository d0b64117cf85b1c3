#!/bin/bash
# Second call (a fresh 4 x H100 host): this session's tree (host_step.c inside host_torch.cpp's one call, -O3, the
# replay's attributes in one update) against 594d46c's adapter, carried in .ab-base/ (not in the repository).
# 1. the JIT modules of the adapter, MLA and general-replay GPU tests, all cores (they include every module the
#    benches below need); 2. bench/adapter_ab.py --base .ab-base (GPU 0, cores 0-7, nothing else running):
#    both trees' plan_step in one process, call by call; 3. prof_step.py --profile (GPU 0) and bench/decode_steps.py
#    --issue41 --parts general (GPU 1, cores 8-15) side by side; 4. the GPU test queue over the changed step path
#    (general replay, MLA prefill replay, MLA adapter, adapter) on all GPUs for the time left.
#   bash bench/logs/h100-2026-11-27w/lease2.sh SECONDS
secs=${1:-560}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
export PYTHONPATH=/tmp/site:$PWD
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | wc -l) GPUs"
D=bench/logs/h100-2026-11-27w
MAX_JOBS=64 timeout 240 python3 tests/gpu/prebuild_all.py adapter mla general > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=8 timeout 150 taskset -c 0-7 python3 bench/adapter_ab.py --base .ab-base \
  --json $OUT/adapter-ab.json > $OUT/adapter-ab.log 2>&1
echo "== adapter_ab: exit $? at $((SECONDS - t0)) s"
(CUDA_VISIBLE_DEVICES=1 MAX_JOBS=8 timeout 120 taskset -c 8-15 python3 bench/decode_steps.py --issue41 \
  --parts general --out /tmp/bench/g1 > $OUT/decode-steps-general.log 2>&1; echo "== general: exit $? at $((SECONDS - t0)) s"
  cp /tmp/bench/g1/decode-steps-general.json $OUT/ 2> /dev/null) &
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=8 timeout 120 taskset -c 0-7 python3 $D/prof_step.py --profile > $OUT/prof_step.log 2>&1
echo "== prof_step: exit $? at $((SECONDS - t0)) s"
wait
GPU_FILES="test_general_replay_gpu test_adapter_gpu test_adapter_mla_gpu test_mla_prefill_replay_gpu" \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
grep -h "^|" $OUT/adapter-ab.log | head -40
