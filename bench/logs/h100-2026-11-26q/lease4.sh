#!/bin/bash
# Fourth call (the budget's last ~280 s): the other GPU test files on this tree, as far as they go.
#   bash bench/logs/h100-2026-11-26q/lease4.sh SECONDS
secs=${1:-270}
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s"
timeout $secs python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_adapter_gpu.py \
  tests/gpu/test_adapter_kernel_paths_gpu.py tests/gpu/test_adapter_mla_gpu.py -k 'not warmup' > $OUT/tests2.log 2>&1
echo "exit $?"; grep -E "passed|failed|^FAILED|^ERROR" $OUT/tests2.log | tail -15; grep -o "^\.\|^F\|^E" $OUT/tests2.log | sort | uniq -c
