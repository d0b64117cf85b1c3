#!/bin/bash
# Second call (nvidia-h100-x1): issue 41's general steps with the scheduler replay (general_plans.py):
#   1. tests/gpu/test_general_replay_gpu.py: prefill / mixed steps of changing counts against the float32
#      reference, the replay learned, checked and taking over (probed plan, fa2, spec q_len 3, window);
#   2. bench/decode_steps.py --issue41 --parts general: plan_step with the replay, without it (same process,
#      call by call), FlashInfer's whole plans with the same arguments, the eager step end to end;
#   3. gap2.py with the replay off: where FlashInfer's whole plans lose their time after the metadata.
#   bash bench/logs/h100-2026-11-26r/lease2.sh SECONDS
secs=${1:-570}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | head -1), HEAD $(git rev-parse --short HEAD 2> /dev/null)"
timeout 330 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_general_replay_gpu.py > $OUT/tests.log 2>&1
echo "general replay gpu tests exit $? at $((SECONDS - t0)) s"
grep -E "general replay|passed|failed|Error|assert" $OUT/tests.log | tail -20
left=$((secs - (SECONDS - t0) - 80))
timeout $left python3 bench/decode_steps.py --issue41 --parts general --out $OUT > $OUT/steps.log 2>&1
echo "decode_steps general exit $? at $((SECONDS - t0)) s"
grep -h "^|" $OUT/decode-steps.md 2> /dev/null | cut -c1-400; tail -3 $OUT/steps.log
left=$((secs - (SECONDS - t0) - 5))
[ $left -gt 20 ] && { ATTNPLAN_GENERAL_SCHEDULER_REPLAY=0 timeout $left python3 bench/logs/h100-2026-11-26r/gap2.py > $OUT/gap2.log 2>&1
  echo "gap2 exit $? at $((SECONDS - t0)) s"; grep "^{" $OUT/gap2.log; }
