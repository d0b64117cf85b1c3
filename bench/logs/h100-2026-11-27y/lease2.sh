#!/bin/bash
# Second call (a fresh 2-GPU host), attnplan/ as in call 1 (36d127a): bench/adapter_ab.py with FlashInfer's arm on
# wrappers of its own (call 1's A/B had this tree 4-10 µs slower on steps whose code the two trees share), alone on
# the host: against 7748afb's adapter (.ab-base, as call 1) and against this tree itself (--base .: the control,
# whose difference is the comparison's own bias); the modules of the adapter, MLA, general-replay and variants tests
# prebuilt first with every core; then GPU test files, one a GPU, as long as the call lasts (gpu_queue.sh: lease3.sh
# on the same warm machine runs those left). .ab-base carried as in lease1.sh.
#   bash bench/logs/h100-2026-11-27y/lease2.sh SECONDS
secs=${1:-560}
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
MAX_JOBS=$(nproc) timeout 300 python3 tests/gpu/prebuild_all.py adapter mla general variants > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
for base in ab-base control; do
  dir=.ab-base; [ $base = control ] && dir=.
  CUDA_VISIBLE_DEVICES=0 MAX_JOBS=16 timeout 120 python3 bench/adapter_ab.py --base $dir --suites fa2,mla-fa2,mla-fa3 \
    --json $OUT/adapter-ab-$base.json > $OUT/adapter-ab-$base.log 2>&1
  echo "== adapter_ab --base $dir: exit $? at $((SECONDS - t0)) s"
done
GPU_FILES="test_adapter_gpu test_general_replay_gpu test_adapter_variants_gpu test_decode_graphs_gpu
 test_adapter_kernel_paths_gpu test_fa3_e5m2_and_nvfp4_decode_gpu test_layer_groups_gpu test_steady_step_gpu
 test_decode_per_shape_gpu test_fp8_query_gpu test_verify_gpu test_sink_jit_name_gpu" MAX_JOBS=16 \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
