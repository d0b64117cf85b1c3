#!/bin/bash
# Third call: the NVFP4 head-64 failure's group boundary (lease2's variants: wrong at groups 32-64, ok at 1-16)
# and its q_len 1 twin; one JIT module (+ the decode module for q_len 1), run in the call.
#   bash bench/logs/h100-2026-11-26q/lease3.sh
cd /tmp/src 2> /dev/null || { rm -rf /tmp/src && cp -rL . /tmp/src && cd /tmp/src; }
cp -f $OLDPWD/bench/probe_variants.py bench/probe_variants.py 2> /dev/null
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=/tmp/l41b/fi-v
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s"
timeout 540 python3 bench/probe_variants.py --out /tmp/l41c --sample 32 --seed 41 --id r0023 \
  --vary num_qo_heads=17,20,24,25,28,31,33,48 --vary num_speculative_tokens=0 --jobs 4 --build-jobs 16 > /tmp/l41c.log 2>&1
echo "exit $?"; cp /tmp/l41c.log $OUT/variants3.log; cp /tmp/l41c/* $OUT/ 2> /dev/null
cat /tmp/l41c/variants.md 2> /dev/null; tail -5 /tmp/l41c.log
