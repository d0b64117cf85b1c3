#!/bin/bash
# One device call of the issue-22 sweep, fifth session, second machine: the sweep runs in a process
# session of its own (setsid), which the device keeps running between calls on a warm machine
# (/work/.library/device/README.md: a command's other processes are killed when it returns), so no
# JIT build is cut off at a call's limit (the four fa3 sink modules left, ~11 translation units each,
# were killed mid-build at every 10-minute limit by sweep_call.sh). The first call starts it; every
# call waits up to SECONDS for it to finish and copies what it has to $OUT.
# usage: sweep_bg.sh SECONDS [verify args...]
secs=${1:-540}; shift
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh >/dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1
mkdir -p /tmp/v && touch /tmp/v/results.jsonl
echo "call at $(date -u +%T) as uid $(id -u), $(grep -c . /tmp/v/results.jsonl) results on this machine" >> /tmp/v/stderr.log
# (re)start unless a sweep is running or done here (a non-root device user would lose it at return)
if [ ! -f /tmp/v/done ] && ! pgrep -f "attnplan verify --sweep" > /dev/null; then
  prev=""
  for f in bench/logs/h100-2026-11-24b/lease1-results.jsonl bench/logs/h100-2026-11-24b/lease2-results.jsonl \
           bench/logs/h100-2026-11-24d/results-*.jsonl bench/logs/h100-2026-11-25a/results-*.jsonl bench/logs/h100-2026-11-25b/results-*.jsonl \
           bench/logs/h100-2026-11-25c/results-*.jsonl; do [ -f "$f" ] && prev="$prev --resume $f"; done
  setsid nohup bash -c "python -m attnplan verify --sweep --calibrate /tmp/v/tol.yaml \
    --results-log /tmp/v/results.jsonl --resume /tmp/v/results.jsonl $prev \
    --report /tmp/v/report.md $* > /tmp/v/stdout.jsonl 2>> /tmp/v/stderr.log; echo \"exit \$?\" > /tmp/v/done" \
    < /dev/null > /dev/null 2>&1 &
fi
end=$((SECONDS + secs))
while [ ! -f /tmp/v/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
cat /tmp/v/done 2>/dev/null || echo "still running"
for f in results.jsonl stderr.log report.json report.md tol.yaml; do [ -f /tmp/v/$f ] && cp /tmp/v/$f "$OUT/"; done
uptime; free -g | head -2
grep -c . /tmp/v/results.jsonl; tail -4 /tmp/v/stderr.log
grep -o '"outcome": "[a-z-]*"' /tmp/v/results.jsonl | sort | uniq -c
