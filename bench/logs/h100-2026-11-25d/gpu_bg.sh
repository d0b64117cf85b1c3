#!/bin/bash
# Every GPU test on this tree in one run (issue 22, sixth session): the modules of every test file
# prebuilt in one parallel ninja, then `pytest -m gpu tests/gpu`, all under setsid (it survives a call's
# end on a warm machine); each call waits up to SECONDS and copies the logs to $OUT. The GPU tests
# are tests/gpu (`make test-gpu`; collecting all of tests/ needs the CPU suite's packages, e.g.
# schemathesis, which the device has not). The run logged here named tests/test_verify_gpu.py
# beside tests/gpu: it has since moved into tests/gpu.
# usage: gpu_bg.sh SECONDS
secs=${1:-540}
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh >/dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fig PYTHONUNBUFFERED=1
mkdir -p /tmp/g
if [ ! -f /tmp/g/done ] && ! pgrep -f "prebuild_all.py|pytest -q -m gpu" > /dev/null; then
  setsid nohup bash -c "t0=\$(date +%s); python3 tests/gpu/prebuild_all.py new_paths adapter mla variants graphs \
      > /tmp/g/prebuild.log 2>&1; echo \"prebuild exit \$? after \$(( \$(date +%s) - t0 )) s\" >> /tmp/g/prebuild.log; \
    python3 -m pytest -q -m gpu -rA -p no:cacheprovider tests/gpu > /tmp/g/gpu-all.log 2>&1; \
    echo \"pytest exit \$? after \$(( \$(date +%s) - t0 )) s\" >> /tmp/g/gpu-all.log; touch /tmp/g/done" \
    < /dev/null > /dev/null 2>&1 &
fi
end=$((SECONDS + secs))
while [ ! -f /tmp/g/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
[ -f /tmp/g/done ] && echo done || echo "still running"
cp /tmp/g/*.log "$OUT/" 2>/dev/null
uptime; tail -3 /tmp/g/prebuild.log; tail -5 /tmp/g/gpu-all.log 2>/dev/null
