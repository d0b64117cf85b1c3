#!/bin/bash
# Second call (the multi-GPU host of call 1 where still warm: its JIT cache kept), on this session's tree against
# 25f1b3f's (the eleventh session's final tree) carried in .ab-base/ (not in the repository): bench/decode_steps.py
# --issue41 --parts general on this tree with host_torch.cpp, on this tree with ATTNPLAN_NATIVE_TORCH=0 and on the
# base, alternating, twice; bench/mla_prefill_host.py on this tree and the base; all on GPU 0 with nothing else
# running. Then the GPU test files call 1's queue did not finish (two cut by pytest's 300 s bound while four
# workers built JIT modules at once) on all GPUs.
#   bash bench/logs/h100-2026-11-27v/lease2.sh SECONDS
secs=${1:-560}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | wc -l) GPUs"
rm -f /tmp/q/done.test_adapter_gpu /tmp/q/done.test_general_replay_gpu
B=/tmp/bench; mkdir -p $B
for r in 1 2; do
  for tree in new newpy base; do
    left=$((secs - (SECONDS - t0) - 3)); [ $left -gt 15 ] || break 2
    root=$PWD; [ $tree = base ] && root=$PWD/.ab-base
    sw=1; [ $tree = newpy ] && sw=0
    (cd $root && CUDA_VISIBLE_DEVICES=0 ATTNPLAN_NATIVE_TORCH=$sw PYTHONPATH=/tmp/site:$root timeout $left python3 \
      bench/decode_steps.py --issue41 --parts general --out $B/$tree$r > $B/$tree$r.log 2>&1)
    echo "== $tree $r: exit $? at $((SECONDS - t0)) s"
    grep -h "^|" $B/$tree$r/decode-steps.md 2> /dev/null | tail -6 | cut -d'|' -f2,4-7,8,11
  done
done
for f in $B/*.log; do echo "##### $f"; cat $f; done > $OUT/bench-all.log
for d in $B/*/; do echo "##### $d"; cat $d/decode-steps-general.json 2> /dev/null; done > $OUT/bench-general.json
for tree in new base; do
  left=$((secs - (SECONDS - t0) - 5)); [ $left -gt 30 ] || break
  root=$PWD; [ $tree = base ] && root=$PWD/.ab-base
  (cd $root && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site:$root timeout $((left < 150 ? left : 150)) python3 \
    bench/mla_prefill_host.py --json $OUT/mla-prefill-host-$tree.json > $OUT/mla-prefill-host-$tree.log 2>&1)
  echo "== MLA prefill host bench, $tree: exit $? at $((SECONDS - t0)) s"; cat $OUT/mla-prefill-host-$tree.log | grep "^|"
done
export PYTHONPATH=/tmp/site:$PWD
GPU_FILES="test_adapter_gpu test_general_replay_gpu test_adapter_variants_gpu test_fa3_e5m2_and_nvfp4_decode_gpu" \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - (SECONDS - t0)))
