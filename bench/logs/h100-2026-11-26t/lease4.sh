#!/bin/bash
# Fourth call (nvidia-h100-x2, a fresh machine): bench/decode_steps.py --issue41 --parts general on this tree
# and on the base commit's (.ab-base/, 25be913), alternating, three times each, nothing else running - the
# first run builds the bench's modules (prebuild in decode_steps.py), so round 1 is the warm-up.
#   bash bench/logs/h100-2026-11-26t/lease4.sh SECONDS
secs=${1:-300}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 MAX_JOBS=32 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
B=/tmp/bench; mkdir -p $B
for r in 1 2 3; do
  for tree in new base; do
    left=$((secs - (SECONDS - t0) - 3)); [ $left -gt 15 ] || break 2
    if [ $tree = new ]; then root=$PWD; else root=$PWD/.ab-base; fi
    (cd $root && PYTHONPATH=/tmp/site:$root timeout $left python3 bench/decode_steps.py --issue41 --parts general \
      --out $B/$tree$r > $B/$tree$r.log 2>&1)
    echo "== $tree $r: exit $? at $((SECONDS - t0)) s"
    grep -h "^|" $B/$tree$r/decode-steps.md 2> /dev/null | tail -6 | cut -d'|' -f2,4-7,8,11; tail -1 $B/$tree$r.log
  done
done
for f in $B/*.log; do echo "##### $f"; cat $f; done > $OUT/bench-all.log
for d in $B/*/; do echo "##### $d"; cat $d/decode-steps-general.json 2> /dev/null; done > $OUT/bench-general.json
