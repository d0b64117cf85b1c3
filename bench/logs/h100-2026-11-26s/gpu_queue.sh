#!/bin/bash
# Every GPU test file (make test-gpu's tests/gpu, one pytest per file) over this machine's GPUs, one worker a
# GPU taking the next file not yet done; resumable: a later call on the same warm machine (the JIT cache and
# /tmp/q kept) runs only the files no earlier call finished. Logs: $OUT/tests/<file>.log (the first two calls), all
# of them in $OUT/tests-all.log (the third: the returned files are counted), rc in the summary. GPU_FILES: the files;
# GPUS: the GPUs its workers take (default all; bench/logs/h100-2026-11-27w/lease4.sh gave GPUs 1-3).
#   bash bench/logs/h100-2026-11-26s/gpu_queue.sh SECONDS
secs=${1:-500}
t0=$SECONDS
Q=/tmp/q; mkdir -p $Q
for c in $Q/claim.*; do [ -e "$c" ] || continue; n=${c#$Q/claim.}; [ -f $Q/done.$n ] || rmdir "$c"; done
# longest first (bench/logs of earlier calls), so the two workers end together
FILES=${GPU_FILES:-"test_adapter_kernel_paths_gpu test_general_replay_gpu test_adapter_gpu test_adapter_mla_gpu
 test_decode_graphs_gpu test_adapter_variants_gpu test_layer_groups_gpu test_fa3_e5m2_and_nvfp4_decode_gpu
 test_steady_step_gpu test_decode_per_shape_gpu test_fp8_query_gpu test_verify_gpu test_sink_jit_name_gpu
 test_mla_prefill_replay_gpu"}
worker() {
  local gpu=$1
  for f in $FILES; do
    mkdir $Q/claim.$f 2> /dev/null || continue
    local left=$((secs - (SECONDS - t0) - 5))
    [ $left -gt 20 ] || { rmdir $Q/claim.$f; return; }
    echo "[gpu $gpu] $f at $((SECONDS - t0)) s"
    CUDA_VISIBLE_DEVICES=$gpu timeout $left python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/$f.py \
      > $Q/run.$f 2>&1
    local rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then rmdir $Q/claim.$f; echo "[gpu $gpu] $f cut at $((SECONDS - t0)) s"; return; fi
    echo $rc > $Q/done.$f; cp $Q/run.$f $Q/log.$f
    echo "[gpu $gpu] $f rc $rc at $((SECONDS - t0)) s: $(grep -E '(passed|failed|error)' $Q/log.$f | tail -1)"
  done
}
GPUS=${GPUS:-$(seq -s " " 0 $(($(nvidia-smi -L | wc -l) - 1)))}     # the GPUs its workers take (default: all)
for g in $GPUS; do worker $g & done
wait
echo "== queue after $((SECONDS - t0)) s"
for f in $FILES; do
  if [ -f $Q/done.$f ]; then echo "$f rc $(cat $Q/done.$f): $(grep -E '(passed|failed|error)' $Q/log.$f | tail -1)"
  else echo "$f NOT DONE"; fi
done
for f in $FILES; do [ -f $Q/run.$f ] && { echo "##### $f"; cat $Q/run.$f; }; done > $OUT/tests-all.log
