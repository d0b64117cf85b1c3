#!/bin/bash
# Second call (nvidia-h100-x2, right after the first: the same warm machine, its JIT cache and queue kept):
# the GPU test files the first call did not finish (gpu_queue.sh), then issue 41's host timings on this
# tree: prof_native.py (host_step.c against numpy, in turn) and bench/decode_steps.py --issue41 --parts general.
#   bash bench/logs/h100-2026-11-26s/lease2.sh SECONDS
secs=${1:-580}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
bench_secs=${BENCH_SECS:-200}
bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - bench_secs - 10))
timeout 60 python3 bench/logs/h100-2026-11-26s/prof_native.py > $OUT/prof_native.log 2>&1
echo "prof_native exit $? at $((SECONDS - t0)) s"; grep "^|" $OUT/prof_native.log
timeout $((secs - (SECONDS - t0) - 5)) python3 bench/decode_steps.py --issue41 --parts general --out $OUT > $OUT/steps.log 2>&1
echo "decode_steps general exit $? at $((SECONDS - t0)) s"
grep -h "^|" $OUT/decode-steps.md 2> /dev/null | cut -c1-600; tail -2 $OUT/steps.log
