#!/bin/bash
# Issue 38's last GPU items in one lease of a 4-GPU host (`nvidia-h100-x4`: 64 cores, counted at 100 %),
# run from a clean snapshot of HEAD (.lease-src, with .gpu-bundle linked in), idempotently, once per call:
#   bash bench/logs/h100-2026-11-26n/lease.sh SECONDS
# The first call starts two runs, each in a process session of its own (setsid: they outlive the call on a
# warm machine), each with its own empty JIT cache and its own GPU, sharing the 64 cores:
#   T5 (GPU 1): bench/xqa_exhaustive.py tier 5 resumed from bench/logs/h100-2026-11-26m/results.jsonl
#       (what is left: fp16 q_len 4 groups 10-32, ~318 XQA modules, ~10,700 CPU-s of builds);
#   S3 (GPU 0): `attnplan verify --sweep` (default strength 3) over every target but XQA's (the exhaustive
#       XQA run covers every accepted XQA module): 783 probes, ~145 modules, ~52,000 CPU-s of builds.
# Every call waits up to SECONDS for both, then copies what exists to $OUT (results, logs, reports).
secs=${1:-560}
T=/tmp/t5; S=/tmp/s3; L=/tmp/lease-log
[ -f /tmp/src/.copied ] || { rm -rf /tmp/src && cp -rL . /tmp/src && touch /tmp/src/.copied; }
mkdir -p $T $S $L
[ -s $T/results.jsonl ] || cp bench/logs/h100-2026-11-26m/results.jsonl $T/results.jsonl
touch $S/results.jsonl
cd /tmp/src
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, $(nvidia-smi -L | wc -l) GPUs: $(nvidia-smi -L | head -1)" >> $L/lease.log
start() {   # name dir gpu command...
  local name=$1 dir=$2 gpu=$3; shift 3
  [ -f $dir/done ] && return
  [ -f $dir/pid ] && kill -0 "$(cat $dir/pid)" 2> /dev/null && return
  CUDA_VISIBLE_DEVICES=$gpu FLASHINFER_WORKSPACE_BASE=$dir/fi setsid nohup bash -c "
    echo \$\$ > $dir/pid; t0=\$(date +%s)
    echo \"$name starts at \$(date -u +%T): $*\" >> $L/lease.log
    $* > $dir/stdout.jsonl 2>> $dir/stderr.log
    echo \"$name exit \$? after \$(( \$(date +%s) - t0 )) s; machine up \$(cut -d' ' -f1 /proc/uptime) s\" >> $L/lease.log
    touch $dir/done" < /dev/null > /dev/null 2>&1 &
}
start T5 $T 1 python3 bench/xqa_exhaustive.py --out $T --tiers 5 --jobs 16 --build-jobs 2 --resume $T/results.jsonl
start S3 $S 0 python3 -m attnplan verify --sweep --target fa2 --target fa3 --target fa2-mla --target fa3-mla \
  --calibrate $S/tol.yaml --results-log $S/results.jsonl --resume $S/results.jsonl --report $S/report.md \
  --jobs 16 --build-jobs 8
end=$((SECONDS + secs))
while { [ ! -f $T/done ] || [ ! -f $S/done ]; } && [ $SECONDS -lt $end ]; do sleep 5; done
mkdir -p $OUT/t5 $OUT/s3
cp $L/lease.log $OUT/
cp $T/results.jsonl $OUT/t5/ 2> /dev/null; [ -f $T/summary.md ] && cp $T/summary.md $OUT/t5/
[ -f $T/stderr.log ] && tail -300 $T/stderr.log > $OUT/t5/stderr-tail.log
for f in results.jsonl report.md tol.yaml; do [ -f $S/$f ] && cp $S/$f $OUT/s3/; done
[ -f $S/report.json ] && gzip -c $S/report.json > $OUT/s3/report.json.gz
[ -f $S/stderr.log ] && tail -300 $S/stderr.log > $OUT/s3/stderr-tail.log
cat $L/lease.log
echo "T5: $(grep -c . $T/results.jsonl) results"; tail -2 $T/stderr.log 2> /dev/null
grep -o '"outcome": "[a-z-]*"' $T/results.jsonl | sort | uniq -c
echo "S3: $(grep -c . $S/results.jsonl) results"; tail -3 $S/stderr.log 2> /dev/null
grep -o '"outcome": "[a-z-]*"' $S/results.jsonl | sort | uniq -c
uptime
