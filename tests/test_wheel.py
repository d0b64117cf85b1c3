"""The built wheel, installed into a fresh venv (not editable, no source tree on sys.path), runs:
version, every shipped rule, a plan, and the REST service answering one plan (issue 11)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from attnplan import __version__
from attnplan.policy import default_ruleset

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNPLAN_RULES")}
    env.update(kw.pop("env", None) or {})
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, **kw)


@pytest.fixture()
def installed(installed_wheel):
    return installed_wheel  # built once per session (tests/conftest.py)


def test_wheel_holds_one_package_and_all_its_data(installed):
    wheel, _venv, _tmp = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert tops == {"attnplan"}
    packs = sorted(Path(p).name for p in (ROOT / "attnplan" / "rules" / "packs").glob("*.yaml"))
    assert packs and all(f"attnplan/rules/packs/{p}" in names for p in packs)
    for f in ("attnplan/rules/backends.yaml", "attnplan/rules/devices.yaml", "attnplan/py.typed",
              "attnplan/rest/static/index.html", "attnplan/adapter/host_step.c", "attnplan/adapter/host_torch.cpp"):
        assert f in names, f
    presets = sorted(p.name for p in (ROOT / "attnplan" / "presets").glob("*.json"))
    assert presets and all(f"attnplan/presets/{p}" in names for p in presets)


def test_cli_from_the_wheel(installed):
    _wheel, venv, tmp = installed
    exe = str(venv / "bin" / "attnplan")
    where = _run([str(venv / "bin" / "python"), "-c", "import attnplan; print(attnplan.__file__)"], tmp)
    assert where.returncode == 0 and str(venv) in where.stdout and str(ROOT) not in where.stdout
    out = _run([exe, "--version"], tmp)
    assert out.returncode == 0 and out.stdout.strip() == f"attnplan {__version__}"
    out = _run([str(venv / "bin" / "python"), "-m", "attnplan", "--version"], tmp)
    assert out.returncode == 0 and out.stdout.strip() == f"attnplan {__version__}"
    out = _run([exe, "rules", "--json"], tmp)
    assert out.returncode == 0, out.stderr
    assert {r["id"] for r in json.loads(out.stdout)["rules"]} == {r.id for r in default_ruleset().rules}
    out = _run([exe, "plan", "--device", "B200", "--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8",
                "--json"], tmp)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["status"] == "ok" and answer["plan"]["decode"]["backend"]
    out = _run([exe, "labels", "--device", "GB300"], tmp)
    assert out.returncode == 0 and "attnplan.io/capability-major=10" in out.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_from_the_wheel(installed):
    _wheel, venv, tmp = installed
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNPLAN_RULES", "ATTNPLAN_TOKEN")}
    proc = subprocess.Popen([str(venv / "bin" / "attnplan"), "serve", "--device", "H100", "--port", str(port),
                             "--log-level", "warning"], cwd=tmp, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        # Generous bounds: a loaded machine (make test beside other jobs) must not fail this test.
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "serve never became ready"
            time.sleep(0.2)
        r = httpx.post(f"{base}/v1/plan", json={"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}},
                       timeout=60)
        assert r.status_code == 200 and r.json()["status"] in ("ok", "rejected") and r.json()["node"]
        presets = httpx.get(f"{base}/v1/presets", timeout=60).json()
        assert {p["name"] for p in presets["presets"]} >= {"llama-3.1-8b", "gpt-oss-120b"}
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_wheel_carries_the_license(installed):
    wheel, _venv, _tmp = installed
    names = zipfile.ZipFile(wheel).namelist()
    lic = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert lic and "Apache License" in zipfile.ZipFile(wheel).read(lic[0]).decode()
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta


def test_wheel_build_gives_no_license_warning(tmp_path):
    p = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), str(ROOT)], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    text = p.stdout + p.stderr
    assert "SetuptoolsDeprecationWarning" not in text and "License classifiers are deprecated" not in text
    assert "project.license` as a TOML table is deprecated" not in text


def test_vllm_extra_agrees_with_vllms_own_pins():
    """Every package the [vllm] extra names is pinned exactly as vLLM 0.33.0's METADATA pins it."""
    import importlib.metadata as md
    import tomllib

    from packaging.requirements import Requirement

    try:
        vllm_reqs = {Requirement(r).name.lower().replace("_", "-"): Requirement(r)
                     for r in md.requires("vllm") or [] if "extra ==" not in r}
    except md.PackageNotFoundError:
        pytest.skip("vllm is not installed: its METADATA is what the extra is checked against")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    ours = [Requirement(r) for r in extra]
    assert md.version("vllm") == "0.33.0" and any(r.name == "vllm" and str(r.specifier) == "==0.33.0" for r in ours)
    for r in ours:
        if r.name == "vllm":
            continue
        key = r.name.lower().replace("_", "-")
        assert key in vllm_reqs, f"{r.name}: not a requirement of vLLM 0.33.0"
        assert r.specifier == vllm_reqs[key].specifier, f"{r}: vLLM 0.33.0 requires {vllm_reqs[key]}"


def test_help_examples_run_from_the_wheel(installed, tmp_path):
    """Every example of `attnplan --help` runs from a wheel install in an empty directory (no
    examples/ there): exit 0 or 1, never 2 (bad input: a missing file). serve and verify are
    left out (a server; a GPU); node runs without the artifactory check (offline)."""
    import shlex

    from attnplan.cli.main import EXAMPLES

    _wheel, venv, _tmp = installed
    lines = [ln.strip().split("  #")[0].split(" > ")[0] for ln in EXAMPLES.splitlines() if ln.startswith("  attnplan ")]
    ran = 0
    for line in lines:
        argv = shlex.split(line)[1:]
        if argv[0] in ("serve", "verify"):
            continue
        p = _run([str(venv / "bin" / "attnplan"), *argv], tmp_path, timeout=300,
                 env={"ATTNPLAN_ARTIFACTORY_CHECK": "never"})
        assert p.returncode in (0, 1), f"{line}: exit {p.returncode}: {p.stderr[-500:]}"
        ran += 1
    assert ran >= 9
