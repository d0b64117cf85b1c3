#!/bin/bash
# One device call of the issue-22 sweep (2026-11-25, fifth session): the sweep runs in the
# foreground, one process per JIT module, until `timeout` stops it (SIGTERM: it kills its probe
# processes); every finished probe is already in /tmp/v/results.jsonl, which the next call on the
# same warm machine resumes from (and the JIT cache in /tmp/fi keeps what was built, ninja resumes
# half-built modules). The repo's earlier results (…-24b, …-24d, …-25a, …-25b, …-25c) are resumed too.
# usage: sweep_call.sh SECONDS [verify args...]
secs=${1:-540}; shift
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh >/dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1
mkdir -p /tmp/v && touch /tmp/v/results.jsonl
prev=""
for f in bench/logs/h100-2026-11-24b/lease1-results.jsonl bench/logs/h100-2026-11-24b/lease2-results.jsonl \
         bench/logs/h100-2026-11-24d/results-*.jsonl bench/logs/h100-2026-11-25a/results-*.jsonl bench/logs/h100-2026-11-25b/results-*.jsonl \
         bench/logs/h100-2026-11-25c/results-*.jsonl; do [ -f "$f" ] && prev="$prev --resume $f"; done
echo "call at $(date -u +%T), $(grep -c . /tmp/v/results.jsonl) results on this machine" >> /tmp/v/stderr.log
timeout -s TERM "$secs" python -m attnplan verify --sweep --calibrate /tmp/v/tol.yaml \
  --results-log /tmp/v/results.jsonl --resume /tmp/v/results.jsonl $prev \
  --report /tmp/v/report.md "$@" > /tmp/v/stdout.jsonl 2>> /tmp/v/stderr.log
echo "exit $?"
for f in results.jsonl stderr.log report.json report.md tol.yaml; do [ -f /tmp/v/$f ] && cp /tmp/v/$f "$OUT/"; done
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader; free -g | head -2
grep -c . /tmp/v/results.jsonl; tail -3 /tmp/v/stderr.log
grep -o '"outcome": "[a-z-]*"' /tmp/v/results.jsonl | sort | uniq -c
