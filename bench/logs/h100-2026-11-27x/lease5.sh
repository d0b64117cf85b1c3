#!/bin/bash
# Fifth call (a fresh 2-GPU host, the session's last 262 s): call 4's A/B against 39d0eb9 had this tree's MLA prefill
# steps 2-6 % slower, though the change between them (the kept KV-length buffer handed the step's tensor) runs no
# code on an MLA prefill step. The MLA fa2 suite alone, both ways round: this tree against 39d0eb9's adapter
# (.ab-base-fill), then 39d0eb9's tree (.ab-swap: its attnplan/, this tree's benches) against this one.
# NOT RUN: refused, too little device time was left to start a machine. Before it: .ab-swap =
#   mkdir .ab-swap && git archive 39d0eb9 attnplan | tar -x -C .ab-swap && mkdir -p .ab-swap/bench .ab-swap/tests/gpu \
#     && cp bench/*.py .ab-swap/bench/ && cp tests/gpu/*.py .ab-swap/tests/gpu/
#   carry .gpu-bundle, .ab-base-fill (lease4.sh) and .ab-swap
#   bash bench/logs/h100-2026-11-27x/lease5.sh
t0=$SECONDS
. bench/logs/h100-2026-11-27x/preamble.sh
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=$(nproc) timeout 130 python3 bench/adapter_ab.py --base .ab-base-fill --suites mla-fa2 \
  --json $OUT/ab-mla-head-vs-39d0eb9.json > $OUT/ab-mla-head-vs-39d0eb9.log 2>&1
echo "== this tree vs 39d0eb9: exit $? at $((SECONDS - t0)) s"
here=$PWD
(cd .ab-swap && PYTHONPATH=/tmp/site CUDA_VISIBLE_DEVICES=0 timeout 60 python3 bench/adapter_ab.py --base $here \
  --suites mla-fa2 --json $OUT/ab-mla-39d0eb9-vs-head.json > $OUT/ab-mla-39d0eb9-vs-head.log 2>&1)
echo "== 39d0eb9 vs this tree: exit $? at $((SECONDS - t0)) s"
grep -h "^|" $OUT/ab-mla-*.log
