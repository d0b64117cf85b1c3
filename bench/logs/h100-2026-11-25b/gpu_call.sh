#!/bin/bash
# One device call of issue 22's GPU tests (2026-11-25, fourth session), then the sweep for what is
# left of the call: STEP=prebuild builds every module the five test files load (one ninja, all
# cores); any other STEP runs them (each file's fixture builds what the prebuild did not finish).
# usage: [GPU_TESTS=files] gpu_call.sh prebuild|STEP SECONDS [sweep args...]   (the first machine: STEP=rest)
step=$1; secs=$2; shift 2
t0=$(date +%s)
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh >/dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi PYTHONUNBUFFERED=1
mkdir -p /tmp/g
if [ "$step" = prebuild ]; then
  timeout -s TERM $((secs - 20)) python3 tests/gpu/prebuild_all.py adapter mla variants >> /tmp/g/prebuild.log 2>&1
  echo "prebuild exit $? after $(( $(date +%s) - t0 )) s" | tee -a /tmp/g/prebuild.log
else
  # GPU_TESTS: the files to run (default: all five); its log is gpu-<step>.log
  files=${GPU_TESTS:-"tests/gpu/test_adapter_gpu.py tests/gpu/test_adapter_mla_gpu.py tests/gpu/test_adapter_variants_gpu.py tests/gpu/test_layer_groups_gpu.py tests/gpu/test_fp8_query_gpu.py"}
  timeout -s TERM $((secs - 20)) python3 -m pytest -q -m gpu -rA -p no:cacheprovider $files >> /tmp/g/gpu-$step.log 2>&1
  echo "pytest exit $? after $(( $(date +%s) - t0 )) s" | tee -a /tmp/g/gpu-$step.log
fi
cp /tmp/g/*.log "$OUT/" 2>/dev/null
tail -5 /tmp/g/*.log
left=$(( secs - ($(date +%s) - t0) ))
if [ "$left" -gt 90 ] && [ $# -gt 0 ]; then bash "$(dirname "$0")/sweep_call.sh" $((left - 15)) "$@"; fi
