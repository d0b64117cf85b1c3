#!/bin/bash
# Issue 38's lease, 2026-11-26 (started by bench/sweep_lease.sh SECONDS -- bash /tmp/lease/run.sh, a copy
# of this file): in the brief's priority order, (1) the rest of exhaustive XQA tier 3 (fp8 KV
# speculative), resumed from bench/logs/h100-2026-11-26g/resume.jsonl (= h100-2026-11-25f's results,
# a superset of h200-2026-11-26c's, less 6 RulePackError lines of a pack being edited mid-run);
# (2) the strength-3 covering sweep restricted to the non-XQA backends (XQA's 452 sweep modules are
# inside the exhaustive run); (3) exhaustive tier 4 (16-bit KV) as far as the lease goes.
# One JIT cache ($FLASHINFER_WORKSPACE_BASE, set by sweep_lease.sh), everything under /tmp/lease.
here=/tmp/lease
J=${JOBS:-$(nproc)}
touch $here/sweep.jsonl
python3 bench/xqa_exhaustive.py --out $here --tiers 3 --jobs $J --build-jobs 2 --resume $here/results.jsonl
echo "tier 3 exit $? at $(date -u +%T)" >&2
python3 -m attnplan verify --sweep --strength 3 --target fa2 --target fa2-mla --target fa3 --target fa3-mla \
  --jobs $J --build-timeout 400 --calibrate $here/tol.yaml --results-log $here/sweep.jsonl \
  --resume $here/sweep.jsonl --report $here/sweep.md > $here/sweep_stdout.jsonl
echo "sweep exit $? at $(date -u +%T)" >&2
python3 bench/xqa_exhaustive.py --out $here --tiers 4 --jobs $J --build-jobs 2 --resume $here/results.jsonl
echo "tier 4 exit $? at $(date -u +%T)" >&2
