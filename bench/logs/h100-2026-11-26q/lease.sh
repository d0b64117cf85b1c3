#!/bin/bash
# Issue 41 on one H100 (`nvidia-h100-x1`), idempotently, once per call:
#   bash bench/logs/h100-2026-11-26q/lease.sh SECONDS
# The first call copies the carried tree to /tmp/src (later calls re-send the tree; the run keeps its copy)
# and starts, in a process session of its own (setsid: it outlives the call on a warm machine):
#   1. the decode GPU tests: the eager scheduler replay (eager_plans.py: fa2, fa2 spec decode, fa3, the sink
#      wrapper, both MLA paths, every step against the float32 reference, no device sync once learned), the
#      graph path's revised check (plan_replay.py: fa2 below 8 pages, fa3-MLA), the per-shape choice; they
#      also build the decode modules;
#   2. bench/decode_steps.py --issue41 over fa2, fa3, mla-fa3, mla-fa2 (decode rows at batch 1/4/16/64 x 1k/4k:
#      plan_step - FlashInfer's plan with the eager replay and, same process, without; the graph rows);
#   beside 1 (niced; the bench waits for it, so that no build shares the host with a timing): issue 38's
#   `attnplan verify --sample 32 --seed 41` resumed from bench/logs/h100-2026-11-26p/sample-results.jsonl
#   (its 9 fa2 probes the previous lease's budget cut off);
#   3. the other GPU test files (adapter, kernel paths, MLA, variants, layer groups, fp8 query), as far as
#      the lease goes: eager decode steps of a repeated shape now plan through the layout's own wrapper.
# Every call waits up to SECONDS, then copies what exists to $OUT.
secs=${1:-560}
L=/tmp/l41
[ -f /tmp/src/.copied ] || { rm -rf /tmp/src && cp -rL . /tmp/src && touch /tmp/src/.copied; }
cd /tmp/src
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
mkdir -p $L
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | head -1)" >> $L/lease.log
if [ ! -f $L/done ] && { [ ! -f $L/pid ] || ! kill -0 "$(cat $L/pid)" 2> /dev/null; }; then
  setsid nohup bash -c "
    echo \$\$ > $L/pid; t0=\$(date +%s); el() { echo \$(( \$(date +%s) - t0 )); }
    P=/tmp/sample; mkdir -p \$P; touch \$P/results.jsonl
    ( FLASHINFER_WORKSPACE_BASE=\$P/fi nice -n 5 python3 -m attnplan verify --sample 32 --seed 41 \
        --results-log \$P/results.jsonl --resume bench/logs/h100-2026-11-26p/sample-results.jsonl \
        --resume \$P/results.jsonl --report \$P/report.md --build-timeout 900 --jobs 6 --build-jobs 4 \
        > \$P/stdout.jsonl 2> \$P/stderr.log
      echo \"sample exit \$? at t=\$(el)\" >> $L/lease.log; touch \$P/done ) &
    if [ ! -f $L/done-tests ]; then
      timeout 540 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_decode_graphs_gpu.py \
        tests/gpu/test_steady_step_gpu.py tests/gpu/test_decode_per_shape_gpu.py -k 'not warmup' > $L/tests.log 2>&1
      echo \"decode gpu tests exit \$? at t=\$(el)\" >> $L/lease.log
      touch $L/done-tests
    fi
    while [ ! -f \$P/done ] && [ \$(el) -lt 900 ]; do sleep 5; done
    if [ ! -f $L/done-steps ]; then
      timeout 540 python3 bench/decode_steps.py --issue41 \${STEPS_ARGS:---backends fa2,fa3,mla-fa3,mla-fa2 --parts decode} \
        --out $L/a > $L/steps.log 2>&1
      echo \"decode_steps exit \$? at t=\$(el)\" >> $L/lease.log
      touch $L/done-steps
    fi
    timeout 900 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_adapter_gpu.py \
      tests/gpu/test_adapter_kernel_paths_gpu.py tests/gpu/test_adapter_mla_gpu.py tests/gpu/test_adapter_variants_gpu.py \
      tests/gpu/test_layer_groups_gpu.py tests/gpu/test_fp8_query_gpu.py -k 'not warmup' > $L/tests2.log 2>&1
    echo \"other gpu tests exit \$? at t=\$(el)\" >> $L/lease.log
    touch $L/done" < /dev/null > /dev/null 2>&1 &
fi
end=$((SECONDS + secs))
while [ ! -f $L/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
( cd $L && tar czf $OUT/l41.tgz a 2> /dev/null )
for f in $L/steps.log $L/tests.log $L/tests2.log $L/lease.log; do [ -f $f ] && cp $f $OUT/; done
mkdir -p $OUT/sample; for f in results.jsonl report.md; do [ -f /tmp/sample/$f ] && cp /tmp/sample/$f $OUT/sample/; done
[ -f /tmp/sample/stderr.log ] && tail -100 /tmp/sample/stderr.log > $OUT/sample/stderr-tail.log
echo "sample: $(grep -c . /tmp/sample/results.jsonl 2> /dev/null) new results"; grep -o '"outcome": "[a-z-]*"' /tmp/sample/results.jsonl 2> /dev/null | sort | uniq -c
cat $L/lease.log
grep -E "passed|failed|eager replay|scheduler|Error" $L/tests.log 2> /dev/null | tail -40
grep -E "passed|failed|Error" $L/tests2.log 2> /dev/null | tail -20
grep -h "^|" $L/a/decode-steps.md 2> /dev/null | cut -c1-400 | head -40
tail -5 $L/steps.log 2> /dev/null
