"""FlashInfer's kernel-wheel version check per release (attnplan/node/flashinfer_packages.py, issue 42 item 2).

The cases are the pins of the modelled engines (vLLM 0.31.0/0.32.0: flashinfer-python 0.7.0.post1, vLLM 0.33.0:
0.7.2.post1, SGLang 0.5.21/0.5.22/0.5.23: 0.6.18/0.7.1/0.7.2) and the upgrade leftovers between them. The messages
of the installed release are also checked against FlashInfer's own functions, run from its installed source.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import pytest

from attnplan.node.flashinfer_packages import (CHECKS, Mismatch, import_error, package_mismatches,
                                                 release_check)

NEW_HINT = ("Run `flashinfer download-kernels` to install matching kernel wheels, or set "
            "FLASHINFER_DISABLE_VERSION_CHECK=1 to use the installed version anyway.")
OLD_HINT = "Please install the same version of both packages. Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check."


def test_matching_wheels_of_each_pinned_release_say_nothing():
    for fi in ("0.6.18", "0.7.0.post1", "0.7.1", "0.7.2", "0.7.2.post1"):
        assert package_mismatches(fi, fi, f"{fi}+cu130") == []
        assert package_mismatches(fi, None, None) == []


def test_cubin_left_behind_by_an_upgrade_to_0_7_2_post1_is_ignored():
    # vLLM 0.32.0 -> 0.33.0: flashinfer-python 0.7.2.post1, flashinfer-cubin still 0.7.0.post1
    (m,) = package_mismatches("0.7.2.post1", "0.7.0.post1", None, cubin_cache_dir="/root/.cache/flashinfer/cubins")
    assert (m.package, m.installed, m.expected, m.effect) == ("flashinfer-cubin", "0.7.0.post1", "0.7.2.post1", "ignored")
    assert m.message == ("flashinfer-cubin version (0.7.0.post1) does not match flashinfer version (0.7.2.post1). "
                         + NEW_HINT)
    assert m.log == ("Ignoring incompatible flashinfer-cubin package (cubins will be downloaded on demand to "
                     "/root/.cache/flashinfer/cubins): " + m.message)
    assert "_check_cubin_version" in m.source and "downloaded on demand" in m.consequence
    assert import_error([m]) is None


def test_cubin_mismatch_before_0_7_2_raises_and_ends_the_import():
    # vLLM 0.32.0's flashinfer-python 0.7.0.post1 with kernel wheels of 0.7.2.post1
    ms = package_mismatches("0.7.0.post1", "0.7.2.post1", "0.7.2.post1+cu130")
    assert len(ms) == 1   # the jit-cache check is never reached: the RuntimeError ends `import flashinfer`
    (m,) = ms
    assert m.effect == "raises" and import_error(ms) is m
    assert m.message == ("flashinfer-cubin version (0.7.2.post1) does not match flashinfer version (0.7.0.post1). "
                         + OLD_HINT)
    assert m.log is None and "startup" in m.consequence


def test_jit_cache_cuda_suffix_is_accepted_and_another_release_is_not():
    assert package_mismatches("0.7.2.post1", None, "0.7.2.post1+cu129") == []
    assert package_mismatches("0.7.1", None, "0.7.1+cu130") == []
    # SGLang 0.5.23's flashinfer 0.7.2 next to vLLM 0.33.0's jit-cache: "0.7.2.post1+cu130" is not "0.7.2+..."
    (m,) = package_mismatches("0.7.2", "0.7.2", "0.7.2.post1+cu130")
    assert (m.package, m.effect) == ("flashinfer-jit-cache", "ignored")
    assert m.message == ("flashinfer-jit-cache version (0.7.2.post1+cu130) does not match flashinfer version (0.7.2). "
                         + NEW_HINT)
    assert m.log == "Ignoring incompatible flashinfer-jit-cache package (kernels will be JIT-compiled instead): " + m.message
    assert "nvcc" in m.consequence


def test_both_wheels_mismatched_on_0_7_2_post1_are_both_ignored():
    ms = package_mismatches("0.7.2.post1", "0.7.1", "0.7.1+cu130")
    assert [(m.package, m.effect) for m in ms] == [("flashinfer-cubin", "ignored"), ("flashinfer-jit-cache", "ignored")]


def test_jit_cache_mismatch_raises_on_0_7_1_and_0_6_18():
    (m,) = package_mismatches("0.7.1", None, "0.7.0.post1+cu130")
    assert m.effect == "raises"
    assert m.message == ("flashinfer-jit-cache version (0.7.0.post1+cu130) does not match flashinfer version (0.7.1). "
                         + OLD_HINT)
    (m,) = package_mismatches("0.6.18", "0.6.18", "0.6.13+cu129")   # SGLang 0.5.21's pin with an older jit-cache
    assert m.effect == "raises" and m.package == "flashinfer-jit-cache"


def test_0_6_jit_cache_check_is_a_bare_prefix():
    # 0.6.x _get_aot_dir: not flashinfer_jit_cache_version.startswith(flashinfer_version); 0.7 needs "+" after it
    assert package_mismatches("0.6.18", None, "0.6.18.post1+cu129") == []
    (m,) = package_mismatches("0.7.1", None, "0.7.1.post1+cu130")
    assert m.effect == "raises"


def test_provider_against_its_shim_and_against_flashinfer():
    shim = "0.7.2.post1+cu130"
    assert package_mismatches("0.7.2.post1", None, shim, providers={"flashinfer-jit-cache-sm100a": shim}) == []
    ms = package_mismatches("0.7.2.post1", None, shim, providers={
        "flashinfer-jit-cache-sm100a": "0.7.2.post1+cu129",    # other CUDA build than the shim
        "flashinfer-jit-cache-sm90a": "0.7.1+cu130",            # other FlashInfer release
    })
    by = {m.package: m for m in ms}
    assert set(by) == {"flashinfer-jit-cache-sm100a", "flashinfer-jit-cache-sm90a"}
    sm100 = by["flashinfer-jit-cache-sm100a"]
    assert (sm100.effect, sm100.expected) == ("ignored", shim)
    assert sm100.message == ("flashinfer-jit-cache-sm100a version (0.7.2.post1+cu129) does not match flashinfer-jit-cache "
                             "version (0.7.2.post1+cu130). Please install the same CUDA-specific version of the shim and "
                             "provider. Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.")
    assert sm100.log == "Ignoring incompatible flashinfer jit-cache provider flashinfer-jit-cache-sm100a: " + sm100.message
    sm90 = by["flashinfer-jit-cache-sm90a"]
    assert sm90.expected == "0.7.2.post1" and sm90.message.startswith(
        "flashinfer-jit-cache-sm90a version (0.7.1+cu130) does not match flashinfer version (0.7.2.post1).")
    # providers are ignored one by one even where the shim itself would raise (0.7.0.post1, 0.7.1) ...
    (p,) = package_mismatches("0.7.1", None, "0.7.1+cu130", providers={"flashinfer-jit-cache-sm100a": "0.7.1+cu129"})
    assert p.effect == "ignored"
    # ... and are not looked at behind an ignored shim, nor in 0.6 (no providers)
    (s,) = package_mismatches("0.7.2.post1", None, "0.7.1+cu130", providers={"flashinfer-jit-cache-sm100a": "0.7.0+cu1"})
    assert s.package == "flashinfer-jit-cache"
    assert package_mismatches("0.6.18", None, "0.6.18+cu129", providers={"flashinfer-jit-cache-sm100a": "x"}) == []


def test_environment_overrides_as_flashinfer_reads_them():
    for value in ("1", "0"):   # `not os.getenv(...)`: any non-empty value disables the check
        assert package_mismatches("0.7.0.post1", "0.7.2.post1", None,
                                  env={"FLASHINFER_DISABLE_VERSION_CHECK": value}) == []
    # FLASHINFER_CUBIN_DIR wins over the cubin wheel from 0.6.18 (the wheel is not looked at) ...
    assert package_mismatches("0.7.1", "0.7.0.post1", None, env={"FLASHINFER_CUBIN_DIR": "/cubins"}) == []
    # ... but 0.6.13 checks the wheel first
    (m,) = package_mismatches("0.6.13", "0.6.12", None, env={"FLASHINFER_CUBIN_DIR": "/cubins"})
    assert m.effect == "raises"


def test_unknown_releases_make_no_claim():
    for fi in ("0.7.3", "0.7.0", "0.6.19", "0.6.17", "0.8.0", "0.0.0+unknown", "not-a-version", "", None):
        assert release_check(fi) is None
        assert package_mismatches(fi, "0.1", "0.1+cu1") == []


def test_each_row_covers_the_releases_it_was_read_from_and_rows_do_not_overlap():
    from packaging.specifiers import SpecifierSet
    for row in CHECKS:
        for v in row.read_in:
            assert release_check(v) is row
    seen = [v for row in CHECKS for v in row.read_in]
    for v in seen:
        assert sum(SpecifierSet(r.releases).contains(v) for r in CHECKS) == 1


def _flashinfer_env_source() -> Path | None:
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "jit" / "env.py"
    return path if path.is_file() else None


def _installed_flashinfer_version(root: Path) -> str | None:
    meta = root / "_build_meta.py"
    if not meta.is_file():
        return None
    for node in ast.parse(meta.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def _installed_claimed_flashinfer():
    """(the installed flashinfer's jit/env.py, its version), or a skip naming why there is none to compare."""
    env_py = _flashinfer_env_source()
    if env_py is None:
        pytest.skip("flashinfer is not installed")
    fv = _installed_flashinfer_version(env_py.parent.parent)
    if release_check(fv) is None:
        pytest.skip(f"installed flashinfer {fv} is not a release this module claims")
    return env_py, fv


def test_messages_equal_the_installed_flashinfer_s_own():
    """Run the installed FlashInfer's check functions (their source, not an import of flashinfer: that needs CUDA
    libraries) and compare what they raise with this module's message for that release."""
    env_py, fv = _installed_claimed_flashinfer()
    tree = ast.parse(env_py.read_text())
    wanted = {"_check_cubin_version", "_check_jit_cache_version", "_check_jit_cache_provider_version"}
    keep = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in wanted) or
            (isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "_VERSION_MISMATCH_HINT" for t in n.targets))]
    if {n.name for n in keep if isinstance(n, ast.FunctionDef)} != wanted:
        pytest.skip(f"flashinfer {fv}'s jit/env.py has no separate check functions")
    ns: dict = {"os": os, "flashinfer_version": fv}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(env_py), "exec"), ns)
    old = os.environ.pop("FLASHINFER_DISABLE_VERSION_CHECK", None)
    try:
        def raised(fn, *args) -> str:
            with pytest.raises(RuntimeError) as e:
                fn(*args)
            return str(e.value)

        (cubin,) = package_mismatches(fv, "0.6.13", None)
        assert cubin.message == raised(ns["_check_cubin_version"], "0.6.13")
        (jit,) = package_mismatches(fv, None, "0.6.13+cu129")
        assert jit.message == raised(ns["_check_jit_cache_version"], "flashinfer-jit-cache", "0.6.13+cu129")
        ns["_check_jit_cache_version"]("flashinfer-jit-cache", f"{fv}+cu129")   # accepted by both
        assert package_mismatches(fv, None, f"{fv}+cu129") == []
        (prov,) = package_mismatches(fv, None, f"{fv}+cu130", providers={"flashinfer-jit-cache-sm100a": f"{fv}+cu129"})
        assert prov.message == raised(ns["_check_jit_cache_provider_version"], "flashinfer-jit-cache-sm100a",
                                      f"{fv}+cu129", f"{fv}+cu130")
    finally:
        if old is not None:
            os.environ["FLASHINFER_DISABLE_VERSION_CHECK"] = old


def test_mismatch_is_a_frozen_model():
    (m,) = package_mismatches("0.7.2.post1", "0.7.1", None)
    assert isinstance(m, Mismatch)
    with pytest.raises(Exception):
        m.effect = "raises"  # type: ignore[misc]


_CHILD = r'''
import json, logging, sys
msgs = []
class _H(logging.Handler):
    def emit(self, record): msgs.append(record.getMessage())
logging.getLogger("flashinfer.jit").addHandler(_H())
try:
    import flashinfer
    out = {"raised": None}
except RuntimeError as e:
    out = {"raised": str(e)}
out["warnings"] = [m for m in msgs if "incompatible" in m]
print("RESULT" + json.dumps(out))
'''


def _fake_wheels(root: Path, cubin: str | None, jit: str | None, providers: dict[str, str]) -> None:
    """Stand-ins for flashinfer_cubin / flashinfer_jit_cache: only what jit/env.py reads of them."""
    if cubin is not None:
        (root / "flashinfer_cubin").mkdir(parents=True)
        (root / "flashinfer_cubin" / "__init__.py").write_text(
            f"__version__ = {cubin!r}\ndef get_cubin_dir():\n    return {str(root)!r}\n")
    if jit is not None:
        rows = "".join(f"        P({d!r}, {v!r}),\n" for d, v in providers.items())
        (root / "flashinfer_jit_cache").mkdir(parents=True)
        (root / "flashinfer_jit_cache" / "__init__.py").write_text(
            f"__version__ = {jit!r}\ndef get_jit_cache_dir():\n    return {str(root)!r}\n"
            "class P:\n    def __init__(self, d, v):\n"
            "        self.provider_id, self.distribution, self.version = d, d, v\n"
            f"        self.jit_cache_dir, self.cuda_architectures, self.modules = {str(root)!r}, ['sm100a'], []\n"
            f"def get_jit_cache_providers():\n    return [\n{rows}    ]\n")


def test_the_installed_flashinfer_s_import_says_what_package_mismatches_says(tmp_path):
    """``import flashinfer`` (the installed release, in a subprocess, next to stand-in kernel wheels) raises or
    logs exactly what package_mismatches predicts. /tmp/h/flashinfer-releases-diffcheck.py runs the same over
    0.6.13, 0.6.18, 0.7.0.post1, 0.7.1, 0.7.2 and 0.7.2.post1 (54/54 cases agree)."""
    import json
    import subprocess
    import sys

    env_py, fv = _installed_claimed_flashinfer()
    cases = [("0.6.13", "0.6.13+cu129", {}),
             (fv, f"{fv}+cu130", {"flashinfer-jit-cache-sm100a": f"{fv}+cu129"})]
    for i, (cubin, jit, providers) in enumerate(cases):
        root = tmp_path / f"c{i}"
        _fake_wheels(root / "site", cubin, jit, providers)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
        env.update(PYTHONPATH=str(root / "site"), FLASHINFER_WORKSPACE_BASE=str(root),
                   FLASHINFER_CUDA_ARCH_LIST="9.0a")
        r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600)
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")), None)
        if line is None:
            pytest.skip(f"flashinfer does not import here: {r.stderr[-300:]}")
        real = json.loads(line[len("RESULT"):])
        ms = package_mismatches(fv, cubin, jit, providers=providers,
                                cubin_cache_dir=str(root / ".cache" / "flashinfer" / "cubins"))
        assert ms, "each case has a mismatch"
        assert real == {"raised": next((m.message for m in ms if m.effect == "raises"), None),
                        "warnings": [m.log for m in ms if m.effect == "ignored"]}
