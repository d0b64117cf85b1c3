#!/bin/bash
# Third call (nvidia-h100-x1): issue 41's general steps once more, on this tree:
#   1. tests/gpu/test_general_replay_gpu.py (now also steps carrying the engine's host block table);
#   2. prof_meta.py: the step metadata's host time on this host, with and without the host block table
#      (build_step medians and cProfile; no FlashInfer module);
#   3. bench/decode_steps.py --issue41 --parts general (the replay's learning fixed; host-table columns);
#   4. the GPU test files the first call's budget cut: adapter variants, fp8 query.
#   bash bench/logs/h100-2026-11-26r/lease3.sh SECONDS
secs=${1:-570}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | head -1)"
timeout 240 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_general_replay_gpu.py > $OUT/tests.log 2>&1
echo "general replay gpu tests exit $? at $((SECONDS - t0)) s"
grep -E "general replay|passed|failed|Error|assert" $OUT/tests.log | tail -12
timeout 60 python3 bench/logs/h100-2026-11-26r/prof_meta.py > $OUT/prof_meta.log 2>&1
echo "prof_meta exit $? at $((SECONDS - t0)) s"; grep "build_step" $OUT/prof_meta.log
timeout 120 python3 bench/decode_steps.py --issue41 --parts general --out $OUT > $OUT/steps.log 2>&1
echo "decode_steps general exit $? at $((SECONDS - t0)) s"
grep -h "^|" $OUT/decode-steps.md 2> /dev/null | cut -c1-500; tail -2 $OUT/steps.log
left=$((secs - (SECONDS - t0) - 10))
timeout $left python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_adapter_variants_gpu.py \
  tests/gpu/test_fp8_query_gpu.py -k 'not warmup' > $OUT/tests2.log 2>&1
echo "variants + fp8 query gpu tests exit $? at $((SECONDS - t0)) s"
grep -E "passed|failed|^FAILED|^ERROR" $OUT/tests2.log | tail -8
