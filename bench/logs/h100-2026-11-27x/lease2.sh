#!/bin/bash
# Second call (a fresh 2-GPU host), after call 1's MLA prefill replay failure and its fix (39d0eb9): the modules of
# graphs, new_paths and mla prebuilt with every core; then the failed file again on GPU 1 with call 1's seed
# (ATTNPLAN_GPU_SEED=1025694970) beside the queue of the other GPU test files - that file once more with a fresh
# seed among them - two at a time, one a GPU (layer groups, fp8 query, sink, verify build their own modules).
#   bash bench/logs/h100-2026-11-27x/lease2.sh SECONDS
secs=${1:-570}
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
MAX_JOBS=$(nproc) timeout 300 python3 tests/gpu/prebuild_all.py graphs new_paths mla > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
(ATTNPLAN_GPU_SEED=1025694970 CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu \
  tests/gpu/test_mla_prefill_replay_gpu.py > $OUT/mla-replay-seed-1025694970.log 2>&1
 echo "== MLA prefill replay, call 1's seed: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/mla-replay-seed-1025694970.log)") &
GPU_FILES="test_mla_prefill_replay_gpu test_decode_graphs_gpu test_adapter_kernel_paths_gpu test_fp8_query_gpu
 test_sink_jit_name_gpu test_layer_groups_gpu test_steady_step_gpu test_decode_per_shape_gpu test_verify_gpu" \
  MAX_JOBS=16 bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
wait
