#!/bin/bash
# Second call (nvidia-h100-x2), on this tree with the slots made only where read (step._Slots) and MLA's fa2
# ragged gate open, against 6159ca5's tree carried in .ab-base/ (not in the repository): from_host's parts on
# both trees, the gather's torch calls, then bench/decode_steps.py --issue41 --parts general alternating trees
# three times, nothing else running; then the GPU test queue (resumable: call 3 goes on where it stopped).
#   bash bench/logs/h100-2026-11-27u/lease2.sh SECONDS
secs=${1:-560}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
L=bench/logs/h100-2026-11-27u
for tree in new base; do
  root=$PWD; [ $tree = base ] && root=$PWD/.ab-base
  CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site ATTNPLAN_ROOT=$root python3 $L/prof_from_host.py cuda > $OUT/prof_from_host_$tree.log 2>&1
done
CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site python3 $L/gather_variants.py cuda > $OUT/gather_variants.log 2>&1
echo "== profiles done at $((SECONDS - t0)) s"; cat $OUT/gather_variants.log
B=/tmp/bench; mkdir -p $B
for r in 1 2 3; do
  for tree in new base; do
    left=$((secs - (SECONDS - t0) - 3)); [ $left -gt 15 ] || break 2
    root=$PWD; [ $tree = base ] && root=$PWD/.ab-base
    (cd $root && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site:$root timeout $left python3 bench/decode_steps.py --issue41 \
      --parts general --out $B/$tree$r > $B/$tree$r.log 2>&1)
    echo "== $tree $r: exit $? at $((SECONDS - t0)) s"
    grep -h "^|" $B/$tree$r/decode-steps.md 2> /dev/null | tail -6 | cut -d'|' -f2,4-7,8,11
  done
done
for f in $B/*.log; do echo "##### $f"; cat $f; done > $OUT/bench-all.log
for d in $B/*/; do echo "##### $d"; cat $d/decode-steps-general.json 2> /dev/null; done > $OUT/bench-general.json
export PYTHONPATH=/tmp/site:$PWD
GPU_FILES="test_mla_prefill_replay_gpu test_general_replay_gpu test_adapter_gpu test_adapter_mla_gpu test_steady_step_gpu
 test_fp8_query_gpu test_fa3_e5m2_and_nvfp4_decode_gpu test_adapter_variants_gpu test_adapter_kernel_paths_gpu" \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
