#!/bin/bash
# Third call (nvidia-h100-x2, a fresh machine), on the final tree (MLA's ragged replay open for fa2 and fa3)
# against 6159ca5's tree in .ab-base/ (not in the repository): bench/decode_steps.py --issue41 --parts general
# alternating trees three times, each process pinned to one core (taskset -c 4: call 2's rounds differed by up
# to 2x between processes of the same tree), nothing else running; then bench/mla_prefill_host.py (fa2, fa3), then
# the GPU test queue on both GPUs for what is left.
#   bash bench/logs/h100-2026-11-27u/lease3.sh SECONDS
secs=${1:-520}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
B=/tmp/bench; mkdir -p $B
for r in 1 2 3; do
  for tree in new base; do
    left=$((secs - (SECONDS - t0) - 3)); [ $left -gt 15 ] || break 2
    root=$PWD; [ $tree = base ] && root=$PWD/.ab-base
    (cd $root && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site:$root timeout $left taskset -c 4 python3 bench/decode_steps.py \
      --issue41 --parts general --out $B/$tree$r > $B/$tree$r.log 2>&1)
    echo "== $tree $r: exit $? at $((SECONDS - t0)) s"
    grep -h "^|" $B/$tree$r/decode-steps.md 2> /dev/null | tail -6 | cut -d'|' -f2,4-7,8,11
  done
done
for f in $B/*.log; do echo "##### $f"; cat $f; done > $OUT/bench-all.log
for d in $B/*/; do echo "##### $d"; cat $d/decode-steps-general.json 2> /dev/null; done > $OUT/bench-general.json
export PYTHONPATH=/tmp/site:$PWD
left=$((secs - (SECONDS - t0) - 5))
CUDA_VISIBLE_DEVICES=0 timeout $((left < 200 ? left : 200)) python3 bench/mla_prefill_host.py --json $OUT/mla-prefill-host.json \
  2>&1 | tee $OUT/mla-prefill-host.log
echo "== MLA prefill host bench: exit ${PIPESTATUS[0]} at $((SECONDS - t0)) s"
GPU_FILES="test_fp8_query_gpu test_fa3_e5m2_and_nvfp4_decode_gpu test_adapter_variants_gpu test_adapter_kernel_paths_gpu
 test_layer_groups_gpu test_decode_per_shape_gpu" bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
