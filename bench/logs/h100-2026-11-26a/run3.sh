set -o pipefail
bash .gpu-bundle/install.sh >/dev/null
export MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1
NEW="env PYTHONPATH=/tmp/site:$PWD/build/a41/after"
OLD="env PYTHONPATH=/tmp/site:$PWD/build/a41/before"
B="python3 bench/decode_steps.py --issue41"
T0=$(date +%s); t() { echo "== $1 t=$(( $(date +%s)-T0 ))"; }
{ nvidia-smi -L; timeout 300 $NEW python3 build/a41/prebuild.py; t prebuild; } > $OUT/prebuild.log 2>&1
{ timeout 200 $NEW python3 -P -m pytest -q -s -m gpu tests/gpu/test_decode_graphs_gpu.py tests/gpu/test_steady_step_gpu.py; t tests; } > $OUT/tests.log 2>&1
for b in xqa fa2 mla-fa3 mla-fa2; do
  { t "after $b"; timeout 60 $NEW $B --backends $b --parts decode --out $OUT/a/$b; } >> $OUT/after.log 2>&1
  { t "before $b"; timeout 60 $OLD $B --backends $b --parts decode --out $OUT/b/$b; } >> $OUT/before.log 2>&1
done
for b in xqa fa2; do
  { t "before2 $b"; timeout 50 $OLD $B --backends $b --parts decode --out $OUT/b2/$b; } >> $OUT/before.log 2>&1
  { t "after2 $b"; timeout 50 $NEW $B --backends $b --parts decode --out $OUT/a2/$b; } >> $OUT/after.log 2>&1
done
{ t general; timeout 150 $NEW $B --parts breakdown,general,profile --out $OUT/a/gen; t end; } >> $OUT/after.log 2>&1
tar czf $OUT/json.tgz -C $OUT $(cd $OUT && ls -d a a2 b b2 2>/dev/null) && rm -rf $OUT/a $OUT/a2 $OUT/b $OUT/b2
grep -h "^== \|passed\|failed" $OUT/*.log | head -40
