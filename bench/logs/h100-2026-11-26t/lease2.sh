#!/bin/bash
# Second call (nvidia-h100-x2): issue 41's cut of the prefill / mixed step's host cost - the GPU test files
# its paths run through (the general replay, the adapter, MLA, the steady step, layer groups) over both GPUs,
# then bench/decode_steps.py --issue41 --parts general on this tree and on the base commit's (.ab-base/, a copy
# of 25be913's attnplan and benches carried with the call), in turn twice, nothing else running.
#   bash bench/logs/h100-2026-11-26t/lease2.sh SECONDS
secs=${1:-580}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
PYTHONPATH=/tmp/site:$PWD python3 -c "from attnplan.adapter import host_native; print('host_step.c:', host_native.status())"
bench_secs=${BENCH_SECS:-170}
PYTHONPATH=/tmp/site:$PWD GPU_FILES=${GPU_FILES:-"test_general_replay_gpu test_adapter_gpu test_adapter_mla_gpu
 test_steady_step_gpu test_layer_groups_gpu"} bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - bench_secs - 10))
B=/tmp/bench; mkdir -p $B
for r in 1 2; do
  for tree in new base; do
    left=$((secs - (SECONDS - t0) - 5)); [ $left -gt 15 ] || break 2
    if [ $tree = new ]; then root=$PWD; else root=$PWD/.ab-base; fi
    (cd $root && PYTHONPATH=/tmp/site:$root timeout $left python3 bench/decode_steps.py --issue41 --parts general \
      --out $B/$tree$r > $B/$tree$r.log 2>&1)
    echo "== $tree $r: exit $? at $((SECONDS - t0)) s"
    grep -h "^|" $B/$tree$r/decode-steps.md 2> /dev/null | cut -c1-400; tail -1 $B/$tree$r.log
  done
done
for f in $B/*.log; do echo "##### $f"; cat $f; done > $OUT/bench-all.log
for d in $B/*/; do echo "##### $d"; cat $d/decode-steps-general.json 2> /dev/null; done > $OUT/bench-general.json
