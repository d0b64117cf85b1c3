"""FlashInfer's own check of its kernel wheels (flashinfer-cubin, flashinfer-jit-cache) against
flashinfer-python, per FlashInfer release, as data (issue 42 item 2).

FlashInfer checks both wheels when ``import flashinfer`` imports ``flashinfer/jit/env.py``: the module-level
``FLASHINFER_CUBIN_DIR = _get_cubin_dir()`` checks flashinfer-cubin first, then ``_get_aot_providers()``
(``_get_aot_dir()`` before 0.7) checks flashinfer-jit-cache and, from 0.7.0.post1, each jit-cache provider
wheel. What a mismatch does changed at 0.7.2:

* before 0.7.2 a mismatched wheel raises ``RuntimeError`` out of ``import flashinfer``, so nothing of
  FlashInfer runs (vLLM 0.32's ``download_kernels.py``: "FlashInfer refuses to import while kernels from
  another FlashInfer version are installed");
* from 0.7.2 it is ignored with a logged warning: a mismatched flashinfer-cubin counts as no cubin wheel
  (cubins are downloaded on demand into the cache), a mismatched flashinfer-jit-cache as no jit-cache
  (every module is JIT-compiled, which needs nvcc).

FlashInfer compares strings (``flashinfer_cubin.__version__``, ``flashinfer_jit_cache.__version__``,
``flashinfer.version.__version__``; each wheel's ``_build_meta.py`` holds its package version), not parsed
versions, and this module does the same. Only releases whose ``jit/env.py`` was read are claimed
(``CHECKS`` below); any other version gives no mismatches (no claim), as does FlashInfer's own
``FLASHINFER_DISABLE_VERSION_CHECK`` (any non-empty value, "0" included: ``not os.getenv(...)``) and a source
install's "0.0.0+unknown". Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal, Mapping, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict

Effect = Literal["ignored", "raises"]

CUBIN = "flashinfer-cubin"
JIT_CACHE = "flashinfer-jit-cache"
DISABLE_ENV = "FLASHINFER_DISABLE_VERSION_CHECK"
CUBIN_DIR_ENV = "FLASHINFER_CUBIN_DIR"
UNKNOWN = "0.0.0+unknown"   # flashinfer/version.py without _build_meta.py (editable/source install)
DEFAULT_CUBIN_CACHE = "~/.cache/flashinfer/cubins"   # jit/env.py FLASHINFER_CACHE_DIR / "cubins"

# The hints FlashInfer appends (flashinfer/jit/env.py).
_OLD_HINT = ("Please install the same version of both packages. "
             "Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.")
_NEW_HINT = ("Run `flashinfer download-kernels` to install matching kernel wheels, or set "
             "FLASHINFER_DISABLE_VERSION_CHECK=1 to use the installed version anyway.")   # _VERSION_MISMATCH_HINT
_PROVIDER_MESSAGE = ("{distribution} version ({installed}) does not match flashinfer-jit-cache version ({shim}). "
                     "Please install the same CUDA-specific version of the shim and provider. "
                     "Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.")
_PROVIDER_WARNING = "Ignoring incompatible flashinfer jit-cache provider {distribution}: {error}"

_CUBIN_CONSEQUENCE = {
    "raises": "import flashinfer fails: no FlashInfer kernel runs (the engine fails at startup)",
    "ignored": "FlashInfer reads no cubins from this wheel (as if no flashinfer-cubin were installed): "
               "trtllm-gen cubins are downloaded on demand from the artifactory into the cubin cache",
}
_JIT_CACHE_CONSEQUENCE = {
    "raises": "import flashinfer fails: no FlashInfer kernel runs (the engine fails at startup)",
    "ignored": "FlashInfer loads no precompiled module from this wheel (as if no flashinfer-jit-cache were "
               "installed): every JIT module is compiled at first use, which needs nvcc",
}
_PROVIDER_CONSEQUENCE = "FlashInfer loads no precompiled module from this provider wheel (its modules are JIT-compiled)"


class ReleaseCheck(BaseModel):
    """What ``flashinfer/jit/env.py`` of the releases in ``releases`` does with mismatched kernel wheels."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    releases: str                   # a packaging specifier over flashinfer-python versions
    read_in: tuple[str, ...]        # the releases whose source this row was read from
    source: str
    effect: Effect                  # what a mismatched flashinfer-cubin or flashinfer-jit-cache shim does
    cubin_message: str              # RuntimeError text: {installed}, {flashinfer}
    cubin_warning: Optional[str]    # the logged line when ignored: {cache_dir}, {error}
    cubin_dir_env_skips_check: bool  # FLASHINFER_CUBIN_DIR set: flashinfer-cubin is not looked at
    jit_cache_message: str          # RuntimeError text: {distribution}, {installed}, {flashinfer}
    jit_cache_warning: Optional[str]  # the logged line when ignored: {error}
    # "prefix": installed.startswith(flashinfer) (0.6.x _get_aot_dir: "0.6.1" accepts "0.6.13+cu129");
    # "local": installed == flashinfer or installed.startswith(flashinfer + "+") (_check_jit_cache_version)
    jit_cache_match: Literal["prefix", "local"]
    providers: bool                 # jit-cache provider wheels (flashinfer-jit-cache-smXXX) are checked, each ignored


_RAISE_0_7 = ReleaseCheck(
    releases=">=0.7.0.post1,<0.7.2", read_in=("0.7.0.post1", "0.7.1"),
    source="flashinfer/jit/env.py _get_cubin_dir (inline check), _check_jit_cache_version, "
           "_check_jit_cache_provider_version, _get_aot_providers (0.7.0.post1, 0.7.1)",
    effect="raises",
    cubin_message="flashinfer-cubin version ({installed}) does not match flashinfer version ({flashinfer}). " + _OLD_HINT,
    cubin_warning=None, cubin_dir_env_skips_check=True,
    jit_cache_message="{distribution} version ({installed}) does not match flashinfer version ({flashinfer}). " + _OLD_HINT,
    jit_cache_warning=None, jit_cache_match="local", providers=True,
)

# 0.6.18: 0.7.0's messages, without provider wheels and with the jit-cache matched by prefix
_RAISE_0_6_18 = ReleaseCheck(
    releases=">=0.6.18,<0.6.19", read_in=("0.6.18",),
    source="flashinfer/jit/env.py _get_cubin_dir, _get_aot_dir (0.6.18)",
    effect="raises",
    cubin_message=_RAISE_0_7.cubin_message, cubin_warning=None, cubin_dir_env_skips_check=True,
    jit_cache_message=_RAISE_0_7.jit_cache_message, jit_cache_warning=None,
    jit_cache_match="prefix", providers=False,
)
# Newest first; a version in none of them is not claimed.
CHECKS: tuple[ReleaseCheck, ...] = (
    ReleaseCheck(
        releases=">=0.7.2,<0.7.3", read_in=("0.7.2", "0.7.2.post1"),
        source="flashinfer/jit/env.py _get_cubin_dir, _check_cubin_version, _check_jit_cache_version, "
               "_check_jit_cache_provider_version, _get_aot_providers (0.7.2, 0.7.2.post1)",
        effect="ignored",
        cubin_message="flashinfer-cubin version ({installed}) does not match flashinfer version ({flashinfer}). " + _NEW_HINT,
        cubin_warning="Ignoring incompatible flashinfer-cubin package (cubins will be downloaded on demand to "
                      "{cache_dir}): {error}",
        cubin_dir_env_skips_check=True,
        jit_cache_message="{distribution} version ({installed}) does not match flashinfer version ({flashinfer}). "
                          + _NEW_HINT,
        jit_cache_warning="Ignoring incompatible flashinfer-jit-cache package (kernels will be JIT-compiled "
                          "instead): {error}",
        jit_cache_match="local", providers=True,
    ),
    _RAISE_0_7,
    _RAISE_0_6_18,
    # 0.6.13 looks at flashinfer-cubin before FLASHINFER_CUBIN_DIR, so setting the variable does not avoid the check.
    _RAISE_0_6_18.model_copy(update={"releases": ">=0.6.13,<0.6.14", "read_in": ("0.6.13",),
                                     "source": "flashinfer/jit/env.py _get_cubin_dir, _get_aot_dir (0.6.13)",
                                     "cubin_dir_env_skips_check": False}),
)


class Mismatch(BaseModel):
    """One kernel wheel FlashInfer refuses, in FlashInfer's words for its release."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    package: str          # the distribution: flashinfer-cubin, flashinfer-jit-cache, or a provider wheel
    installed: str
    expected: str         # the flashinfer version (or, for a provider against its shim, the shim's version)
    effect: Effect        # "raises": RuntimeError out of ``import flashinfer``; "ignored": logged and skipped
    message: str          # the RuntimeError FlashInfer builds (raised, or carried in the warning)
    log: Optional[str]    # the warning line FlashInfer logs when it ignores the wheel (logger "flashinfer.jit")
    consequence: str
    source: str


def release_check(flashinfer_version: Optional[str]) -> Optional[ReleaseCheck]:
    """The row of ``CHECKS`` describing this flashinfer-python version, or None (not read: no claim)."""
    if not flashinfer_version or flashinfer_version == UNKNOWN:
        return None
    try:
        v = Version(flashinfer_version)
    except InvalidVersion:
        return None
    return next((c for c in CHECKS if SpecifierSet(c.releases).contains(v, prereleases=True)), None)


def _jit_cache_matches(check: ReleaseCheck, installed: str, flashinfer: str) -> bool:
    if check.jit_cache_match == "prefix":
        return installed.startswith(flashinfer)
    return installed == flashinfer or installed.startswith(f"{flashinfer}+")


def package_mismatches(flashinfer_version: Optional[str], cubin_version: Optional[str],
                       jit_cache_version: Optional[str], *, providers: Optional[Mapping[str, str]] = None,
                       env: Optional[Mapping[str, str]] = None,
                       cubin_cache_dir: str = DEFAULT_CUBIN_CACHE) -> list[Mismatch]:
    """What ``import flashinfer`` says about the installed kernel wheels, in check order.

    ``cubin_version`` / ``jit_cache_version``: the installed flashinfer-cubin / flashinfer-jit-cache (None: not
    installed). ``providers``: installed jit-cache provider wheels, distribution -> version (0.7.0.post1+).
    ``env``: the environment FlashInfer would see (FLASHINFER_DISABLE_VERSION_CHECK, FLASHINFER_CUBIN_DIR).
    A check that raises ends the import, so nothing after it is reported (as FlashInfer reports nothing
    more); an ignored wheel's providers are not looked at either (``_get_aot_providers`` returns early).
    """
    env = env or {}
    check = release_check(flashinfer_version)
    if check is None or env.get(DISABLE_ENV):
        return []
    fv = str(flashinfer_version)
    out: list[Mismatch] = []

    # 1. flashinfer-cubin (module level: FLASHINFER_CUBIN_DIR = _get_cubin_dir())
    cubin_checked = cubin_version is not None and not (check.cubin_dir_env_skips_check and env.get(CUBIN_DIR_ENV))
    if cubin_checked and cubin_version != fv:
        error = check.cubin_message.format(installed=cubin_version, flashinfer=fv)
        log = (check.cubin_warning.format(cache_dir=cubin_cache_dir, error=error)
               if check.effect == "ignored" and check.cubin_warning else None)
        out.append(Mismatch(package=CUBIN, installed=str(cubin_version), expected=fv, effect=check.effect,
                            message=error, log=log, consequence=_CUBIN_CONSEQUENCE[check.effect],
                            source=check.source))
        if check.effect == "raises":
            return out

    # 2. flashinfer-jit-cache, the shim (FLASHINFER_AOT_PROVIDERS = _get_aot_providers(); 0.6: _get_aot_dir())
    if jit_cache_version is None:
        return out
    if not _jit_cache_matches(check, jit_cache_version, fv):
        error = check.jit_cache_message.format(distribution=JIT_CACHE, installed=jit_cache_version, flashinfer=fv)
        log = (check.jit_cache_warning.format(error=error)
               if check.effect == "ignored" and check.jit_cache_warning else None)
        out.append(Mismatch(package=JIT_CACHE, installed=jit_cache_version, expected=fv, effect=check.effect,
                            message=error, log=log, consequence=_JIT_CACHE_CONSEQUENCE[check.effect],
                            source=check.source))
        return out

    # 3. each provider wheel, against flashinfer and then against the shim: always warned and skipped
    if check.providers:
        for distribution, version in sorted((providers or {}).items()):
            if not _jit_cache_matches(check, version, fv):
                error = check.jit_cache_message.format(distribution=distribution, installed=version, flashinfer=fv)
                expected = fv
            elif version != jit_cache_version:
                error = _PROVIDER_MESSAGE.format(distribution=distribution, installed=version, shim=jit_cache_version)
                expected = jit_cache_version
            else:
                continue
            out.append(Mismatch(package=distribution, installed=version, expected=expected, effect="ignored",
                                message=error, log=_PROVIDER_WARNING.format(distribution=distribution, error=error),
                                consequence=_PROVIDER_CONSEQUENCE, source=check.source))
    return out


def import_error(mismatches: list[Mismatch]) -> Optional[Mismatch]:
    """The mismatch that makes ``import flashinfer`` raise (FlashInfer < 0.7.2), if any."""
    return next((m for m in mismatches if m.effect == "raises"), None)
