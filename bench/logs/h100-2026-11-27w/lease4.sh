#!/bin/bash
# Fourth call (a fresh 4 x H100 host), this session's final adapter (the replay's program made once per binding,
# the event calls through torch's C base): 1. the JIT modules of the benches and of the adapter, MLA and
# general-replay tests, all cores; 2. bench/adapter_ab.py --base .ab-base (594d46c's adapter, carried, not in the
# repository; GPU 0, cores 0-7; the trees' order alternating by round), while 3. the GPU test queue takes GPUs 1-3:
# the files of call 2 again (the replay changed since) and the three not yet run this session.
#   bash bench/logs/h100-2026-11-27w/lease4.sh SECONDS
secs=${1:-570}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
export PYTHONPATH=/tmp/site:$PWD
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | wc -l) GPUs"
D=bench/logs/h100-2026-11-27w
MAX_JOBS=64 timeout 240 python3 tests/gpu/prebuild_all.py adapter mla general > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
(CUDA_VISIBLE_DEVICES=0 MAX_JOBS=8 timeout 200 taskset -c 0-7 python3 bench/adapter_ab.py --base .ab-base \
  --json $OUT/adapter-ab.json > $OUT/adapter-ab.log 2>&1; echo "== adapter_ab: exit $? at $((SECONDS - t0)) s") &
GPUS="1 2 3" GPU_FILES="test_general_replay_gpu test_mla_prefill_replay_gpu test_adapter_mla_gpu test_adapter_gpu
 test_fa3_e5m2_and_nvfp4_decode_gpu test_adapter_kernel_paths_gpu test_adapter_variants_gpu" MAX_JOBS=16 \
  taskset -c 8-63 bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
wait
grep -h "^|" $OUT/adapter-ab.log | head -60
