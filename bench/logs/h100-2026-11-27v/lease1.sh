#!/bin/bash
# First call (a fresh multi-GPU H100 host), on 72b6aa5's tree (MLA's context in the step's one copy, the device
# half through host_torch.cpp): host_torch.cpp's build and prof_views.py on a quiet machine, then every GPU test
# file through the queue on all GPUs (resumable: a later call on the warm machine goes on where it stopped).
#   bash bench/logs/h100-2026-11-27v/lease1.sh SECONDS
secs=${1:-570}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
export PYTHONPATH=/tmp/site:$PWD
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
echo "c++: $(command -v c++), ninja: $(command -v ninja) / $(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>&1)"
L=bench/logs/h100-2026-11-27v
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 $L/prof_views.py 2>&1 | tee $OUT/prof_views.log
echo "== prof_views: exit ${PIPESTATUS[0]} at $((SECONDS - t0)) s"
bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
