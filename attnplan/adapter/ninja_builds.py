"""Build several ninja projects (FlashInfer's JIT modules) as one, and leave each project's
directory as if it had built itself.

Warm-up compiles every module a plan lists before the first request. Measured on the H100
(``bench/jit_prebuild.py``, 5 MLA modules, 33 compile edges, 16 cores):

- one ninja over all modules (``subninja``, as ``flashinfer.jit.build_jit_specs`` does):
  101 s, no longer than its slowest translation unit took, so no schedule does better. But
  ninja keeps its log and deps where it runs, so each module's getter, which runs ninja again
  from the module's own directory, finds no record and compiles everything a second time at
  the first request;
- one ninja per module, ``-j`` shared by source counts: 155 s (FA3's ~100 s kernels ran in
  waves);
- one ninja per module drawing on a shared jobserver: 128 s, since a ninja asks for a freed
  slot only when one of its own jobs ends, so slots freed by small modules sat idle;
- what this module does: 91.7 s (longest unit 84 s), and no module's own ninja has anything
  left to run.

So: one ninja over every module that has work to do, run in a private directory, whose
``.ninja_log`` and ``.ninja_deps`` are then copied into each module's directory. Both files
key their records by output path, and FlashInfer writes absolute paths, so each module's own
ninja finds a record for every output it names (the other modules' records are ignored) and
has nothing to do. The copy happens even when the build fails, so what did compile is kept.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from attnplan.errors import BuildError

RECORDS = (".ninja_log", ".ninja_deps")


@dataclass(frozen=True)
class NinjaBuild:
    workdir: Path
    ninja_file: Path
    weight: int = 1          # translation units: heavier projects go first in the manifest


def default_slots() -> int:
    """``MAX_JOBS`` as FlashInfer reads it, else every core."""
    env = os.environ.get("MAX_JOBS", "")
    return int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)


def find_ninja(ninja: Optional[str] = None) -> str:
    found = ninja or shutil.which("ninja")
    if found is None:
        raise BuildError(None, "ninja is not on PATH (pip install ninja)")
    return found


def pending_edges(build: NinjaBuild, ninja: Optional[str] = None) -> Optional[int]:
    """Edges the project's own ninja, run from its directory, would run (``ninja -n``); None
    when that dry run fails (no ninja file yet, a broken one)."""
    r = subprocess.run([find_ninja(ninja), "-n", "-C", str(build.workdir), "-f", str(build.ninja_file)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return sum(1 for line in r.stdout.splitlines() if line.startswith("["))


def has_work(build: NinjaBuild, ninja: Optional[str] = None) -> bool:
    return pending_edges(build, ninja) != 0


def build_together(builds: Sequence[NinjaBuild], slots: Optional[int] = None, *,
                   ninja: Optional[str] = None) -> list[NinjaBuild]:
    """Build every project that has work to do with one ninja of ``slots`` jobs; return those
    built. Raises ``BuildError`` naming the project of the first failed edge."""
    ninja = find_ninja(ninja)
    todo = sorted((b for b in builds if has_work(b, ninja)), key=lambda b: -b.weight)
    if not todo:
        return []
    with tempfile.TemporaryDirectory(prefix="attnplan-build-") as tmp:
        top = Path(tmp) / "build.ninja"
        top.write_text("ninja_required_version = 1.3\n" +
                       "".join(f"subninja {b.ninja_file.resolve()}\n" for b in todo))
        with tempfile.TemporaryFile(mode="w+") as log:
            try:
                rc = subprocess.run([ninja, "-C", tmp, "-f", str(top), "-j", str(slots or default_slots())],
                                    stdout=log, stderr=subprocess.STDOUT).returncode
            finally:
                for b in todo:
                    _hand_over(Path(tmp), b.workdir)
            if rc:
                log.seek(0)
                text = log.read()
                raise BuildError(_failed_project(text, todo), text)
    return todo


def _hand_over(src: Path, workdir: Path) -> None:
    """Give ``workdir`` the combined build's records, replacing its own atomically."""
    for name in RECORDS:
        if (src / name).exists():
            tmp = workdir / f"{name}.attnplan-tmp"
            shutil.copyfile(src / name, tmp)
            os.replace(tmp, workdir / name)


def _failed_project(output: str, builds: Sequence[NinjaBuild]) -> Optional[Path]:
    for m in re.finditer(r"^FAILED: (?:\[code=\d+\] )?(\S+)", output, re.M):
        out = Path(m.group(1))
        for b in builds:
            if b.workdir.resolve() in out.resolve().parents:
                return b.workdir
    return None
