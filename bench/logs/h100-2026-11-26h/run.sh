#!/bin/bash
# Issue 38's lease, 2026-11-26 08:xx UTC (started by bench/sweep_lease.sh SECONDS -- bash /tmp/lease/run.sh,
# a copy of this file), run from a clean snapshot of HEAD: exhaustive XQA tier 4 (16-bit KV, q_len 1:
# 1,568 modules), then tier 5 (16-bit KV speculative) as far as the lease goes. /tmp/lease/results.jsonl
# is seeded with bench/logs/h100-2026-11-26g/results.jsonl (tiers 0-3), so the file covers every tier.
# One JIT cache ($FLASHINFER_WORKSPACE_BASE, set by sweep_lease.sh), everything under /tmp/lease.
here=/tmp/lease
J=${JOBS:-$(nproc)}
python3 bench/xqa_exhaustive.py --out $here --tiers 4 --jobs $J --build-jobs 2 --resume $here/results.jsonl
echo "tier 4 exit $? at $(date -u +%T)" >&2
python3 bench/xqa_exhaustive.py --out $here --tiers 5 --jobs $J --build-jobs 2 --resume $here/results.jsonl
echo "tier 5 exit $? at $(date -u +%T)" >&2
