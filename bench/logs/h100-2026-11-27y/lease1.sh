#!/bin/bash
# First call of the fifteenth session (a 2-GPU host): an MLA prefill step without context brings no context parts
# (36d127a) on top of 47222a2's has-context change. The modules of the adapter, MLA and general-replay tests prebuilt
# with every core; then, alone on the host, prof_mla.py (where an MLA prefill step's host time goes) and
# bench/adapter_ab.py against 7748afb's adapter (.ab-base: the last tree measured, stop 57), fa2 and both MLA suites;
# then the two MLA GPU test files, one a GPU. .ab-base carried, not in the repository (HEAD's attnplan with 7748afb's
# attnplan/adapter: git archive HEAD attnplan | tar -x -C .ab-base; rm -r .ab-base/attnplan/adapter;
# git archive 7748afb attnplan/adapter | tar -x -C .ab-base).
#   bash bench/logs/h100-2026-11-27y/lease1.sh SECONDS
secs=${1:-540}
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
MAX_JOBS=$(nproc) timeout 260 python3 tests/gpu/prebuild_all.py adapter mla general > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=16 timeout 120 python3 bench/logs/h100-2026-11-27y/prof_mla.py --profile \
  > $OUT/prof_mla.log 2>&1
echo "== prof_mla: exit $? at $((SECONDS - t0)) s"
grep -h "^|" $OUT/prof_mla.log
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=16 timeout 150 python3 bench/adapter_ab.py --base .ab-base --suites fa2,mla-fa2,mla-fa3 \
  --json $OUT/adapter-ab.json > $OUT/adapter-ab.log 2>&1
echo "== adapter_ab --base .ab-base: exit $? at $((SECONDS - t0)) s"
GPU_FILES="test_mla_prefill_replay_gpu test_adapter_mla_gpu" MAX_JOBS=16 \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
