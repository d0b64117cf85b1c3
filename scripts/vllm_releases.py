"""Fetch vLLM releases' Python code for the oracle (issue 42): ``.venv/releases/vllm-<X>/`` holds the release's
``vllm/`` package and its ``.dist-info`` unpacked from the wheel, without the compiled extensions (``*.so``, the
oracle stubs them: attnplan/oracle/vllm_env.py) nor the C/C++/CUDA headers shipped for JIT builds. Nothing is
installed: ``python -m attnplan.oracle.vllm --release X`` puts the directory first on ``PYTHONPATH``.

    python scripts/vllm_releases.py 0.31.0 0.32.0          # download (pip download --no-deps) and unpack
    python scripts/vllm_releases.py --wheel-dir /tmp/dl 0.32.0   # use a wheel already there
    python scripts/vllm_releases.py --pins 0.31.0 0.32.0   # print the flashinfer-python pins only

Idempotent: a release already unpacked from the same wheel (``.attnplan-release`` stamp: the wheel's name and
sha256) is left as it is. Prints each release's flashinfer-python pin (its wheel METADATA ``Requires-Dist``).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ROOT / ".venv" / "releases"
STAMP = ".attnplan-release"
# Compiled code and the sources vLLM ships only for JIT builds: not Python, and not read by any selection code.
SKIP = (".so", ".h", ".hpp", ".cuh", ".cu", ".cpp", ".cc", ".inl", ".c")
SKIP_FILES = {"vllm/vllm-rs"}   # a Rust executable (57 MB), the frontend's; no Python imports it
VERSION = re.compile(r"^\d+(\.\d+)+(\.post\d+|rc\d+)?$")


def release_dir(version: str, root: Path = RELEASES) -> Path:
    return root / f"vllm-{version}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_wheel(version: str, dirs: list[Path]) -> Optional[Path]:
    for d in dirs:
        hits = sorted(glob.glob(str(d / f"vllm-{version}-*.whl")))
        if hits:
            return Path(hits[0])
    return None


def download(version: str, dest: Path) -> Path:
    """``pip download --no-deps`` of the release's binary wheel (its dependencies would pull a CUDA torch)."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    f"vllm=={version}", "-d", str(dest)], check=True)
    wheel = find_wheel(version, [dest])
    if wheel is None:
        raise SystemExit(f"pip download vllm=={version} left no vllm-{version}-*.whl in {dest}")
    return wheel


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode("utf-8")


def pins(meta: str) -> dict[str, str]:
    """The unconditional ``Requires-Dist`` pins the attention layers depend on (flashinfer-python, torch)."""
    out = {}
    for line in meta.splitlines():
        m = re.match(r"Requires-Dist:\s*(flashinfer-python|torch)\s*([=<>!~][^;]*)$", line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def unpack(wheel: Path, dest: Path) -> bool:
    """Unpack the wheel's Python side into dest; False when dest already holds this very wheel."""
    stamp = {"wheel": wheel.name, "sha256": _sha256(wheel)}
    if (dest / STAMP).is_file():
        try:
            if json.loads((dest / STAMP).read_text()) == stamp:
                return False
        except ValueError:
            pass
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    tmp.chmod(0o755)   # mkdtemp's 0700 would keep the release from other users of the venv
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp, [n for n in z.namelist() if not n.endswith("/") and not n.endswith(SKIP)
                                  and n not in SKIP_FILES])
        (tmp / STAMP).write_text(json.dumps(stamp) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)   # a half-unpacked release is never left under its own name
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return True


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("versions", nargs="+", help="vLLM releases, e.g. 0.31.0 0.32.0")
    ap.add_argument("--wheel-dir", action="append", type=Path, default=[],
                    help="look for vllm-<X>-*.whl here before downloading (repeatable)")
    ap.add_argument("--dest", type=Path, default=RELEASES, help=f"where releases go (default {RELEASES})")
    ap.add_argument("--pins", action="store_true", help="only print the pins (from an unpacked release or a wheel)")
    ap.add_argument("--keep-wheel", action="store_true", help="keep a downloaded wheel (default: removed)")
    args = ap.parse_args(argv)
    for v in args.versions:
        if not VERSION.match(v):
            raise SystemExit(f"{v!r} is not a release version (e.g. 0.32.0)")
    args.dest.mkdir(parents=True, exist_ok=True)
    for v in args.versions:
        dest = release_dir(v, args.dest)
        meta_files = glob.glob(str(dest / f"vllm-{v}.dist-info" / "METADATA"))
        if args.pins and meta_files:
            meta = Path(meta_files[0]).read_text(encoding="utf-8")
        else:
            wheel = find_wheel(v, args.wheel_dir)
            downloaded = wheel is None
            if downloaded:
                if (dest / STAMP).is_file() and meta_files and not args.pins:
                    # unpacked before and its wheel gone: nothing to compare the stamp with, keep it
                    meta = Path(meta_files[0]).read_text(encoding="utf-8")
                    print(f"vllm {v}: {dest} (already unpacked)  pins: {json.dumps(pins(meta))}")
                    continue
                wheel = download(v, args.dest / ".wheels")
            meta = metadata(wheel)
            if not args.pins:
                fresh = unpack(wheel, dest)
                print(f"vllm {v}: {dest} ({'unpacked from ' + wheel.name if fresh else 'already unpacked'})", end="")
            if downloaded and not args.keep_wheel:
                wheel.unlink()
        print(f"{'vllm ' + v + ':' if args.pins else ''}  pins: {json.dumps(pins(meta))}")
    shutil.rmtree(args.dest / ".wheels", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
