#!/bin/bash
# First call of the eleventh session (nvidia-h100-x2, a fresh machine), on 6159ca5: from_host's parts timed
# alone on this host (prof_from_host.py, nothing else running), then the GPU test queue, the files the tenth
# session left unrun on its final tree first (the MLA ragged-part replay test, which decides its gate).
#   bash bench/logs/h100-2026-11-27u/lease1.sh SECONDS
secs=${1:-560}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
CUDA_VISIBLE_DEVICES=0 python3 bench/logs/h100-2026-11-27u/prof_from_host.py cuda 2>&1 | tee $OUT/prof_from_host.log
echo "== profile done at $((SECONDS - t0)) s"
GPU_FILES="test_mla_prefill_replay_gpu test_adapter_mla_gpu test_general_replay_gpu test_adapter_gpu
 test_fa3_e5m2_and_nvfp4_decode_gpu test_verify_gpu test_sink_jit_name_gpu test_fp8_query_gpu test_adapter_variants_gpu
 test_steady_step_gpu" bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
