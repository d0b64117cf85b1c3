#!/bin/bash
# First call (nvidia-h100-x2): every JIT module the GPU tests need in one ninja (32 jobs), then every GPU test
# file over both GPUs (gpu_queue.sh), on this tree.
#   bash bench/logs/h100-2026-11-26s/lease1.sh SECONDS
secs=${1:-580}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=32 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
echo "commit $(git rev-parse --short HEAD 2>/dev/null); cc: $(cc --version 2>&1 | head -1)"
python3 -c "from attnplan.adapter import host_native; print('host_step.c:', host_native.status())"
timeout 300 python3 tests/gpu/prebuild_all.py new_paths adapter mla variants graphs general > $OUT/prebuild.log 2>&1
echo "prebuild exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/prebuild.log)"
MAX_JOBS=16 bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0) - 5))
