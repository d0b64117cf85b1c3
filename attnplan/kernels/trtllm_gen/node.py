"""A node's own trtllm-gen kernel table, found where FlashInfer looks for it.

FlashInfer (flashinfer/jit/env.py _get_cubin_dir) reads cubins from, in order: ``FLASHINFER_CUBIN_DIR``;
the installed ``flashinfer_cubin`` package when its version equals flashinfer's (a mismatched one is
ignored with "Ignoring incompatible flashinfer-cubin package ..."); else the cache
``$FLASHINFER_WORKSPACE_BASE|~/.cache/flashinfer/cubins``. Under that directory the FMHA artifact is
``<ArtifactPath.TRTLLM_GEN_FMHA>`` = ``<pin>/fmha/trtllm-gen/`` with ``checksums.txt`` (whose sha256 is
``CheckSumHash.TRTLLM_GEN_FMHA``, flashinfer/artifacts.py) and ``include/flashInferMetaInfo.h``.

``locate`` says where the table is (or why there is none); ``load`` reads and verifies it: a checksums
file whose sha256 is not FlashInfer's, a header whose sha256 is not the one checksums.txt lists, a
truncated or unparsable header are ``TableError`` naming the file, never "no kernels" and never a
silent fallback to the shipped table.
"""

from __future__ import annotations

import hashlib
import os
import stat
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional

from ...safeio import read_up_to
from .table import Checksums, KernelTable, TableError, parse_checksums, parse_meta_info

# Known artifact pins (flashinfer/artifacts.py of each version): pin, sha256 of its checksums.txt.
KNOWN_PINS = {
    "0.6": ("158f6fa11ef139a098cfddcdddce73ca99d164ad", "c2d9399b2537be785882354a4f9902ed6c03136c0ea341e201eac40c3923e1dc"),
    "0.7.2.post1": ("2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c", "d79b5c51fc8597fac57dae0da4afa114fb2014575e4ec3df099ad856d97cabc3"),
    # the releases the modelled engines pin (issue 42): flashinfer/artifacts.py of each wheel, read the same way
    # (SGLang 0.5.21: 0.6.18; vLLM 0.31/0.32: 0.7.0.post1; SGLang 0.5.22: 0.7.1; SGLang 0.5.23: 0.7.2)
    "0.6.18": ("2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c", "d79b5c51fc8597fac57dae0da4afa114fb2014575e4ec3df099ad856d97cabc3"),
    "0.7.0.post1": ("2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c", "d79b5c51fc8597fac57dae0da4afa114fb2014575e4ec3df099ad856d97cabc3"),
    "0.7.1": ("2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c", "d79b5c51fc8597fac57dae0da4afa114fb2014575e4ec3df099ad856d97cabc3"),
    "0.7.2": ("2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c", "d79b5c51fc8597fac57dae0da4afa114fb2014575e4ec3df099ad856d97cabc3"),
}


def artifact_pin(artifacts_py: str) -> Optional[tuple[str, str]]:
    """(pin, checksums sha256) read from a flashinfer/artifacts.py source (ArtifactPath / CheckSumHash)."""
    p = re.search(r"class ArtifactPath\b.*?TRTLLM_GEN_FMHA\s*:\s*str\s*=\s*\(?\s*\"([0-9a-f]{40})/fmha/trtllm-gen/?\"",
                  artifacts_py, re.S)
    h = re.search(r"class CheckSumHash\b.*?TRTLLM_GEN_FMHA\s*:\s*str\s*=\s*\(?\s*\"([0-9a-f]{64})\"", artifacts_py, re.S)
    return (p.group(1), h.group(1)) if p and h else None


def known_pin(flashinfer_version: Optional[str]) -> Optional[tuple[str, str]]:
    if not flashinfer_version:
        return None
    if flashinfer_version in KNOWN_PINS:
        return KNOWN_PINS[flashinfer_version]
    m = re.fullmatch(r"0\.6\.(\d+)(?:\.post\d+)?", flashinfer_version)
    if m and 12 <= int(m.group(1)) <= 17:
        return KNOWN_PINS["0.6"]
    return None


@dataclass(frozen=True)
class Location:
    cubin_dir: Optional[str]     # the directory FlashInfer reads cubins from
    origin: str                  # why that one (FLASHINFER_CUBIN_DIR, flashinfer-cubin X, the cache)
    pin: Optional[str]
    checksums_sha256: Optional[str]
    notes: tuple[str, ...] = ()  # e.g. an ignored flashinfer-cubin of another version, as FlashInfer says it

    @property
    def artifact_dir(self) -> Optional[Path]:
        if self.cubin_dir is None or self.pin is None:
            return None
        return Path(self.cubin_dir) / self.pin / "fmha/trtllm-gen"


def locate(env: Mapping[str, str], flashinfer_version: Optional[str], cubin_package_version: Optional[str],
           cubin_package_dir: Optional[str], pin: Optional[tuple[str, str]] = None) -> Location:
    """FlashInfer's _get_cubin_dir, and the FMHA artifact's pin for this flashinfer version."""
    pin = pin or known_pin(flashinfer_version)
    notes: list[str] = []
    base = env.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")
    cache = os.path.join(base, ".cache", "flashinfer", "cubins")
    if env.get("FLASHINFER_CUBIN_DIR"):
        d, origin = env["FLASHINFER_CUBIN_DIR"], "FLASHINFER_CUBIN_DIR"
    elif cubin_package_version is not None and cubin_package_dir is not None:
        if cubin_package_version == flashinfer_version or env.get("FLASHINFER_DISABLE_VERSION_CHECK"):
            d, origin = cubin_package_dir, f"flashinfer-cubin {cubin_package_version}"
        else:
            notes.append(f"Ignoring incompatible flashinfer-cubin package (cubins will be downloaded on demand to "
                         f"{cache}): flashinfer-cubin version ({cubin_package_version}) does not match flashinfer "
                         f"version ({flashinfer_version})")
            d, origin = cache, "FlashInfer's cubin cache"
    else:
        d, origin = cache, "FlashInfer's cubin cache"
    return Location(d, origin, pin[0] if pin else None, pin[1] if pin else None, tuple(notes))


@dataclass(frozen=True)
class NodeTable:
    location: Location
    table: Optional[KernelTable]     # None: not on disk (FlashInfer downloads it at first use)
    checksums: Optional[Checksums]
    why: str

    def on_disk(self, cubin: str) -> Optional[bool]:
        d = self.location.artifact_dir
        return None if d is None else (d / cubin).is_file()


# The real files are 2.4 MB (checksums.txt) and 5.5 MB (flashInferMetaInfo.h): anything over this is not FlashInfer's.
MAX_TABLE_BYTES = 32 << 20


def read_bounded(path: Path) -> bytes:
    """A table file's bytes: a regular file of at most MAX_TABLE_BYTES, opened non-blocking (a FIFO there cannot
    hang the open, /dev/zero cannot fill memory); anything else is a TableError naming it. A missing file
    raises FileNotFoundError (the table is simply not there yet)."""
    fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TableError(str(path), "not a regular file (a directory, device, FIFO or socket)")
        if st.st_size > MAX_TABLE_BYTES:
            raise TableError(str(path), f"{st.st_size} bytes, over the {MAX_TABLE_BYTES}-byte limit of a kernel table")
        data = read_up_to(fd, MAX_TABLE_BYTES)
    finally:
        os.close(fd)
    if len(data) > MAX_TABLE_BYTES:   # it grew while read
        raise TableError(str(path), f"over the {MAX_TABLE_BYTES}-byte limit of a kernel table")
    return data


def load(loc: Location, read: Callable[[Path], bytes] = read_bounded) -> NodeTable:
    """Read and verify the node's table at ``loc``. Absent files: table None with why. Corrupt, truncated or
    foreign files: TableError naming the file."""
    d = loc.artifact_dir
    if d is None:
        return NodeTable(loc, None, None, "no known FMHA artifact pin for this flashinfer version")
    sums_path = d / "checksums.txt"
    header_path = d / "include" / "flashInferMetaInfo.h"
    try:
        sums_raw = read(sums_path)
    except FileNotFoundError:
        return NodeTable(loc, None, None, f"{sums_path}: not on disk ({loc.origin}); FlashInfer downloads it at first use")
    except OSError as exc:
        raise TableError(str(sums_path), f"unreadable: {exc}") from None
    digest = hashlib.sha256(sums_raw).hexdigest()
    if loc.checksums_sha256 and digest != loc.checksums_sha256:
        raise TableError(str(sums_path), f"sha256 {digest[:16]}... is not FlashInfer's CheckSumHash.TRTLLM_GEN_FMHA "
                                         f"{loc.checksums_sha256[:16]}... for pin {loc.pin[:8] if loc.pin else '?'} "
                                         "(corrupt, truncated or another artifact's)")
    sums = parse_checksums(sums_raw.decode("utf-8", errors="replace"), str(sums_path))
    try:
        header_raw = read(header_path)
    except FileNotFoundError:
        return NodeTable(loc, None, sums, f"{header_path}: not on disk ({loc.origin}); FlashInfer downloads it at first use")
    except OSError as exc:
        raise TableError(str(header_path), f"unreadable: {exc}") from None
    want = sums.files.get("include/flashInferMetaInfo.h")
    got = hashlib.sha256(header_raw).hexdigest()
    if want is not None and got != want:
        raise TableError(str(header_path), f"sha256 {got[:16]}... differs from checksums.txt's {want[:16]}... "
                                           "(corrupt or truncated)")
    table = parse_meta_info(header_raw.decode("utf-8", errors="replace"), str(header_path))
    table = KernelTable(table.rows, table.origin, pin=loc.pin or "unknown", license=table.license,
                        struct_fields=table.struct_fields, checksums_sha256=digest, header_sha256=got)
    return NodeTable(loc, table, sums, f"{header_path} ({loc.origin})")
