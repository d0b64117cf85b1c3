#!/bin/bash
# Third call (a fresh 4 x H100 host), this session's final adapter: 1. the JIT modules of the benches and of the
# decode-graph tests, all cores; 2. bench/adapter_ab.py --base .ab-base (594d46c's adapter, carried, not in the
# repository; GPU 0, cores 0-7; the trees' order alternating by round) beside prof_step.py --profile (GPU 1, cores
# 8-15); 3. the GPU test files not run in call 2 (the decode-only and layered paths: their warm-up steps and
# prefill steps go through the changed from_host), on all GPUs for the time left; call 4 takes the rest.
#   bash bench/logs/h100-2026-11-27w/lease3.sh SECONDS
secs=${1:-560}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
export PYTHONPATH=/tmp/site:$PWD
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | wc -l) GPUs"
D=bench/logs/h100-2026-11-27w
MAX_JOBS=64 timeout 260 python3 tests/gpu/prebuild_all.py adapter mla general graphs > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
(CUDA_VISIBLE_DEVICES=1 MAX_JOBS=8 timeout 150 taskset -c 8-15 python3 $D/prof_step.py --profile > $OUT/prof_step.log 2>&1
 echo "== prof_step: exit $? at $((SECONDS - t0)) s") &
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=8 timeout 170 taskset -c 0-7 python3 bench/adapter_ab.py --base .ab-base \
  --json $OUT/adapter-ab.json > $OUT/adapter-ab.log 2>&1
echo "== adapter_ab: exit $? at $((SECONDS - t0)) s"
wait
GPU_FILES="test_decode_graphs_gpu test_steady_step_gpu test_decode_per_shape_gpu test_layer_groups_gpu test_fp8_query_gpu
 test_sink_jit_name_gpu test_verify_gpu" MAX_JOBS=16 bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
grep -h "^|" $OUT/adapter-ab.log | head -60
