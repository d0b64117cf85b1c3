"""Fixtures shared by test modules. ``installed_wheel``: attnplan built into a wheel and installed
into a fresh venv, once per session (tests/test_wheel.py and tests/test_readme.py both run it).
``planned_requests``: every request the one pipeline (attnplan/request.py ``plan_request``) plans."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# vLLM picks its platform once per process, when first imported: several test modules import it (its parser,
# its config objects), in whatever order pytest collects them - every one of them gets the CPU platform.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def run_clean(cmd: list[str], cwd: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """A command with no source tree on its path (PYTHONPATH, VIRTUAL_ENV, ATTNPLAN_RULES dropped)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNPLAN_RULES")}
    env.update(kw.pop("env", {}) or {})
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, **kw)


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(wheel, venv, tmp): ``pip wheel --no-deps .`` installed with its dependencies from the
    configured indexes into a new venv."""
    tmp = tmp_path_factory.mktemp("wheel")
    built = run_clean([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(ROOT)], tmp)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp / "dist").glob("attnplan-*.whl"))
    venv = tmp / "venv"
    assert run_clean([sys.executable, "-m", "venv", str(venv)], tmp).returncode == 0
    pip = run_clean([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], tmp)
    assert pip.returncode == 0, pip.stderr[-2000:]
    return wheel, venv, tmp


def pytest_collection_modifyitems(session, config, items):
    """tests/test_vllm_real.py builds real VllmConfigs: vLLM reads its platform and registered ops once per
    process, and other modules import vLLM's parser or run its selection code under a patched platform
    (the oracles) - so its tests run first, in a vLLM nobody has touched yet."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/test_vllm_real.py") else 1)


@pytest.fixture
def planned_requests(monkeypatch) -> list:
    """Every ``plan_request`` call's request, in order, the call itself unchanged: spied under each name it is
    imported as (attnplan/request.py, attnplan/lines.py for launch lines, attnplan/compare.py)."""
    import attnplan.compare as cmp
    import attnplan.lines as lines
    import attnplan.request as req

    seen: list = []
    real = req.plan_request

    def wrapped(request, *a, **kw):
        seen.append(request)
        return real(request, *a, **kw)

    for mod in (req, lines, cmp):
        monkeypatch.setattr(mod, "plan_request", wrapped)
    return seen
