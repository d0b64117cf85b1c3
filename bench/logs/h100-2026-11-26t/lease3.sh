#!/bin/bash
# Third call (nvidia-h100-x2, a fresh machine): on the tree with the events recorded on a kept Stream object,
# the GPU test files whose paths the change runs (the general replay's guards, kernel paths, layer groups,
# decode graphs, the steady step, per-shape decode) over both GPUs; then bench/decode_steps.py --issue41
# --parts general on this tree and on the base commit's (.ab-base/), and prof_plan_step.py.
#   bash bench/logs/h100-2026-11-26t/lease3.sh SECONDS
secs=${1:-570}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 MAX_JOBS=16 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | tr '\n' ';')"
PYTHONPATH=/tmp/site:$PWD python3 -c "from attnplan.adapter import host_native; print('host_step.c:', host_native.status())"
bench_secs=${BENCH_SECS:-110}
PYTHONPATH=/tmp/site:$PWD GPU_FILES=${GPU_FILES:-"test_general_replay_gpu test_adapter_kernel_paths_gpu test_layer_groups_gpu
 test_decode_graphs_gpu test_steady_step_gpu test_decode_per_shape_gpu"} \
  bash bench/logs/h100-2026-11-26s/gpu_queue.sh $((secs - bench_secs - 10))
B=/tmp/bench; mkdir -p $B
for tree in new base; do
  left=$((secs - (SECONDS - t0) - 5)); [ $left -gt 15 ] || break
  if [ $tree = new ]; then root=$PWD; else root=$PWD/.ab-base; fi
  (cd $root && PYTHONPATH=/tmp/site:$root timeout $left python3 bench/decode_steps.py --issue41 --parts general \
    --out $B/$tree > $B/$tree.log 2>&1)
  echo "== $tree: exit $? at $((SECONDS - t0)) s"
  grep -h "^|" $B/$tree/decode-steps.md 2> /dev/null | cut -c1-400; tail -1 $B/$tree.log
done
left=$((secs - (SECONDS - t0) - 3))
[ $left -gt 10 ] && PYTHONPATH=/tmp/site:$PWD timeout $left python3 bench/logs/h100-2026-11-26t/prof_plan_step.py \
  > $B/prof.log 2>&1; echo "== prof: exit $? at $((SECONDS - t0)) s"; grep "^|" $B/prof.log
for f in $B/*.log; do echo "##### $f"; cat $f; done > $OUT/bench-all.log
for d in $B/*/; do echo "##### $d"; cat $d/decode-steps-general.json 2> /dev/null; done > $OUT/bench-general.json
