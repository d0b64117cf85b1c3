#!/bin/bash
# Second call (a fresh 2-GPU host): the other GPU test files - modules of graphs and new_paths prebuilt first with
# every core, then the files two at a time, one a GPU (layer groups, fp8 query, sink, verify build their own).
#   bash bench/logs/h100-2026-11-27x/lease2.sh SECONDS
secs=${1:-570}
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
MAX_JOBS=$(nproc) timeout 300 python3 tests/gpu/prebuild_all.py graphs new_paths > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
GPU_FILES="test_adapter_kernel_paths_gpu test_decode_graphs_gpu test_fp8_query_gpu test_layer_groups_gpu
 test_steady_step_gpu test_decode_per_shape_gpu test_verify_gpu test_sink_jit_name_gpu" MAX_JOBS=16 \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
