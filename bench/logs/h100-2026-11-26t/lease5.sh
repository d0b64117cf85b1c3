#!/bin/bash
# Fifth call (nvidia-h100-x2, a fresh machine, the session's last ~220 s of device time): MLA prefill's ragged
# parts through the general replay, fa2 (tests/gpu/test_mla_prefill_replay_gpu.py), its prefill modules built
# by the test's fixture with every core.
#   bash bench/logs/h100-2026-11-26t/lease5.sh SECONDS
secs=${1:-150}
[ -f /tmp/site/.installed ] || { bash .gpu-bundle/install.sh > /dev/null && touch /tmp/site/.installed; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAX_JOBS=32 TRITON_CACHE_DIR=/tmp/triton-cache FLASHINFER_WORKSPACE_BASE=/tmp/fi
echo "call at $(date -u +%T), machine up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cores"
timeout $((secs - 15)) python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_mla_prefill_replay_gpu.py \
  2>&1 | tee $OUT/mla-prefill-replay.log | grep -v "^\s*$" | tail -40
