#!/bin/bash
# Third call, on lease2.sh's machine while still warm (its JIT cache and gpu_queue.sh's /tmp/q kept): the modules of
# the decode-graph and kernel-path tests prebuilt with every core, then the GPU test files lease2.sh did not finish.
#   bash bench/logs/h100-2026-11-27y/lease3.sh SECONDS
secs=${1:-560}
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
MAX_JOBS=$(nproc) timeout 240 python3 tests/gpu/prebuild_all.py graphs new_paths > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
GPU_FILES="test_adapter_gpu test_general_replay_gpu test_adapter_variants_gpu test_decode_graphs_gpu
 test_adapter_kernel_paths_gpu test_fa3_e5m2_and_nvfp4_decode_gpu test_layer_groups_gpu test_steady_step_gpu
 test_decode_per_shape_gpu test_fp8_query_gpu test_verify_gpu test_sink_jit_name_gpu" MAX_JOBS=16 \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
