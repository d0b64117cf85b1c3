#!/bin/bash
# Third call (a fresh multi-GPU H100 host), on this session's tree: bench/decode_steps.py --issue41 --parts general three times on GPU 0 and cores 0-7, each run
# now timing plan_step with host_torch.cpp and with its Python twin in turn in one process (call 2's runs in
# separate processes differed by up to 2x); meanwhile test_adapter_variants_gpu (the one GPU test file not yet run
# on this session's tree) on GPU 1 and cores 8-63.
#   bash bench/logs/h100-2026-11-27v/lease3.sh SECONDS
secs=${1:-470}
t0=$SECONDS
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
export PYTHONPATH=/tmp/site:$PWD
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | wc -l) GPUs"
(CUDA_VISIBLE_DEVICES=1 MAX_JOBS=48 timeout $((secs - 10)) taskset -c 8-63 python3 -P -m pytest -q -s -p no:cacheprovider \
  -m gpu tests/gpu/test_adapter_variants_gpu.py > $OUT/test_adapter_variants_gpu.log 2>&1; \
  echo "== variants: exit $? at $((SECONDS - t0)) s: $(tail -1 $OUT/test_adapter_variants_gpu.log)") &
B=/tmp/bench; mkdir -p $B
for r in 1 2 3; do
  left=$((secs - (SECONDS - t0) - 15)); [ $left -gt 30 ] || break
  CUDA_VISIBLE_DEVICES=0 MAX_JOBS=8 timeout $left taskset -c 0-7 python3 bench/decode_steps.py --issue41 --parts general \
    --out $B/new$r > $B/new$r.log 2>&1
  echo "== new $r: exit $? at $((SECONDS - t0)) s"
  grep -h "^|" $B/new$r/decode-steps.md 2> /dev/null | tail -6 | cut -d'|' -f2,4-7,11
done
for f in $B/*.log; do echo "##### $f"; cat $f; done > $OUT/bench-all.log
for d in $B/*/; do echo "##### $d"; cat $d/decode-steps-general.json 2> /dev/null; done > $OUT/bench-general.json
wait
