#!/bin/bash
# Issue 38's last GPU items in one lease of a 2-GPU host (`nvidia-h100-x2`: 32 cores), run from a copy of
# the carried tree taken at the first call (/tmp/src: later calls re-send the tree, the runs never read it),
# idempotently, once per call, back to back:
#   bash bench/logs/h100-2026-11-26p/lease.sh SECONDS
# The first call starts two chains, each in a process session of its own (setsid: they outlive the call on
# a warm machine), each run with its own empty JIT cache (FLASHINFER_WORKSPACE_BASE):
#   GPU 0, nice 0: S3, the rest of the strength-3 sweep over every non-XQA target (149 probes in 44 modules,
#       ~16,000 CPU-s of builds), resumed from bench/logs/h100-2026-11-26n/s3-results.jsonl;
#   GPU 1, nice 5: XQA, the 7 tier-1/3 probes the exhaustive run never measured (7 modules), then SAMPLE,
#       `attnplan verify --sample 32 --seed 41` (28 modules, ~9,000 CPU-s).
# The sweep comes first (the brief): GPU 1's chain is niced, so it takes the cores the sweep leaves.
# Every call waits up to SECONDS for all three, then copies to $OUT: lease.log, the three runs' new results
# (results logs: only what this lease ran) and logs.tar.gz (stderr tails, reports, summaries).
secs=${1:-560}
L=/tmp/lease-log; S=/tmp/s3; X=/tmp/xq; P=/tmp/sample
mkdir -p $L $S $X $P
if [ ! -f /tmp/src/.copied ]; then
  rm -rf /tmp/src && cp -rL . /tmp/src && touch /tmp/src/.copied
  (cd /tmp/src && find attnplan bench -name '*.py' -o -name '*.yaml' | LC_ALL=C sort | xargs cat | md5sum) > $L/tree.md5
fi
touch $S/results.jsonl $P/results.jsonl
cd /tmp/src
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(nvidia-smi -L | wc -l) GPUs: $(nvidia-smi -L | head -1); tree md5 $(cut -c1-12 $L/tree.md5)" >> $L/lease.log
# One run in the foreground of its chain: NAME DIR GPU NICE COMMAND...; `times` gives the CPU of every
# process it waited for (the probe processes and their nvcc builds included).
cat > /tmp/run1.sh <<'R'
name=$1 dir=$2 gpu=$3 nic=$4; shift 4
[ -f $dir/done ] && exit 0
t0=$(date +%s)
echo "$name starts at $(date -u +%T) on GPU $gpu, nice $nic: $*" >> /tmp/lease-log/lease.log
CUDA_VISIBLE_DEVICES=$gpu FLASHINFER_WORKSPACE_BASE=$dir/fi nice -n $nic "$@" > $dir/stdout.txt 2>> $dir/stderr.log
rc=$?; times > $dir/times
echo "$name exit $rc after $(( $(date +%s) - t0 )) s at $(date -u +%T); machine up $(cut -d' ' -f1 /proc/uptime) s; children user/sys: $(tail -1 $dir/times)" >> /tmp/lease-log/lease.log
touch $dir/done
R
chain() {   # NAME COMMAND-LINE: a process session of its own, started once
  local name=$1; shift
  [ -f $L/$name.done ] && return
  [ -f $L/$name.pid ] && kill -0 "$(cat $L/$name.pid)" 2> /dev/null && return
  setsid nohup bash -c "echo \$\$ > $L/$name.pid; $*; touch $L/$name.done" < /dev/null > /dev/null 2>&1 &
}
chain gpu0 "bash /tmp/run1.sh S3 $S 0 0 python3 -m attnplan verify --sweep --target fa2 --target fa3 \
  --target fa2-mla --target fa3-mla --results-log $S/results.jsonl \
  --resume bench/logs/h100-2026-11-26n/s3-results.jsonl --resume $S/results.jsonl \
  --build-timeout 900 --report $S/report.md --jobs 10 --build-jobs 4"
chain gpu1 "bash /tmp/run1.sh XQA $X 1 5 python3 bench/xqa_exhaustive.py --out $X --tiers 1,3 \
  --resume bench/logs/h100-2026-11-26n/results.jsonl --jobs 7 --build-jobs 2 --build-timeout 900; \
  bash /tmp/run1.sh SAMPLE $P 1 5 python3 -m attnplan verify --sample 32 --seed 41 \
  --results-log $P/results.jsonl --resume $P/results.jsonl --report $P/report.md \
  --build-timeout 1800 --jobs 6 --build-jobs 4"
end=$((SECONDS + secs))
while { [ ! -f $L/gpu0.done ] || [ ! -f $L/gpu1.done ]; } && [ $SECONDS -lt $end ]; do sleep 5; done
echo "collected at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L/lease.log
cp $L/lease.log $OUT/
cp $S/results.jsonl $OUT/s3-results.jsonl; cp $P/results.jsonl $OUT/sample-results.jsonl
[ -f $X/results.jsonl ] && cp $X/results.jsonl $OUT/xqa-results.jsonl
rm -rf /tmp/logs && mkdir -p /tmp/logs
for d in s3:$S xqa:$X sample:$P; do
  n=${d%%:*}; dir=${d#*:}
  [ -f $dir/stderr.log ] && tail -400 $dir/stderr.log > /tmp/logs/$n-stderr-tail.log
  [ -f $dir/stdout.txt ] && [ $n != s3 ] && cp $dir/stdout.txt /tmp/logs/$n-stdout.txt
  for f in report.md report.json summary.md; do [ -f $dir/$f ] && cp $dir/$f /tmp/logs/$n-$f; done
done
tar czf $OUT/logs.tar.gz -C /tmp/logs .
cat $L/lease.log
for d in $S $X $P; do
  echo "== $d: $(grep -c . $d/results.jsonl 2> /dev/null) results"; tail -2 $d/stderr.log 2> /dev/null
  grep -o '"outcome": "[a-z-]*"' $d/results.jsonl 2> /dev/null | sort | uniq -c
done
uptime
