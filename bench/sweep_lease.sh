#!/bin/bash
# The whole `attnplan verify --sweep` in one device lease, from an empty JIT cache: issue 22's
# "the full sweep fits one device lease (<= 30 min)". It is compile-bound: on the H100 machine's
# 16 cores the JIT builds alone take at least 33 minutes (bench/sweep_cost.py, bench/RESULTS.md),
# so it needs a host of 18 or more cores (nvidia-h200-x2: 32, capability 9.0 like the H100). That was
# the pairwise sweep (--strength 2: 209 modules); the default 3-way covering of the compiled factors
# (issue 38) is 1,244 probes in 597 modules (452 XQA, 29 fa3 prefill, 56 fa2 prefill, 36 sink, 24 other),
# about 64,000 CPU-s by the per-module costs of bench/RESULTS.md: about 33 minutes on 32 cores.
#
# Run it from the checkout root on the GPU machine, with the bundle carried
# (bash ../shared/device/make-bundle.sh; carry .gpu-bundle), once per device call:
#
#   bash bench/sweep_lease.sh SECONDS [attnplan verify args...]     e.g. 570 --jobs 8
#   bash bench/sweep_lease.sh SECONDS -- COMMAND...                   any other long run the same way, e.g.
#       570 -- python3 bench/xqa_exhaustive.py --out /tmp/lease --tiers 0,1,2 --jobs 16 --resume /tmp/lease/results.jsonl
#   (COMMAND writes its files into /tmp/lease; the same list is copied back)
#
# The first call starts the sweep in a process session of its own (setsid): the device tool ends a
# call's processes when it returns, but a session of its own keeps running on a warm machine, so
# no JIT build is cut off at a call's 10-minute limit. Every call waits up to SECONDS for it and
# copies what it has to $OUT: results.jsonl (resume from it), report.md/.json, tol.yaml,
# stderr.log and lease.log, whose last line says how long the machine had been up when the sweep
# ended (the lease) and how long the sweep itself took, on how many cores.
# Make the next call as soon as one returns: a warm machine goes back after 30 s idle (device
# README), and the run with it (2026-11-26: machine 1 of bench/logs/h100-2026-11-26g was lost so).
secs=${1:-570}; shift
here=/tmp/lease
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
# An empty JIT cache of its own: what the run costs from nothing, not what an earlier run left.
export PYTHONPATH=/tmp/site:$PWD FLASHINFER_WORKSPACE_BASE=$here/fi PYTHONUNBUFFERED=1
mkdir -p $here && touch $here/results.jsonl
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(grep -c . $here/results.jsonl) results" >> $here/lease.log
if [ "$1" = "--" ]; then
  shift; cmd="$*"
else
  cmd="python3 -m attnplan verify --sweep --calibrate $here/tol.yaml --results-log $here/results.jsonl \
      --resume $here/results.jsonl --report $here/report.md $*"
fi
# The run's own pid (not a pattern over every process's command line: another run's would match).
if [ ! -f $here/done ] && ! { [ -f $here/pid ] && kill -0 "$(cat $here/pid)" 2> /dev/null; }; then
  # The run reads its code from a copy outside the carried tree: each call re-sends the working tree and
  # replaces carried paths, which once pulled the files from under a running sweep (1,046 false errors,
  # bench/logs/h100-2026-11-26k/README.md). A new run takes a fresh copy; a running one keeps its own.
  rm -rf $here/src && mkdir -p $here/src && tar ch --exclude=./.git --exclude=./.lease-src . | tar x -C $here/src
  cd $here/src && export PYTHONPATH=/tmp/site:$here/src
  setsid nohup bash -c "echo \$\$ > $here/pid; t0=\$(date +%s); echo \"run starts at \$(date -u +%T) on \$(nproc) cores: $cmd\" >> $here/lease.log; \
    $cmd > $here/stdout.jsonl 2>> $here/stderr.log; rc=\$?; \
    echo \"run exit \$rc after \$(( \$(date +%s) - t0 )) s on \$(nproc) cores; machine up \$(cut -d' ' -f1 /proc/uptime) s\" >> $here/lease.log; \
    touch $here/done" < /dev/null > /dev/null 2>&1 &
fi
end=$((SECONDS + secs))
while [ ! -f $here/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
[ -f $here/done ] && echo done || echo "still running"
# At most 8 files come back (device README); report.json (16 MB for the exhaustive run) stays behind.
for f in results.jsonl stderr.log lease.log report.md summary.md sweep.jsonl sweep.md tol.yaml; do
  [ -f $here/$f ] && cp $here/$f "$OUT/"
done
tail -2 $here/lease.log; tail -3 $here/stderr.log
grep -o '"outcome": "[a-z-]*"' $here/results.jsonl | sort | uniq -c
