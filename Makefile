# Everything sets itself up: a fresh clone needs only python3 (3.10+) and, for the
# browser tests, Debian's chromium (installed here when apt-get is usable).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
HOST    ?= 127.0.0.1
PORT    ?= 8000

.PHONY: run test test-gpu bench matrix lint clean setup wheel

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel from local disk; never let a resolver pick a CUDA build.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev,cluster]"
	# vLLM 0.33.0 for its own argument parser and config objects (tests/test_vllm_real.py): the
	# wheel without its dependencies (they would resolve a CUDA torch), plus the pure-Python ones
	# `from vllm.engine.arg_utils import EngineArgs` needs. Never install the [vllm] extra here.
	# vLLM 0.33.0 itself pins torch==2.14.0 (the [vllm] extra follows it); no CPU build of 2.14 is on
	# local disk, and the parser and config objects run on the 2.13.0 CPU wheel.
	$(BIN)/pip install -q "torch==2.13.0" "transformers>=5.16.1,<5.21.0" "huggingface_hub>=1.31.0"
	$(BIN)/pip install -q --no-deps "vllm==0.33.0" cbor2 psutil pyzmq aiohttp multidict yarl propcache \
	  aiohappyeyeballs aiosignal frozenlist openai-harmony openai sniffio msgspec cloudpickle pillow pybase64 \
	  cachetools uvloop py-cpuinfo partial-json-parser "xgrammar==0.2.8" "llguidance>=1.7.0,<1.8.0" einops
	# flashinfer-python only for its real function signatures (trtllm-gen argument tests);
	# --no-deps keeps its CUDA-side requirements out of the CPU venv.
	$(BIN)/pip install -q --no-deps "flashinfer-python==0.7.2.post1" "apache-tvm-ffi==0.1.15.post2" || true
	# SGLang 0.5.23's own source for its oracle (tests/test_sglang.py runs a seeded sample of it): the wheel
	# downloaded without its dependencies and only sglang/srt unpacked - SGLang is never installed here.
	$(BIN)/pip download -q --no-deps --only-binary=:all: "sglang==0.5.23" -d $(VENV)/sglang-whl && \
	  $(BIN)/python -c "import glob, zipfile; z = zipfile.ZipFile(glob.glob('$(VENV)/sglang-whl/sglang-0.5.23-*.whl')[0]); \
	  z.extractall('$(VENV)/sglang-src', [n for n in z.namelist() if n.startswith('sglang/srt/')])" && \
	  rm -rf $(VENV)/sglang-whl || echo "note: SGLang 0.5.23's source not fetched; its oracle test will be skipped"
	# SGLang 0.5.21 / 0.5.22's sglang/srt for the per-release oracle (issue 42: tests/test_sglang_releases.py), as above
	for v in 0.5.21 0.5.22; do \
	  $(BIN)/pip download -q --no-deps --only-binary=:all: "sglang==$$v" -d $(VENV)/sglang-whl-$$v && \
	  $(BIN)/python -c "import glob, sys, zipfile; v = sys.argv[1]; z = zipfile.ZipFile(glob.glob(f'$(VENV)/sglang-whl-{v}/sglang-{v}-*.whl')[0]); \
	  z.extractall(f'$(VENV)/releases/sglang-{v}', [n for n in z.namelist() if n.startswith('sglang/srt/')])" $$v && \
	  rm -rf $(VENV)/sglang-whl-$$v || echo "note: SGLang $$v's source not fetched; its oracle tests will be skipped"; \
	done
	# vLLM 0.31.0 and 0.32.0's Python code for the oracle's per-release runs (tests/test_oracle_releases.py): the
	# wheels without dependencies, unpacked under .venv/releases (no .so), never installed.
	$(BIN)/python scripts/vllm_releases.py 0.31.0 0.32.0 || \
	  echo "note: vLLM 0.31.0/0.32.0's code not fetched; their oracle tests will be skipped"
	# FlashInfer's trtllm-gen selection headers per release (issue 42: tests/test_trtllm_select_releases.py):
	# only the files attnplan/oracle/trtllm_gen.py compiles, the wheels are deleted after extraction
	for v in 0.6.13 0.6.18 0.7.0.post1 0.7.1 0.7.2; do \
	  bash scripts/trtllm_release_headers.sh $$v $(VENV)/releases/flashinfer-$$v $(BIN)/pip >/dev/null || \
	  echo "note: FlashInfer $$v's headers not fetched; its trtllm-gen oracle tests will be skipped"; \
	done
	@command -v chromium >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "note: chromium not installed; browser tests will be skipped")
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/attnplan serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/hadolint Dockerfile
	ATTNPLAN_SGLANG_SRC=$(CURDIR)/$(VENV)/sglang-src/sglang/srt $(BIN)/python -m pytest -q -m "not gpu" tests

# GPU tests: the venv's python (on a GPU node, with a CUDA torch in .venv), or GPU_PY=python3 where
# the system python has torch and scripts/gpu-bundle.sh's bundle is installed (README: GPU tests).
GPU_PY ?= $(BIN)/python
test-gpu:
	$(GPU_PY) -m pytest -q -m gpu tests/gpu

# The wheel needs only pip and the build backend (fetched into pip's isolated build env), never
# the 3 GB dev venv.
wheel:
	$(PY) -m pip wheel --no-deps -q -w dist .
	@ls dist/attnplan-*.whl

matrix: $(STAMP)
	$(BIN)/attnplan matrix --format markdown > docs/capability-matrix.md

bench: $(STAMP)
	$(BIN)/python bench/plan_latency.py

clean:
	rm -rf $(VENV) build dist *.egg-info
