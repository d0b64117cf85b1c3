#!/bin/bash
# Issue 38's lease (started by bench/sweep_lease.sh SECONDS -- bash bench/logs/h100-2026-11-25f/run.sh):
# the exhaustive XQA run (bench/xqa_exhaustive.py, tiers in priority order: 0 refused modules that
# confirm xqa.group check 4, 1-2 fp8 KV, 3 fp8 speculative, 4 16-bit KV) until its deadline, then
# `attnplan verify --sample` (uniform over the accepted space) until its own. One JIT cache
# ($FLASHINFER_WORKSPACE_BASE, set by sweep_lease.sh), everything under /tmp/lease.
here=/tmp/lease
touch $here/sample.jsonl
python3 bench/xqa_exhaustive.py --out $here --tiers ${TIERS:-0,1,2,3,4,5} --jobs ${JOBS:-16} --build-jobs 2 \
  --deadline ${XDEADLINE:-950} --resume $here/results.jsonl
echo "exhaustive exit $? at $(date -u +%T)" >&2
python3 -m attnplan verify --sample ${SAMPLE:-24} --seed 38 --jobs ${SJOBS:-12} --build-jobs 3 \
  --deadline ${SDEADLINE:-150} --build-timeout 300 --results-log $here/sample.jsonl --resume $here/sample.jsonl \
  --report $here/sample.md > $here/sample_stdout.jsonl
echo "sample exit $? at $(date -u +%T)" >&2
