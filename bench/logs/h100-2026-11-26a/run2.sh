set -o pipefail
bash .gpu-bundle/install.sh >/dev/null
export PYTHONPATH=/tmp/site:$PWD MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1
B="python3 bench/decode_steps.py --issue41"
OLD="env PYTHONPATH=/tmp/site:$PWD/build/a41/before"
T0=$(date +%s); t() { echo "== $1 t=$(( $(date +%s)-T0 ))"; }
timeout 300 python3 build/a41/prebuild.py > $OUT/prebuild.log 2>&1; t prebuild | tee -a $OUT/prebuild.log
{ t breakdown; timeout 90 $B --parts breakdown --out $OUT/a/bd; } > $OUT/after.log 2>&1
{ t mla-debug; DECODE_STEPS_CHECK=1 CUDA_LAUNCH_BLOCKING=1 timeout 60 $B --backends mla-fa3 --batches 1 --contexts 1024 --parts decode --out $OUT/dbg; } > $OUT/mla-debug.log 2>&1
for b in xqa fa2 mla-fa3 mla-fa2; do
  { t "after $b"; timeout 70 $B --backends $b --parts decode --out $OUT/a/$b; } >> $OUT/after.log 2>&1
  { t "before $b"; timeout 70 $OLD $B --backends $b --parts decode --out $OUT/b/$b; } >> $OUT/before.log 2>&1
done
for b in xqa fa2; do
  { t "before2 $b"; timeout 60 $OLD $B --backends $b --parts decode --out $OUT/b2/$b; } >> $OUT/before.log 2>&1
  { t "after2 $b"; timeout 60 $B --backends $b --parts decode --out $OUT/a2/$b; } >> $OUT/after.log 2>&1
done
{ t general; timeout 120 $B --parts general,profile --out $OUT/a/gen; t end; } >> $OUT/after.log 2>&1
tar czf $OUT/json.tgz -C $OUT $(cd $OUT && ls -d a a2 b b2 dbg 2>/dev/null) && rm -rf $OUT/a $OUT/a2 $OUT/b $OUT/b2 $OUT/dbg
grep -h "^== " $OUT/*.log; grep -h "\[check\]\|Error" $OUT/mla-debug.log | head
