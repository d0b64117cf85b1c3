#!/bin/bash
# Fourth call (a fresh 2-GPU host), the kept KV-length buffer handed the step's own tensor (the refill's copy gone):
# the modules of the adapter, MLA and general-replay tests prebuilt with every core; those four files, two at a
# time; then, alone on the host, bench/adapter_ab.py against 39d0eb9's adapter (.ab-base-fill: this change alone)
# and against 594d46c's (.ab-base: the session before last's final tree), and prof_step.py. Both bases carried,
# not in the repository.
#   bash bench/logs/h100-2026-11-27x/lease4.sh SECONDS
secs=${1:-540}
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
MAX_JOBS=$(nproc) timeout 260 python3 tests/gpu/prebuild_all.py adapter mla general > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
GPU_FILES="test_adapter_gpu test_general_replay_gpu test_mla_prefill_replay_gpu test_adapter_mla_gpu" MAX_JOBS=16 \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0) - 150))
for base in fill ab-base; do
  dir=.ab-base; [ $base = fill ] && dir=.ab-base-fill
  CUDA_VISIBLE_DEVICES=0 MAX_JOBS=16 timeout 90 python3 bench/adapter_ab.py --base $dir \
    --json $OUT/adapter-ab-$base.json > $OUT/adapter-ab-$base.log 2>&1
  echo "== adapter_ab --base $dir: exit $? at $((SECONDS - t0)) s"
done
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=16 timeout $((secs - (SECONDS - t0) - 5)) \
  python3 bench/logs/h100-2026-11-27w/prof_step.py --profile > $OUT/prof_step.log 2>&1
echo "== prof_step: exit $? at $((SECONDS - t0)) s"
grep -h "^|" $OUT/prof_step.log | head -12
