set -o pipefail
bash .gpu-bundle/install.sh >/dev/null
export PYTHONPATH=/tmp/site:$PWD MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1
T0=$(date +%s)
{ nvidia-smi; python3 -c "import torch, flashinfer; print(torch.__version__, flashinfer.__version__)"; } > $OUT/prebuild.log 2>&1
timeout ${PB:-300} python3 build/a41/prebuild.py >> $OUT/prebuild.log 2>&1; echo "prebuild rc=$? t=$(( $(date +%s)-T0 ))" | tee -a $OUT/prebuild.log
if [ -z "$SKIP_TESTS" ]; then
timeout ${TT:-200} python3 -m pytest -q -s -m gpu tests/gpu/test_decode_graphs_gpu.py tests/gpu/test_steady_step_gpu.py > $OUT/tests.log 2>&1; echo "tests rc=$? t=$(( $(date +%s)-T0 ))" | tee -a $OUT/tests.log
tail -5 $OUT/tests.log
fi
timeout ${TA:-260} python3 bench/decode_steps.py --issue41 --out $OUT/after > $OUT/bench-after.log 2>&1; echo "after rc=$? t=$(( $(date +%s)-T0 ))" | tee -a $OUT/bench-after.log
if [ -z "$SKIP_BEFORE" ]; then
PYTHONPATH=/tmp/site:$PWD/build/a41/before timeout ${TB:-150} python3 bench/decode_steps.py --issue41 --skip-general --out $OUT/before > $OUT/bench-before.log 2>&1; echo "before rc=$? t=$(( $(date +%s)-T0 ))" | tee -a $OUT/bench-before.log
fi
tar czf $OUT/json.tgz -C $OUT $(cd $OUT && ls -d after before 2>/dev/null) && rm -rf $OUT/after $OUT/before
grep -h "^|" $OUT/bench-*.log | head -80
