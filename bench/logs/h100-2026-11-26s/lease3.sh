#!/bin/bash
# Third call (nvidia-h100-x2, a fresh machine): on the tree with the learning fix (a check step whose
# candidates part narrows instead of refusing) and the three GPU tests mended, the GPU test files the first
# two calls failed or did not reach, the general replay first.
#   bash bench/logs/h100-2026-11-26s/lease3.sh SECONDS
secs=${1:-560}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
python3 -c "from attnplan.adapter import host_native; print('host_step.c:', host_native.status())"
GPU_FILES="test_general_replay_gpu test_adapter_mla_gpu test_adapter_gpu test_adapter_variants_gpu
 test_fa3_e5m2_and_nvfp4_decode_gpu test_steady_step_gpu test_decode_per_shape_gpu test_fp8_query_gpu test_verify_gpu
 test_sink_jit_name_gpu" bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0) - 5))
grep -E "^general replay" $OUT/tests-all.log
