#!/bin/bash
# Fourth call (nvidia-h100-x1, the budget's last ~300 s): the staging release by stream index, re-timed:
# prof_meta.py and bench/decode_steps.py --issue41 --parts general on this tree.
#   bash bench/logs/h100-2026-11-26r/lease4.sh SECONDS
secs=${1:-240}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | head -1)"
timeout 60 python3 bench/logs/h100-2026-11-26r/prof_meta.py > $OUT/prof_meta.log 2>&1
echo "prof_meta exit $? at $((SECONDS - t0)) s"; grep "build_step" $OUT/prof_meta.log
timeout $((secs - (SECONDS - t0) - 5)) python3 bench/decode_steps.py --issue41 --parts general --out $OUT > $OUT/steps.log 2>&1
echo "decode_steps general exit $? at $((SECONDS - t0)) s"
grep -h "^|" $OUT/decode-steps.md 2> /dev/null | cut -c1-500; tail -2 $OUT/steps.log
