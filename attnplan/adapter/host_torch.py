"""host_torch.cpp built with torch.utils.cpp_extension and loaded: a step's device half - the one copy, the
views of its parts, the gather, the table per phase - in one call from Python instead of six, and with
host_step.c compiled in, its host half in the same call (``step``; issue 41, host_metadata.py ``from_host``).

Built for CUDA executors only (``HostStaging`` of a CUDA device asks for it at the executor's construction,
not at its first step): on the CPU the Python path costs no launches and the build ~40 s of g++ over torch's
headers. Once per source, flags and torch version in ``host_torch/`` under ``$ATTNPLAN_CACHE_DIR`` (else
``$XDG_CACHE_HOME/attnplan``, else ``~/.cache/attnplan``), in a child process (``_BUILD``); torch's own build
lock keeps two processes from building into one directory at once. Anything that fails (no compiler, no ninja,
torch without its headers, a module of another ABI) leaves ``status()`` saying why and the Python path running:
the same tensors, more host time. ``ATTNPLAN_NATIVE_TORCH=0`` keeps the Python path.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from attnplan.errors import SetupError

from .built_once import BuiltOnce

SOURCE = Path(__file__).with_name("host_torch.cpp")
INCLUDED = Path(__file__).with_name("host_step.c")      # compiled into it (its ``step``): part of the digest
ABI = 2                                   # host_torch.cpp abi()
CFLAGS = ["-O3"]                          # host_native.FLAGS' reason: host_step.c's loops vectorized; in the digest


def _build_dir(digest: str) -> Path:
    import torch

    from attnplan.vllm.args import cache_dir

    return cache_dir() / "host_torch" / f"torch-{torch.__version__.replace('+', '-')}-{digest}"


# The build in a child process: torch's cpp_extension finds ninja only on PATH, and setting the engine process's own
# PATH for the ~20-40 s of a build would show every other thread of it another one. The child gets the pip package's
# ninja first on its PATH; the parent then imports the built module as cpp_extension.load itself does.
_BUILD = """import sys
from torch.utils import cpp_extension
name, source, out, *flags = sys.argv[1:]
cpp_extension.load(name=name, sources=[source], build_directory=out, extra_cflags=flags, with_cuda=False, verbose=False)
"""
BUILD_SECONDS = 900                     # g++ over torch's headers: ~40 s, minutes on a starved host


def _load() -> tuple[Any, str]:
    if os.environ.get("ATTNPLAN_NATIVE_TORCH") == "0":
        raise SetupError("ATTNPLAN_NATIVE_TORCH=0")
    import importlib.util
    import subprocess
    import sys

    digest = hashlib.sha256(SOURCE.read_bytes() + INCLUDED.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:16]
    name = f"attnplan_host_torch_{digest}"
    out = _build_dir(digest)
    built = out / f"{name}.so"
    if not built.exists():
        out.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        try:
            import ninja                  # the pip package's binary, where no ninja is on PATH (torch runs it)

            env["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
        except ImportError:
            pass
        try:
            r = subprocess.run([sys.executable, "-c", _BUILD, name, str(SOURCE), str(out), *CFLAGS], env=env,
                               capture_output=True, text=True, timeout=BUILD_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SetupError(f"building {SOURCE.name} failed: {e}") from e
        if r.returncode != 0 or not built.exists():
            raise SetupError(f"building {SOURCE.name} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-400:]}")
    spec = importlib.util.spec_from_file_location(name, built)
    if spec is None or spec.loader is None:
        raise SetupError(f"{built} is not a loadable module")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:              # a module of another torch's ABI, a truncated file
        raise SetupError(f"loading {built} failed: {e}") from e
    if mod.abi() != ABI:
        raise SetupError(f"{built} has ABI {mod.abi()}, this attnplan {ABI}")
    return mod, str(built)


_once = BuiltOnce(_load)


# library(): the loaded module or None; status(): {"compiled", "path", "why"}; _reset() for tests
# (ATTNPLAN_NATIVE_TORCH, another cache dir) - built and loaded once per process (built_once.py)
library, status, _reset = _once.library, _once.status, _once.reset


__all__ = ["library", "status", "SOURCE", "ABI"]
