#!/bin/bash
# One device call of the build-cost measurement (bench/sweep_cost.py measure): started once in a
# process session of its own (setsid: it survives a call's end on a warm machine, as sweep_bg.sh
# in ../h100-2026-11-25c), every call waits up to SECONDS and copies what it has to $OUT.
# usage: cost_bg.sh SECONDS [sweep_cost.py measure args...]
secs=${1:-540}; shift
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh >/dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD FLASHINFER_WORKSPACE_BASE=/tmp/ficost PYTHONUNBUFFERED=1
mkdir -p /tmp/c
if [ ! -f /tmp/c/done ] && ! pgrep -f "sweep_cost.py measure" > /dev/null; then
  rm -rf /tmp/ficost
  setsid nohup bash -c "python bench/sweep_cost.py measure --out /tmp/c/cost.jsonl $* 2>> /tmp/c/stderr.log; \
    echo \"exit \$?\" > /tmp/c/done" < /dev/null > /dev/null 2>&1 &
fi
end=$((SECONDS + secs))
while [ ! -f /tmp/c/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
cat /tmp/c/done 2>/dev/null || echo "still running"
for f in cost.jsonl stderr.log; do [ -f /tmp/c/$f ] && cp /tmp/c/$f "$OUT/"; done
uptime; nproc; lscpu | grep -E "^Model name|^Thread|^Core|^Socket" 
tail -5 /tmp/c/stderr.log
