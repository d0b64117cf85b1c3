#!/bin/bash
# Final call of the session: issue 41's general rows on the new general path, then the GPU tests over it.
set -o pipefail
bash .gpu-bundle/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
T0=$(date +%s); t() { echo "== $1 t=$(( $(date +%s) - T0 ))"; }
t start
timeout 200 python3 bench/decode_steps.py --issue41 --parts general --out $OUT/g > $OUT/general.log 2>&1; t "general exit $?"
timeout 300 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_adapter_gpu.py -k "mixed or speculative or cuda_graph or fa2_decode or fp8_kv" tests/gpu/test_steady_step_gpu.py > $OUT/tests.log 2>&1; t "tests exit $?"
grep -h "^|" $OUT/g/decode-steps.md; grep -E "passed|failed|Error" $OUT/tests.log | tail -8
