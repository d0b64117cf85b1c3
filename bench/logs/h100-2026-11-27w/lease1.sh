#!/bin/bash
# First call (a fresh 4 x H100 host) of the thirteenth session, on its starting tree (594d46c): where a prefill
# step's host time goes (prof_step.py --profile on GPU 0, cores 0-7), and the benches the last session left on
# its final tree - bench/decode_steps.py --issue41 --parts general (GPU 1, cores 8-15) and
# bench/mla_prefill_host.py (GPU 2, cores 16-23), each on its own GPU and cores.
#   bash bench/logs/h100-2026-11-27w/lease1.sh SECONDS
secs=${1:-400}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
export PYTHONPATH=/tmp/site:$PWD
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | wc -l) GPUs"
D=bench/logs/h100-2026-11-27w
(CUDA_VISIBLE_DEVICES=1 MAX_JOBS=8 timeout $((secs - 15)) taskset -c 8-15 python3 bench/decode_steps.py --issue41 \
  --parts general --out /tmp/bench/g1 > $OUT/decode-steps-general.log 2>&1; echo "== general: exit $? at $((SECONDS - t0)) s"
  cp /tmp/bench/g1/decode-steps-general.json $OUT/ 2> /dev/null) &
(CUDA_VISIBLE_DEVICES=2 MAX_JOBS=8 timeout $((secs - 15)) taskset -c 16-23 python3 bench/mla_prefill_host.py \
  --json $OUT/mla-prefill-host.json > $OUT/mla-prefill-host.log 2>&1; echo "== mla prefill: exit $? at $((SECONDS - t0)) s") &
CUDA_VISIBLE_DEVICES=0 MAX_JOBS=8 timeout $((secs - 15)) taskset -c 0-7 python3 $D/prof_step.py --profile \
  > $OUT/prof_step.log 2>&1
echo "== prof_step: exit $? at $((SECONDS - t0)) s"
wait
tail -5 $OUT/*.log
