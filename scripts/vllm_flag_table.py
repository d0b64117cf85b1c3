"""Write vLLM's `vllm serve` flag table (attnplan/vllm/args.py extract_flag_table) for the installed vLLM to
attnplan/vllm/tables/vllm-<version>-flags.json: the wheel reads a line with it where vLLM is not installed
(every flag vLLM takes is accepted; those that do not change attention are listed as ignored).

    python scripts/vllm_flag_table.py                   # needs vllm installed (make setup installs 0.33.0 --no-deps)
    python scripts/vllm_flag_table.py --check           # exit 1 when the shipped table is not the installed vLLM's
    python scripts/vllm_flag_table.py --release 0.32.0  # a release's code unpacked by scripts/vllm_releases.py
    python scripts/vllm_flag_table.py --release 0.32.0 --check
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASE_ENV = "ATTNPLAN_FLAG_TABLE_RELEASE"


def _release_argv() -> tuple[str | None, list[str]]:
    argv = sys.argv[1:]
    if "--release" not in argv:
        return None, argv
    i = argv.index("--release")
    if i + 1 >= len(argv):
        raise SystemExit("--release takes a version, e.g. --release 0.32.0")
    return argv[i + 1], argv[:i] + argv[i + 2:]


def _in_release(release: str, argv: list[str]) -> int:
    """This script again, in a process whose vLLM is ``release``'s code (first on PYTHONPATH): vLLM's parser is
    built once per process from whatever vLLM it imports."""
    releases = Path(os.environ.get("ATTNPLAN_VLLM_RELEASES") or ROOT / ".venv" / "releases")
    path = releases / f"vllm-{release}"
    if not (path / "vllm" / "__init__.py").is_file():
        print(f"error: vLLM {release}'s code is not at {path} (python scripts/vllm_releases.py {release})", file=sys.stderr)
        return 2
    env = {**os.environ, RELEASE_ENV: release,
           "PYTHONPATH": os.pathsep.join([str(path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, __file__, *argv], env=env).returncode


def main() -> int:
    release, argv = _release_argv()
    if release is not None and os.environ.get(RELEASE_ENV) != release:
        return _in_release(release, sys.argv[1:])   # the child reads --release too (and checks the table's version)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # parsing only: no GPU platform needed
    from attnplan.vllm.args import SHIPPED_TABLES, _vllm_parser, extract_flag_table

    table = extract_flag_table(_vllm_parser())
    table.pop("attnplan", None)  # keyed by vLLM's version alone: the flags are vLLM's
    if release is not None and table["vllm"] != release:   # the dist-info found first is not the code imported
        import vllm

        print(f"error: asked for vLLM {release}, but the table says {table['vllm']} ({vllm.__file__})", file=sys.stderr)
        return 2
    out = SHIPPED_TABLES / f"vllm-{table['vllm']}-flags.json"
    text = json.dumps(table, indent=0, sort_keys=True) + "\n"
    if "--check" in argv:
        same = out.is_file() and json.loads(out.read_text(encoding="utf-8")) == json.loads(text)
        whose = f"vLLM {table['vllm']}'s" if release else "the installed vLLM's"
        print(f"{out}: {whose if same else 'STALE: not ' + whose} ({len(table['actions'])} flags)")
        return 0 if same else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(table['actions'])} flags)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
