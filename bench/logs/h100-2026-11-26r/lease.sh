#!/bin/bash
# First call of the eighth session (nvidia-h100-x1): issue 41's general-step gap, then what the last
# session left unrun on the GPU, as far as one call goes:
#   1. gap2.py: where plan_step's FlashInfer plans lose their time on prefill / mixed steps (fa2 executor);
#   2. beside the GPU tests (niced): issue 38's one sample probe the new rules' draw adds (r0031-8ed26764),
#      `attnplan verify --sample 32 --seed 41` resumed from every earlier log;
#   3. the GPU test files not run on this tree: adapter, kernel paths, MLA adapter, variants, fp8 query.
#   bash bench/logs/h100-2026-11-26r/lease.sh SECONDS
secs=${1:-560}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | head -1)"
python3 bench/decode_steps.py --help > /dev/null 2>&1
timeout 200 python3 bench/logs/h100-2026-11-26r/gap2.py > $OUT/gap2.log 2>&1; echo "gap2 exit $? at $((SECONDS - t0)) s"
cat $OUT/gap2.log | grep -v "^\[" | tail -12
left=$((secs - (SECONDS - t0) - 15))
P=$OUT/sample; mkdir -p $P
( FLASHINFER_WORKSPACE_BASE=/tmp/fi-sample nice -n 5 timeout $left python3 -m attnplan verify --sample 32 --seed 41 \
    --results-log $P/results.jsonl --resume bench/logs/h100-2026-11-26p/sample-results.jsonl \
    --resume bench/logs/h100-2026-11-26q/machine1/sample/results.jsonl --report $P/report.md --build-timeout 600 \
    --jobs 2 --build-jobs 4 > $P/stdout.jsonl 2> $P/stderr.log; echo "sample exit $?" > $P/exit ) &
timeout $left python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_adapter_gpu.py \
  tests/gpu/test_adapter_kernel_paths_gpu.py tests/gpu/test_adapter_mla_gpu.py tests/gpu/test_adapter_variants_gpu.py \
  tests/gpu/test_fp8_query_gpu.py -k 'not warmup' > $OUT/tests.log 2>&1
echo "gpu tests exit $? at $((SECONDS - t0)) s"
wait
cat $P/exit; grep -o '"outcome": "[a-z-]*"' $P/results.jsonl 2> /dev/null | sort | uniq -c
tail -c 3000 $P/stderr.log > $P/stderr-tail.log; rm -f $P/stderr.log
grep -E "passed|failed|^FAILED|^ERROR" $OUT/tests.log | tail -15
