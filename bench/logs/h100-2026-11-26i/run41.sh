# Issue 41 (fused metadata + K/V append, FlashInfer's own append baseline, fa2 host-gap parts):
# one device call of <= 9 min on a one-GPU H100. Run from the repository root with the bundle
# carried (.gpu-bundle) and $OUT set:   bash bench/logs/h100-2026-11-26i/run41.sh
#   AFTER  = the tree under test (default: this checkout)
#   BEFORE = HEAD's tree for the optional before rows (default: build/a41/before; skipped if absent
#            or out of time). The fusion itself is also compared in-process: every decode row has
#            "adapter_unfused_inplace" (ATTNPLAN_FUSED_APPEND=0: metadata launch + kv_cache.append).
set -o pipefail
bash .gpu-bundle/install.sh >/dev/null
export MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
L=bench/logs/h100-2026-11-26i
AFTER=${AFTER:-$PWD}
BEFORE=${BEFORE:-$PWD/build/a41/before}
NEW="env PYTHONPATH=/tmp/site:$AFTER"
OLD="env PYTHONPATH=/tmp/site:$BEFORE"
B="python3 bench/decode_steps.py --issue41"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
t() { echo "== $1 t=$(el)"; }
# A timeout no later than 525 s after the start (the call's limit is 540): min(want, what is left).
tm() { local left=$(( 525 - $(el) )); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
{
  nvidia-smi -L
  ( timeout 240 $NEW python3 -c "import time, flashinfer.page as p; t = time.time(); p.get_page_module(); print(f'page module {time.time() - t:.0f}s')" ) &
  timeout 260 $NEW python3 $L/prebuild.py
  wait
  t prebuild
} > $OUT/prebuild.log 2>&1
{ timeout $(tm 220) $NEW python3 -P -m pytest -q -s -m gpu tests/gpu/test_decode_graphs_gpu.py tests/gpu/test_steady_step_gpu.py; t tests; } > $OUT/tests.log 2>&1
for b in xqa fa2 mla-fa3 mla-fa2; do
  [ "$(tm 90)" -gt 20 ] || { t "skip after $b (time)"; continue; }
  { t "after $b"; timeout $(tm 90) $NEW $B --backends $b --parts decode --out $OUT/a/$b; } >> $OUT/after.log 2>&1
done
[ "$(tm 60)" -gt 20 ] && { t "breakdown"; timeout $(tm 60) $NEW $B --parts breakdown,profile,general --out $OUT/a/gen; t end; } >> $OUT/after.log 2>&1
if [ -d "$BEFORE/attnplan" ]; then
  for b in xqa fa2; do
    [ "$(tm 45)" -gt 25 ] || { t "skip before $b (time)" >> $OUT/before.log; continue; }
    { t "before $b"; timeout $(tm 45) $OLD $B --backends $b --parts decode --out $OUT/b/$b; } >> $OUT/before.log 2>&1
  done
fi
cat $OUT/a/*/decode-steps.md > $OUT/decode-steps-after.md 2>/dev/null
tar czf $OUT/json.tgz -C $OUT $(cd $OUT && ls -d a b 2>/dev/null) && rm -rf $OUT/a $OUT/b
t done >> $OUT/after.log
grep -h "^== \|passed\|failed\|prebuilt\|page module" $OUT/*.log | head -40
cat $OUT/decode-steps-after.md 2>/dev/null | cut -c1-400
