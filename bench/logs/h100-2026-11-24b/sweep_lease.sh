#!/bin/bash
# One device call of a sweep lease (issue 22). First call: copy the tree to /tmp/wt (a later
# call re-sends the tree, which must not pull it from under a running sweep), start the sweep
# detached (setsid: it outlives this call while the machine stays warm) and watch it; later
# calls: watch it again. Its files live under /tmp/v; each call copies them to $OUT.
# usage: sweep_lease.sh WATCH_SECONDS [verify args...]
watch=${1:-560}; shift
mkdir -p /tmp/v
if [ ! -f /tmp/v/started ]; then
  touch /tmp/v/started /tmp/v/results.jsonl
  rm -rf /tmp/wt && cp -r "$PWD" /tmp/wt
  [ -f /tmp/wt/bench/logs/h100-2026-11-24b/lease1-results.jsonl ] && resume="--resume /tmp/wt/bench/logs/h100-2026-11-24b/lease1-results.jsonl"
  (cd /tmp/wt && PYTHONPATH=/tmp/site:/tmp/wt setsid nohup python -m attnplan verify --sweep \
    --results-log /tmp/v/results.jsonl --resume /tmp/v/results.jsonl $resume \
    --report /tmp/v/report.md "$@" > /tmp/v/stdout.jsonl 2> /tmp/v/stderr.log & echo $! > /tmp/v/pid)
fi
t0=$(date +%s)
while kill -0 "$(cat /tmp/v/pid)" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$watch" ]; do sleep 5; done
kill -0 "$(cat /tmp/v/pid)" 2>/dev/null && echo "SWEEP STILL RUNNING" || echo "SWEEP DONE"
for f in results.jsonl stderr.log report.json report.md tol.yaml; do [ -f /tmp/v/$f ] && cp /tmp/v/$f "$OUT/"; done
grep -c . /tmp/v/results.jsonl; tail -4 /tmp/v/stderr.log
grep -o '"outcome": "[a-z-]*"' /tmp/v/results.jsonl | sort | uniq -c
