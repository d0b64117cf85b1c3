#!/bin/bash
# Third call (a fresh 2-GPU host): the benches' modules prebuilt with every core, then bench/adapter_ab.py --base
# .ab-base (594d46c's attnplan/adapter, carried, not in the repository) alone on a quiet host - GPU 0, nothing else
# running - then prof_step.py (this tree's step, its parts timed and a cProfile), alone too.
#   bash bench/logs/h100-2026-11-27x/lease3.sh SECONDS
secs=${1:-480}
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
MAX_JOBS=$(nproc) timeout 280 python3 tests/gpu/prebuild_all.py adapter mla general > $OUT/prebuild.log 2>&1
echo "== prebuild: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
left=$((secs - (SECONDS - t0)))
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=16 timeout $((left * 2 / 3)) python3 bench/adapter_ab.py --base .ab-base \
  --json $OUT/adapter-ab.json > $OUT/adapter-ab.log 2>&1
echo "== adapter_ab: exit $? at $((SECONDS - t0)) s"
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=16 timeout $((secs - (SECONDS - t0) - 5)) \
  python3 bench/logs/h100-2026-11-27w/prof_step.py --profile > $OUT/prof_step.log 2>&1
echo "== prof_step: exit $? at $((SECONDS - t0)) s"
grep -h "^|" $OUT/adapter-ab.log | head -40
grep -h "^|" $OUT/prof_step.log | head -12
