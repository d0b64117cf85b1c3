#!/bin/bash
# First call of the tenth session (nvidia-h100-x2, a fresh machine): the two GPU test files the ninth session
# did not run on its tree - the variants (soft-cap fa2 / fa3 modules: the longest builds) and the fp8 query -
# one a GPU, through the ninth session's resumable queue.
#   bash bench/logs/h100-2026-11-26t/lease1.sh SECONDS
secs=${1:-580}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
python3 -c "from attnplan.adapter import host_native; print('host_step.c:', host_native.status())"
GPU_FILES="test_adapter_variants_gpu test_fp8_query_gpu" \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0) - 5))
