"""The vLLM oracle against each vLLM release it can run (issue 42): 0.31.0 and 0.32.0 from their code unpacked
by scripts/vllm_releases.py into .venv/releases (skipped where absent), each judged against attnplan's
``--engine vllm==<release>`` layer on a seeded sample; every release's own ``vllm serve`` flag table is shipped.

Where attnplan does not model a release yet (``vllm==X`` is refused), the oracle compares the release's code with
the newest modelled layer and says so: the sample's agreement is then skipped, and the configurations whose answer
changed between releases (CHANGED) are an expected failure (strict: vLLM X's code differs from 0.33's layer there);
both turn into plain assertions as soon as the rules model X (no edit here).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RELEASES_DIR = Path(os.environ.get("ATTNPLAN_VLLM_RELEASES") or ROOT / ".venv" / "releases")
RELEASES = ("0.31.0", "0.32.0")
CONFIGS = 40   # x 9 capabilities = 360 cases per release, seeded
sys.path.insert(0, str(ROOT / "scripts"))
import vllm_releases  # noqa: E402

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None or importlib.util.find_spec("flashinfer") is None,
                                reason="the oracle needs vLLM's dependencies and flashinfer's sources installed")


def _present(release: str) -> bool:
    return (RELEASES_DIR / f"vllm-{release}" / "vllm" / "__init__.py").is_file()


def _modelled(release: str) -> bool:
    """attnplan answers --engine vllm==<release> (the rules' engines.vllm covers it)."""
    from attnplan.errors import InvalidInputError
    from attnplan.policy import default_ruleset, parse_engine

    try:
        parse_engine(f"vllm=={release}", default_ruleset())
        return True
    except InvalidInputError:
        return False


def _release(release: str):
    return pytest.param(release, marks=pytest.mark.skipif(
        not _present(release), reason=f"vLLM {release}'s code is not at {RELEASES_DIR} (python scripts/vllm_releases.py {release})"))


_FIGURES: dict[str, tuple[int, dict]] = {}


def _oracle(release: str) -> tuple[int, dict]:
    if release not in _FIGURES:
        env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}
        out = subprocess.run([sys.executable, "-m", "attnplan.oracle.vllm", "--release", release, "--configs", str(CONFIGS),
                              "--seed", "21", "--show", "20", "--json"], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=900)
        assert out.stdout.strip(), out.stderr[-3000:]
        _FIGURES[release] = (out.returncode, json.loads(out.stdout))
    return _FIGURES[release]


@needs_vllm
@pytest.mark.parametrize("release", [_release(r) for r in RELEASES])
def test_the_oracle_runs_the_releases_own_code(release):
    """The process judged vLLM <release>'s code (vllm_env refuses any other), over every field and capability,
    against attnplan's layer for that release - or, while the rules do not model it, the newest one, said so."""
    rc, s = _oracle(release)
    assert s["vllm"] == release
    assert s["cases"] == CONFIGS * 9
    assert set(s["capabilities"]) == {"8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"}
    for f, c in s["fields"].items():
        assert c.get("agree", 0) >= 30, (f, c)
    if _modelled(release):
        assert s["attnplan_engine"] == f"vllm=={release}" and s["note"] is None
    else:
        assert s["attnplan_engine"] != f"vllm=={release}" and release in s["note"]
    # what the release's flashinfer.py defines, which the oracle's inline builder lines branch on
    assert s["release_features"] == {"nvfp4_fa2": release != "0.31.0", "fa2_native_decode": False,
                                     "trtllm_dcp_prefill": False}


@needs_vllm
@pytest.mark.parametrize("release", [
    pytest.param(r, marks=[*_release(r).marks, pytest.mark.skipif(
        not _modelled(r), reason=f"attnplan does not model vLLM {r} yet: the sample is judged once the rules do "
                                 f"(test_what_changed_between_releases_is_modelled holds the differences meanwhile)")])
    for r in RELEASES])
def test_every_field_agrees_outside_the_named_exceptions(release):
    rc, s = _oracle(release)
    bad = {f: c for f, c in s["fields"].items() if c.get("differ")}
    assert not bad, json.dumps(s["first_disagreements"], indent=1, default=str)[:6000]
    assert rc == 0


# Configurations whose answer changed between releases (the diff of the releases' vllm/v1/attention/backends/
# flashinfer.py, read in /tmp/h/vllm-releases.md): each release's vLLM code must agree with attnplan's layer for it.
_DCP = dict(dtype="bf16", kv_cache_dtype="auto", num_qo_heads=16, num_kv_heads=2, head_dim=128, dcp=2)
_NVFP4 = dict(dtype="bf16", kv_cache_dtype="nvfp4", num_qo_heads=16, num_kv_heads=2, head_dim=128)
CHANGED = [
    # 0.33.0 added the trtllm-gen DCP context pass (TrtllmDCPContextWrapper): 0.31/0.32 prefill under DCP with fa2
    {"capability": 100, **_DCP}, {"capability": 103, **_DCP, "block_size": 64},
    # 0.32.0 added the fa2 NVFP4 path (_nvfp4_kv_on_fa2): 0.31 refuses nvfp4 outside 10.x at selection
    {"capability": 90, **_NVFP4}, {"capability": 120, **_NVFP4}, {"capability": 80, **_NVFP4, "head_dim": 256},
    {"capability": 100, **_NVFP4},
    # every release: sinks under DCP fail at the first prefill (build(): prefill_use_trtllm is False under DCP)
    {"capability": 100, **_DCP, "sinks": True},
]


def _has_rule(rule_id: str) -> bool:
    from attnplan.policy import default_ruleset

    return any(r.id == rule_id for r in default_ruleset().rules)


def _changed_param(r: str):
    pending = [why for why, bad in (
        (f"attnplan does not model vLLM {r} yet (engines.vllm covers)", not _modelled(r)),
        ("no rule for sinks under DCP yet (vllm.dcp-sinks)", not _has_rule("vllm.dcp-sinks"))) if bad]
    marks = [pytest.mark.xfail(bool(pending), strict=True, reason="; ".join(pending) + ": passes once the data of "
                               "/tmp/h/vllm-releases.md is applied")]
    if r != "0.33.0":
        marks += _release(r).marks
    return pytest.param(r, marks=marks)


@needs_vllm
@pytest.mark.parametrize("release", [_changed_param(r) for r in (*RELEASES, "0.33.0")])
def test_what_changed_between_releases_is_modelled(release, tmp_path):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(CHANGED))
    out = subprocess.run([sys.executable, "-m", "attnplan.oracle.vllm", "--release", release, "--cases", str(cases),
                          "--json", "--show", "50"], capture_output=True, text=True, cwd=ROOT, timeout=600,
                         env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    assert out.stdout.strip(), out.stderr[-3000:]
    s = json.loads(out.stdout)
    assert s["vllm"] == release and s["cases"] == len(CHANGED)
    assert s["disagreements"] == 0, json.dumps(s["first_disagreements"], indent=1, default=str)[:6000]
    assert out.returncode == 0


@needs_vllm
@pytest.mark.parametrize("release", [_release(r) for r in RELEASES])
def test_each_release_ships_its_own_flag_table(release):
    """attnplan/vllm/tables/vllm-<release>-flags.json is the release's own `vllm serve` parser (--check rebuilds it
    from the release's code and compares)."""
    assert (ROOT / "attnplan" / "vllm" / "tables" / f"vllm-{release}-flags.json").is_file()
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "vllm_flag_table.py"), "--release", release, "--check"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    table = json.loads((ROOT / "attnplan" / "vllm" / "tables" / f"vllm-{release}-flags.json").read_text())
    assert table["vllm"] == release
    opts = {o for a in table["actions"] for o in a["options"]}
    assert {"--host", "--port", "--kv-cache-dtype", "--attention-backend", "--block-size"} <= opts


def _wheel(tmp_path: Path, version: str, requires: list[str]) -> Path:
    w = tmp_path / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    meta = "\n".join([f"Name: vllm", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]) + "\n"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("vllm/__init__.py", f"__version__ = {version!r}\n")
        z.writestr("vllm/_C.abi3.so", b"\x7fELF")
        z.writestr("vllm/csrc/x.cuh", "//")
        z.writestr("vllm/vllm-rs", b"\x7fELF")
        z.writestr(f"vllm-{version}.dist-info/METADATA", meta)
    return w


def test_release_fetcher_unpacks_python_only_and_reads_the_pins(tmp_path):
    wheel = _wheel(tmp_path, "9.9.0", ["torch==2.13.0", "flashinfer-python==0.7.0.post1",
                                       "flashinfer-cubin==0.7.0.post1; extra == 'cubin'"])
    assert vllm_releases.pins(vllm_releases.metadata(wheel)) == {"torch": "==2.13.0", "flashinfer-python": "==0.7.0.post1"}
    dest = tmp_path / "releases" / "vllm-9.9.0"
    dest.parent.mkdir()
    assert vllm_releases.unpack(wheel, dest) is True
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == [".attnplan-release", "vllm-9.9.0.dist-info/METADATA", "vllm/__init__.py"]
    assert vllm_releases.unpack(wheel, dest) is False            # the same wheel: left as it is
    wheel.unlink()
    wheel = _wheel(tmp_path, "9.9.0", ["flashinfer-python==0.7.1"])   # another wheel under the same name
    assert vllm_releases.unpack(wheel, dest) is True
    assert vllm_releases.pins((dest / "vllm-9.9.0.dist-info" / "METADATA").read_text()) == {"flashinfer-python": "==0.7.1"}
    assert not [p for p in dest.parent.iterdir() if p.name != "vllm-9.9.0"]   # no half-unpacked leftovers


def test_an_absent_release_is_an_error_naming_the_available_ones(tmp_path):
    env = {**os.environ, "ATTNPLAN_VLLM_RELEASES": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "attnplan.oracle.vllm", "--release", "0.29.0", "--configs", "1"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert "0.29.0" in out.stderr and "scripts/vllm_releases.py" in out.stderr
