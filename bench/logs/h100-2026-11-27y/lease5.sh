#!/bin/bash
# Fifth call, a fresh one-H100 machine (16 cores; nvidia-h100-x1 gets no H200): lease4.sh's two A/Bs on an H100
# host, the fa2 and MLA fa2 suites (each builds its modules first: fa3's would take most of the call).
#   bash bench/logs/h100-2026-11-27y/lease5.sh
. bench/logs/h100-2026-11-27x/preamble.sh
for base in control ab-base; do
  dir=.ab-base; [ $base = control ] && dir=.
  MAX_JOBS=$(nproc) timeout 300 python3 bench/adapter_ab.py --base $dir --suites fa2,mla-fa2 \
    --json $OUT/adapter-ab-$base.json > $OUT/adapter-ab-$base.log 2>&1
  echo "== adapter_ab --base $dir: exit $? at $SECONDS s"
done
