#!/bin/bash
# The second H100 lease of issue 41 / 38 this session (`nvidia-h100-x1`), idempotently, once per call:
#   bash bench/logs/h100-2026-11-26q/lease2.sh SECONDS
# Started in a process session of its own on the first call (it outlives a call on a warm machine):
#   V (beside T): bench/probe_variants.py over the sample's one wrong probe (r0023-0e7a8866: fa2 paged_prefill,
#      fp16 query, NVFP4 KV, head 64, group 57, page 256, window 128, soft cap 30, q_len 4) and 22 one-factor
#      variants of it (6 JIT modules): which factor the failure needs;
#   T: the eager GPU tests as revised after lease.sh (fa2 by name, batch 8, the sink wrapper's refusal) and the
#      layer-group GPU tests (attnplan.plan_model without a node, fixed);
#   B (after V and T, the host quiet): bench/decode_steps.py --issue41 --parts decode over fa2, fa3, both MLA
#      paths (plan_step timed call by call beside FlashInfer's plan; MLA's layouts up to 16);
#   R: the other GPU test files, as far as the lease goes.
# Every call waits up to SECONDS, then copies what exists to $OUT.
secs=${1:-560}
L=/tmp/l41b
[ -f /tmp/src/.copied ] || { rm -rf /tmp/src && cp -rL . /tmp/src && touch /tmp/src/.copied; }
cd /tmp/src
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
mkdir -p $L
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | head -1)" >> $L/lease.log
if [ ! -f $L/done ] && { [ ! -f $L/pid ] || ! kill -0 "$(cat $L/pid)" 2> /dev/null; }; then
  setsid nohup bash -c "
    echo \$\$ > $L/pid; t0=\$(date +%s); el() { echo \$(( \$(date +%s) - t0 )); }
    ( FLASHINFER_WORKSPACE_BASE=$L/fi-v python3 bench/probe_variants.py --out $L/v --sample 32 --seed 41 --id r0023 \
        --vary num_qo_heads=1,8,16,32,56,64 --vary page_size=16,64,128 --vary num_speculative_tokens=0,1 \
        --vary sliding_window=none,1024,8192 --vary logits_soft_cap=none,50 --vary dtype=bf16 --vary kv_cache_dtype=fp8 \
        --vary head_dim=128 --vary shape=short,one-long --jobs 6 --build-jobs 4 > $L/variants.log 2>&1
      echo \"variants exit \$? at t=\$(el)\" >> $L/lease.log; touch $L/done-v ) &
    timeout 600 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_decode_graphs_gpu.py -k 'eager or gemma3 or gpt_oss' \
      tests/gpu/test_layer_groups_gpu.py > $L/tests.log 2>&1
    echo \"eager + layer-group gpu tests exit \$? at t=\$(el)\" >> $L/lease.log
    while [ ! -f $L/done-v ] && [ \$(el) -lt 900 ]; do sleep 5; done
    timeout 420 python3 bench/decode_steps.py --issue41 --backends fa2,fa3,mla-fa3,mla-fa2 --parts decode \
      --out $L/a > $L/steps.log 2>&1
    echo \"decode_steps exit \$? at t=\$(el)\" >> $L/lease.log
    timeout 900 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_adapter_gpu.py \
      tests/gpu/test_adapter_kernel_paths_gpu.py tests/gpu/test_adapter_mla_gpu.py tests/gpu/test_adapter_variants_gpu.py \
      tests/gpu/test_fp8_query_gpu.py -k 'not warmup' > $L/tests2.log 2>&1
    echo \"other gpu tests exit \$? at t=\$(el)\" >> $L/lease.log
    touch $L/done" < /dev/null > /dev/null 2>&1 &
fi
end=$((SECONDS + secs))
while [ ! -f $L/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
( cd $L && tar czf $OUT/l41b.tgz a v 2> /dev/null )
for f in $L/steps.log $L/tests.log $L/tests2.log $L/lease.log $L/variants.log; do [ -f $f ] && cp $f $OUT/; done
cat $L/lease.log
cat $L/v/variants.md 2> /dev/null
grep -E "passed|failed|eager replay|Error" $L/tests.log 2> /dev/null | tail -20
grep -E "passed|failed|Error" $L/tests2.log 2> /dev/null | tail -10
grep -h "^|" $L/a/decode-steps.md 2> /dev/null | cut -d'|' -f1-4 | head -40
tail -3 $L/variants.log 2> /dev/null; tail -3 $L/steps.log 2> /dev/null
