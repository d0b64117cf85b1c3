#!/usr/bin/env bash
# The FlashInfer files the trtllm-gen oracle compiles (attnplan/oracle/trtllm_gen.py VERBATIM: exception.h,
# trtllm/common.h, trtllm/fmha/{fmhaKernels.cuh,fmhaRunner.cuh,fmhaRunnerParams.h}), plus the release's
# _build_meta.py (its __version__: the oracle reads which release the headers are) and csrc/trtllm_fmha_kernel_launcher.cu (what
# the harness mirrors), for one flashinfer-python release: its wheel is downloaded without dependencies, those
# files are extracted into DEST/flashinfer/..., and the wheel is deleted (KEEP_WHEEL=1 keeps it). Then
#   python -m attnplan.oracle.trtllm_gen --release VER --include DEST
# runs the oracle, and tests/test_trtllm_select_releases.py finds DEST at .venv/releases/flashinfer-VER
# (or $FLASHINFER_RELEASE_HEADERS/VER).   Usage: scripts/trtllm_release_headers.sh VER DEST [PIP]
set -euo pipefail
ver="$1"; dest="$2"; pip="${3:-.venv/bin/pip}"
py="$(dirname "$pip")/python"; [ -x "$py" ] || py=python3
mkdir -p "$dest"
shopt -s nullglob
whls=("$dest"/flashinfer_python-"$ver"-*.whl)
if [ ${#whls[@]} -eq 0 ]; then
  "$pip" download -q --no-deps --only-binary=:all: "flashinfer-python==$ver" -d "$dest"
  whls=("$dest"/flashinfer_python-"$ver"-*.whl)
fi
"$py" - "${whls[0]}" "$dest" <<'PY'
import sys, zipfile
inc = "flashinfer/data/include/flashinfer/"
want = ["flashinfer/_build_meta.py", "flashinfer/data/csrc/trtllm_fmha_kernel_launcher.cu"] + [inc + f for f in (
    "exception.h", "trtllm/common.h", "trtllm/fmha/fmhaKernels.cuh", "trtllm/fmha/fmhaRunner.cuh",
    "trtllm/fmha/fmhaRunnerParams.h")]
z = zipfile.ZipFile(sys.argv[1])
missing = [n for n in want if n not in z.namelist()]
if missing:
    sys.exit(f"{sys.argv[1]} lacks {missing}")
z.extractall(sys.argv[2], want)
PY
[ "${KEEP_WHEEL:-0}" = 1 ] || rm -f "${whls[@]}"
echo "$dest/flashinfer/data/include"
