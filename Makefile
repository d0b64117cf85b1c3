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
	# flashinfer-python only for its real function signatures (trtllm-gen argument tests);
	# --no-deps keeps its CUDA-side requirements out of the CPU venv.
	$(BIN)/pip install -q --no-deps "flashinfer-python==0.7.2.post1" "apache-tvm-ffi==0.1.15.post2" || true
	@command -v chromium >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "note: chromium not installed; browser tests will be skipped")
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/attnplan serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/hadolint Dockerfile
	$(BIN)/python -m pytest -q -m "not gpu" tests

test-gpu:
	python3 -m pytest -q -m gpu tests

wheel: $(STAMP)
	$(BIN)/pip wheel --no-deps -q -w dist .
	@ls dist/attnplan-*.whl

matrix: $(STAMP)
	$(BIN)/attnplan matrix --format markdown > docs/capability-matrix.md

bench: $(STAMP)
	$(BIN)/python bench/plan_latency.py

clean:
	rm -rf $(VENV) build dist *.egg-info
