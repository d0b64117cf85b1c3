"""README.md is executed: every command block runs and its output is compared with the README's.

Block format (follow it when adding README sections):

* A fenced block whose info string is ``console`` is a **command block**. Lines starting with
  ``$ `` are commands (a line ending in ``\\`` continues on the next); the lines after a command,
  up to the next ``$ `` line, are its expected **stdout** (stderr is not compared). The commands of
  one block run in order in one ``bash`` process (so ``$ echo $?`` prints the previous command's
  exit status), from the repository root, with the checkout's ``attnplan`` first on ``PATH``,
  ``COLUMNS=100`` and the user's HuggingFace cache replaced by an empty one (offline).
* Expected output may elide: a line that is just ``...`` matches any number of lines (zero
  included); ``...`` inside a line matches any text there. Volatile values are written as
  placeholders: ``<version>`` (attnplan's version), ``<revision>`` (a rules revision: 12 hex
  digits), ``<number>`` (an integer or decimal), ``<any>`` (any text within the line). Trailing
  spaces are ignored. Everything else must match exactly.
* A marker, an HTML comment on the line right before the fence, changes how a block runs:
  ``<!-- doctest: wheel -->``: from attnplan installed from its wheel into a fresh venv, in an
  empty directory (no checkout: ``examples/`` and ``tests/`` are absent);
  ``<!-- doctest: skip REASON -->``: not run here (GPU, network, docker, a server, a package
  install), REASON saying why; ``<!-- doctest: run -->`` on a ``bash`` block: every line is a
  command that must exit 0, output not compared.
* A ``bash``/``sh``/``shell`` block (commands without output) must carry ``run`` or ``skip``;
  a plain fenced block starting with ``$ `` must be ``console``. Unmarked, they fail this test,
  so nothing the README shows as a command goes unchecked by accident. Other blocks (``python``,
  ``yaml``, diagrams, output excerpts) are prose.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL_LANGS = {"bash", "sh", "shell"}
MARKER = re.compile(r"^<!--\s*doctest:\s*(wheel|run|skip)\s*(.*?)\s*-->\s*$")
SEP = "@@attnplan-doctest-{}@@"


@dataclass
class Block:
    line: int                  # 1-based line of the opening fence
    lang: str
    body: list[str]
    marker: Optional[str] = None
    reason: str = ""
    commands: list[tuple[str, list[str]]] = field(default_factory=list)  # (command, expected lines)

    @property
    def where(self) -> str:
        return f"README.md:{self.line}"


def blocks(text: str) -> list[Block]:
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        b = Block(line=start + 1, lang=lang, body=lines[start + 1:j])
        prev = lines[start - 1] if start > 0 else ""
        mm = MARKER.match(prev)
        if mm:
            b.marker, b.reason = mm.group(1), mm.group(2)
        if lang == "console":
            b.commands = _commands(b.body)
        out.append(b)
        i = j + 1
    return out


def _commands(body: list[str]) -> list[tuple[str, list[str]]]:
    cmds: list[tuple[str, list[str]]] = []
    k = 0
    while k < len(body):
        if body[k].startswith("$ "):
            cmd = body[k][2:]
            while cmd.endswith("\\") and k + 1 < len(body):
                k += 1
                cmd = cmd[:-1] + " " + body[k].strip()
            cmds.append((cmd, []))
        elif cmds:
            cmds[-1][1].append(body[k])
        k += 1
    return cmds


def _pattern(expected: str, version: str) -> re.Pattern[str]:
    parts = re.split(r"(\.\.\.|<version>|<revision>|<number>|<any>)", expected.rstrip())
    rx = ""
    for p in parts:
        rx += {"...": ".*", "<version>": re.escape(version), "<revision>": "[0-9a-f]{12}",
               "<number>": r"-?\d+(?:\.\d+)?", "<any>": ".*"}.get(p, re.escape(p))
    return re.compile(rx + r"\Z")


def matches(expected: list[str], actual: list[str], version: str) -> bool:
    """``expected`` (with ``...`` lines and placeholders) against ``actual``, line by line."""
    exp = [e.rstrip() for e in expected]
    act = [a.rstrip() for a in actual]
    while exp and not exp[-1]:
        exp.pop()
    while act and not act[-1]:
        act.pop()

    def go(i: int, j: int) -> bool:
        if i == len(exp):
            return j == len(act)
        if exp[i].strip() == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and bool(_pattern(exp[i], version).match(act[j])) and go(i + 1, j + 1)

    return go(0, 0)


def run_block(b: Block, *, path_dir: str, cwd: Path, env_extra: dict[str, str]) -> list[list[str]]:
    """Each command's stdout lines, running the block's commands in one bash process."""
    # `( exit $__rc )` hands the previous command's status on past the separator (for `echo $?`).
    script = "\n".join(f"printf '%s\\n' '{SEP.format(n)}'; ( exit ${{__rc:-0}} )\n{cmd}\n__rc=$?"
                       for n, (cmd, _exp) in enumerate(b.commands))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "ATTNPLAN_RULES", "ATTNPLAN_VLLM_PARSER")}
    env.update(PATH=path_dir + os.pathsep + env.get("PATH", ""), COLUMNS="100", **env_extra)
    p = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300, stdin=subprocess.DEVNULL)
    chunks = re.split(r"^@@attnplan-doctest-\d+@@$\n?", p.stdout, flags=re.M)[1:]
    assert len(chunks) == len(b.commands), f"{b.where}: the block did not run to its end:\n{p.stderr[-2000:]}"
    return [c.splitlines() for c in chunks]


ALL = blocks(README.read_text(encoding="utf-8"))


def test_every_command_block_is_marked_or_runnable():
    bad = []
    for b in ALL:
        if b.lang in SHELL_LANGS and b.marker not in ("run", "skip"):
            bad.append(f"{b.where}: a {b.lang} block needs <!-- doctest: run --> or <!-- doctest: skip REASON -->")
        if b.lang == "" and any(ln.startswith("$ ") for ln in b.body[:1]):
            bad.append(f"{b.where}: a block of commands and output is ```console")
        if b.marker == "skip" and not b.reason:
            bad.append(f"{b.where}: a skipped block says why")
        if b.lang == "console" and not b.commands:
            bad.append(f"{b.where}: a console block holds no $ command")
    assert not bad, "\n".join(bad)
    runnable = [b for b in ALL if b.lang == "console" and b.marker != "skip"]
    skipped = [b for b in ALL if b.marker == "skip"]
    assert len(runnable) >= 8, "the README's command blocks went missing"
    print(f"{len(runnable)} console blocks run, {len(skipped)} skipped: "
          + "; ".join(f"{b.where} ({b.reason})" for b in skipped))


def _check(b: Block, outputs: list[list[str]], version: str) -> None:
    for (cmd, expected), actual in zip(b.commands, outputs):
        assert matches(expected, actual, version), (
            f"{b.where}: `{cmd}` printed\n" + "\n".join(actual) + "\n--- the README says ---\n" + "\n".join(expected))


@pytest.fixture(scope="module")
def hf_empty(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("hf")
    return {"HF_HUB_CACHE": str(d), "HF_HOME": str(d), "HF_HUB_OFFLINE": "1"}


CHECKOUT = [b for b in ALL if b.lang == "console" and b.marker is None]
WHEEL = [b for b in ALL if b.lang == "console" and b.marker == "wheel"]
RUN = [b for b in ALL if b.lang in SHELL_LANGS and b.marker == "run"]


@pytest.mark.parametrize("b", CHECKOUT, ids=[b.where for b in CHECKOUT])
def test_console_block_from_the_checkout(b, hf_empty):
    from attnplan import __version__

    outputs = run_block(b, path_dir=str(Path(sys.executable).parent), cwd=ROOT,
                        env_extra={"PYTHONPATH": str(ROOT), **hf_empty})
    _check(b, outputs, __version__)


@pytest.mark.slow
@pytest.mark.parametrize("b", WHEEL, ids=[b.where for b in WHEEL])
def test_console_block_from_the_wheel(b, installed_wheel, hf_empty, tmp_path):
    from attnplan import __version__

    _wheel, venv, _tmp = installed_wheel
    outputs = run_block(b, path_dir=str(venv / "bin"), cwd=tmp_path, env_extra={"PYTHONPATH": "", **hf_empty})
    _check(b, outputs, __version__)


@pytest.mark.parametrize("b", RUN, ids=[b.where for b in RUN])
def test_bash_block_runs(b, hf_empty):
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "ATTNPLAN_RULES")}
    env.update(PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""), PYTHONPATH=str(ROOT), **hf_empty)
    for cmd in b.body:
        cmd = cmd.split("  #")[0].strip()
        if not cmd or cmd.startswith("#"):
            continue
        p = subprocess.run(["bash", "--noprofile", "--norc", "-c", cmd], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, f"{b.where}: `{cmd}` exited {p.returncode}: {p.stderr[-1000:]}"


@pytest.mark.parametrize("expected,actual,ok", [
    (["a", "...", "d"], ["a", "b", "c", "d"], True),
    (["a", "...", "d"], ["a", "d"], True),
    (["a", "...", "d"], ["a", "b"], False),
    (["x <number> y"], ["x 12.5 y"], True),
    (["rules revision <revision>; <number> rules"], ["rules revision a9b2b05c766c; 29 rules"], True),
    (["attnplan <version>"], ["attnplan 9.9"], False),
    (["head ..."], ["head and tail"], True),
    (["exact"], ["exact", "more"], False),
])
def test_matcher(expected, actual, ok):
    assert matches(expected, actual, "0.2.0") is ok


def test_rules_table_is_the_loaded_rules():
    """README's rules table is printed from the rule data (scripts/readme_rules_table.py), not kept by hand."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_rules_table", ROOT / "scripts" / "readme_rules_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = README.read_text(encoding="utf-8")
    assert mod.replace(text) == text, "README's rules table is stale: python scripts/readme_rules_table.py --write"
    from attnplan.policy import default_ruleset

    assert all(f"| `{r.id}` |" in text for r in default_ruleset().rules)
