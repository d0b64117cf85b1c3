"""host_step.c compiled on first use and loaded with ctypes: the step metadata's checks and host arithmetic
in one call instead of ~30 numpy ones (issue 41; host_metadata.py ``from_host``).

Built once per source (its sha256 names the directory) in ``host_step/`` under ``$ATTNPLAN_CACHE_DIR`` (else
``$XDG_CACHE_HOME/attnplan``, else ``~/.cache/attnplan``) with ``$CC``, else the first of cc, gcc, g++, clang
on PATH - as FlashInfer builds its JIT modules - into a temporary file renamed into place, so two
processes building at once both load a whole library. Anything that fails (no compiler, a read-only cache,
a library of another ABI) leaves ``status()`` saying why and the numpy path running: same bytes, more host
time. ``ATTNPLAN_NATIVE_HOST=0`` keeps the numpy path.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

from attnplan.errors import SetupError

from .built_once import BuiltOnce

SOURCE = Path(__file__).with_name("host_step.c")
ABI = 5                                   # host_step.c ap_abi()
COMPILERS = ("cc", "gcc", "g++", "clang")
COMPILE_SECONDS = 300                     # one small C file: seconds, unless the machine is starved
# -O3: gcc vectorizes the per-page and per-token loops, which -O2 (gcc 12) leaves scalar - ap_step over 16k
# tokens or 16k KV pages in 9-11 us instead of 15-27 on the development machine (bench/logs/h100-2026-11-27w/
# cpu_ap_step_flags.log). Part of the digest: a change of flags is a new build, not the cached one.
FLAGS = ("-O3", "-shared", "-fPIC")


def _cache_dir() -> Path:
    from attnplan.vllm.args import cache_dir

    return cache_dir() / "host_step"


def _compiler() -> Optional[list[str]]:
    """The compiler's command line: ``$CC`` as the shell would split it (``gcc -m64``), else the first found."""
    cc = os.environ.get("CC")
    if cc:
        return shlex.split(cc)
    for name in COMPILERS:
        path = shutil.which(name)
        if path:
            return [path]
    return None


def _build(src: bytes) -> Path:
    digest = hashlib.sha256(src + " ".join(FLAGS).encode()).hexdigest()[:16]
    out = _cache_dir() / digest / "host_step.so"
    if out.exists():
        return out
    cc = _compiler()
    if cc is None:
        raise SetupError(f"no C compiler ($CC, or one of {', '.join(COMPILERS)} on PATH)")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        lang = ["-x", "c++"] if os.path.basename(cc[0]).startswith(("g++", "c++", "clang++")) else ["-x", "c"]
        try:
            r = subprocess.run([*cc, *lang, *FLAGS, "-o", tmp, str(SOURCE)],
                               capture_output=True, text=True, timeout=COMPILE_SECONDS)
        except OSError as e:                  # $CC names no program
            raise SetupError(f"{cc[0]}: {e.strerror or e}") from e
        if r.returncode != 0:
            raise SetupError(f"{cc[0]} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-400:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _load() -> tuple[Any, str]:
    if os.environ.get("ATTNPLAN_NATIVE_HOST") == "0":
        raise SetupError("ATTNPLAN_NATIVE_HOST=0")
    path = _build(SOURCE.read_bytes())
    lib = ctypes.CDLL(str(path))
    lib.ap_abi.restype = ctypes.c_int64
    if lib.ap_abi() != ABI:
        raise SetupError(f"{path} has ABI {lib.ap_abi()}, this attnplan {ABI}")
    P, I = ctypes.c_void_p, ctypes.c_int64
    lib.ap_step.argtypes = [P, P, P, P, P]
    lib.ap_step.restype = I
    return lib, str(path)


_once = BuiltOnce(_load)


# library(): the loaded library or None; status(): {"compiled", "path", "why"}; _reset() for tests
# (ATTNPLAN_NATIVE_HOST, another cache dir) - built and loaded once per process (built_once.py)
library, status, _reset = _once.library, _once.status, _once.reset


__all__ = ["library", "status", "SOURCE", "ABI"]
