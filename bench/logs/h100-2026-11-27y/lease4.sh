#!/bin/bash
# Fourth call, on lease3.sh's machine while still warm (its JIT cache kept): bench/adapter_ab.py with the timer's
# order now the rotations and their reverses (xqa_vs_fa2.host_only_each), alone on the host: the control (this tree
# against itself) first, then against 7748afb's adapter (.ab-base, carried as in lease1.sh).
#   bash bench/logs/h100-2026-11-27y/lease4.sh
. bench/logs/h100-2026-11-27x/preamble.sh
for base in control ab-base; do
  dir=.ab-base; [ $base = control ] && dir=.
  CUDA_VISIBLE_DEVICES=0 MAX_JOBS=16 timeout 110 python3 bench/adapter_ab.py --base $dir --suites fa2,mla-fa2,mla-fa3 \
    --json $OUT/adapter-ab-$base.json > $OUT/adapter-ab-$base.log 2>&1
  echo "== adapter_ab --base $dir: exit $? at $SECONDS s"
done
