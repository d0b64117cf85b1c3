# syntax=docker/dockerfile:1
# attnplan REST service (`attnplan serve`), listening on 0.0.0.0:8000 and so requiring a bearer
# token: pass it at run time, never bake it in.
#
#   docker build -t attnplan .                                   # CPU image (python:3.11-slim)
#   docker build --build-arg VARIANT=gpu -t attnplan:gpu .       # CUDA runtime base + the `gpu` extra
#   docker run --rm -p 8000:8000 -e ATTNPLAN_TOKEN=... attnplan  # add --gpus all for the GPU image
#
# The pins are the Makefile's (tests/test_dockerfile.py checks they stay identical). The image
# installs the wheel `pip wheel .` builds from this tree: the one tests/test_wheel.py installs
# into a fresh venv and runs (rule packs, catalogs, status page and presets all inside it).

ARG VARIANT=cpu
ARG CUDA_IMAGE=nvidia/cuda:12.9.1-runtime-ubuntu24.04

# Both bases end with a Python virtualenv on PATH, so every later step is the same for both.
FROM python:3.11-slim AS base-cpu
RUN python3 -m venv /opt/venv

FROM ${CUDA_IMAGE} AS base-gpu
ARG DEBIAN_FRONTEND=noninteractive
# Ubuntu's python3 revisions move with its security updates; the CUDA image tag pins the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

# The builder shares the runtime's base, so binary wheels match the runtime's Python. base-* are
# the stages above (their images are tagged there); hadolint cannot resolve the variable.
# hadolint ignore=DL3006
FROM base-${VARIANT} AS builder
ARG VARIANT
ENV PATH=/opt/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY attnplan/ attnplan/
RUN if [ "$VARIANT" = "gpu" ]; then \
        pip wheel --no-cache-dir --wheel-dir /wheels ".[gpu]" "torch==2.13.0" "flashinfer-python==0.7.2.post1" "apache-tvm-ffi==0.1.15.post2"; \
    else \
        pip wheel --no-cache-dir --wheel-dir /wheels .; \
    fi

# hadolint ignore=DL3006
FROM base-${VARIANT} AS runtime
ARG VARIANT
ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Offline install from the builder's wheels only (--no-index): the versions are the ones pinned
# and built above, so the unpinned name cannot float.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    if [ "$VARIANT" = "gpu" ]; then extra="[gpu]"; else extra=""; fi \
    && pip install --no-cache-dir --no-index --find-links /wheels "attnplan${extra}" \
    && groupadd --system --gid 10001 attnplan \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin attnplan
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
# Not loopback, so `serve` refuses to start without ATTNPLAN_TOKEN (exit 2, one line saying so).
CMD ["attnplan", "serve", "--host", "0.0.0.0", "--port", "8000"]
