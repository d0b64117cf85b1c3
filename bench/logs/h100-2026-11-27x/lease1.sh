#!/bin/bash
# First call (a fresh 2-GPU host): the GPU test files whose modules prebuild_all.py names under adapter, mla, general
# and variants - built first with every core - then those files (and the fa3 e5m2 + NVFP4 file, which builds its own)
# two at a time, one a GPU.
#   bash bench/logs/h100-2026-11-27x/lease1.sh SECONDS
secs=${1:-570}
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
MAX_JOBS=$(nproc) timeout 330 python3 tests/gpu/prebuild_all.py adapter mla general variants > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
GPU_FILES="test_adapter_variants_gpu test_adapter_gpu test_adapter_mla_gpu test_general_replay_gpu
 test_fa3_e5m2_and_nvfp4_decode_gpu test_mla_prefill_replay_gpu" MAX_JOBS=16 \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
