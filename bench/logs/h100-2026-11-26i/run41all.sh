#!/bin/bash
# Issue 41, 2026-11-26 (integrator): bench/logs/h100-2026-11-26i/run41.sh (fused append) and
# bench/logs/h100-2026-11-26j/run41c.sh (per-shape decode choice) in two calls on a one-GPU H100.
#   PART=A: install, one prebuild, the three GPU test files, decode rows xqa + fa2, the choice bench
#   PART=B: decode rows mla-fa3 + mla-fa2, breakdown/profile/general (before/after of the fusion: the
#   rows' adapter_unfused_inplace column, ATTNPLAN_FUSED_APPEND=0 in the same process)
set -o pipefail
bash .gpu-bundle/install.sh >/dev/null
export PYTHONPATH=/tmp/site:$PWD MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
L=bench/logs/h100-2026-11-26i
B="python3 bench/decode_steps.py --issue41"
LIMIT=${LIMIT:-480}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }; t() { echo "== $1 t=$(el)"; }
tm() { local left=$(( LIMIT - $(el) )); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
nvidia-smi -L > $OUT/gpu.txt
{
  ( timeout 240 python3 -c "import time, flashinfer.page as p; t = time.time(); p.get_page_module(); print(f'page module {time.time() - t:.0f}s')" ) &
  timeout 260 python3 $L/prebuild.py
  wait; t prebuild
} > $OUT/prebuild-$PART.log 2>&1
if [ "$PART" = A ]; then
  { timeout $(tm 170) python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_decode_graphs_gpu.py tests/gpu/test_steady_step_gpu.py tests/gpu/test_decode_per_shape_gpu.py -k "not warmup"; t tests; } > $OUT/tests.log 2>&1
  for b in xqa fa2; do
    { t "after $b"; timeout $(tm 80) $B --backends $b --parts decode --out $OUT/a/$b; } >> $OUT/after.log 2>&1
  done
  { t choice; timeout $(tm 120) python3 bench/xqa_vs_fa2.py --phase choice --out $OUT/choice; t "choice end"; } > $OUT/choice.log 2>&1
else
  for b in mla-fa3 mla-fa2; do
    { t "after $b"; timeout $(tm 80) $B --backends $b --parts decode --out $OUT/a/$b; } >> $OUT/after.log 2>&1
  done
  { t "breakdown"; timeout $(tm 70) $B --parts breakdown,profile,general --out $OUT/a/gen; t end; } >> $OUT/after.log 2>&1
fi
cat $OUT/a/*/decode-steps.md > $OUT/decode-steps-$PART.md 2>/dev/null
tar czf $OUT/json-$PART.tgz -C $OUT $(cd $OUT && ls -d a b choice 2>/dev/null) 2>/dev/null; rm -rf $OUT/a $OUT/b
t done
grep -h "^== \|passed\|failed\|prebuilt\|page module\|within 2\|Error" $OUT/*.log | head -60
cut -c1-300 $OUT/decode-steps-$PART.md 2>/dev/null | head -40
