#!/bin/bash
# One device call of the fifth session's diagnosis (diagnose.py), run as sweep_bg.sh runs the
# sweep: in a process session of its own, so a call's limit never cuts a JIT build; every call
# waits up to SECONDS and copies what there is to $OUT.   usage: diag_call.sh SECONDS
secs=${1:-540}
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh >/dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1
mkdir -p /tmp/d
if [ ! -f /tmp/d/done ] && ! pgrep -f "diagnose.py" > /dev/null; then
  setsid nohup bash -c "python bench/logs/h100-2026-11-25c/diagnose.py bench/logs/h100-2026-11-25c/findings.jsonl /tmp/d/diag.jsonl --jobs 8 --timeout 90 \
    > /tmp/d/diag.log 2>&1; echo \"exit \$?\" > /tmp/d/done" < /dev/null > /dev/null 2>&1 &
fi
end=$((SECONDS + secs))
while [ ! -f /tmp/d/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
cat /tmp/d/done 2>/dev/null || echo "still running"
cp /tmp/d/diag.jsonl /tmp/d/diag.log "$OUT/" 2>/dev/null
uptime; cat /tmp/d/diag.log | cut -c1-250
