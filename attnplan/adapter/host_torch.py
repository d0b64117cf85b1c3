"""host_torch.cpp built with torch.utils.cpp_extension and loaded: a step's device half - the one copy, the
views of its parts, the gather, the table per phase - in one call from Python instead of six, and with
host_step.c compiled in, its host half in the same call (``step``; issue 41, host_metadata.py ``from_host``).

Built for CUDA executors only (``HostStaging`` of a CUDA device asks for it at the executor's construction,
not at its first step): on the CPU the Python path costs no launches and the build ~40 s of g++ over torch's
headers. Once per source and torch version in ``host_torch/`` under ``$ATTNPLAN_CACHE_DIR`` (else
``$XDG_CACHE_HOME/attnplan``, else ``~/.cache/attnplan``); torch's own build lock keeps two processes from
building into one directory at once. Anything that fails (no compiler, no ninja, torch without its headers,
a module of another ABI) leaves ``status()`` saying why and the Python path running: the same tensors, more
host time. ``ATTNPLAN_NATIVE_TORCH=0`` keeps the Python path.
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


def _load() -> tuple[Any, str]:
    if os.environ.get("ATTNPLAN_NATIVE_TORCH") == "0":
        raise SetupError("ATTNPLAN_NATIVE_TORCH=0")
    from torch.utils import cpp_extension

    digest = hashlib.sha256(SOURCE.read_bytes() + INCLUDED.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:16]
    out = _build_dir(digest)
    out.mkdir(parents=True, exist_ok=True)
    path = os.environ.get("PATH", "")
    try:
        import ninja                      # the pip package's binary, where no ninja is on PATH (torch runs it)

        os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{path}"
    except ImportError:
        pass
    try:
        mod = cpp_extension.load(name=f"attnplan_host_torch_{digest}", sources=[str(SOURCE)],
                                 build_directory=str(out), extra_cflags=CFLAGS, with_cuda=False, verbose=False)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError / OSError / subprocess errors alike
        raise SetupError(f"building {SOURCE.name} failed: {str(e).strip()[-400:]}") from e
    finally:
        os.environ["PATH"] = path
    if mod.abi() != ABI:
        raise SetupError(f"{mod.__file__} has ABI {mod.abi()}, this attnplan {ABI}")
    return mod, mod.__file__


_once = BuiltOnce(_load)


# library(): the loaded module or None; status(): {"compiled", "path", "why"}; _reset() for tests
# (ATTNPLAN_NATIVE_TORCH, another cache dir) - built and loaded once per process (built_once.py)
library, status, _reset = _once.library, _once.status, _once.reset


__all__ = ["library", "status", "SOURCE", "ABI"]
