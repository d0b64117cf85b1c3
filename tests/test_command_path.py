"""One command imports its own path (issue 36 item 6): ``attnplan plan`` builds only its subcommand's
parser, so the REST service, preflight, verify and the other commands' modules stay unimported;
``--help`` and an unknown command still see every command."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import contextlib, io, json, sys
from attnplan.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        rc = main(sys.argv[1:])
    except SystemExit as exc:
        rc = exc.code
print(json.dumps({"rc": rc, "modules": sorted(m for m in sys.modules if m.startswith("attnplan"))}))
"""


def _run(*argv: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_plan_imports_only_its_command():
    r = _run("plan", "--model-config", "gemma-2-9b", "--device", "H100")
    assert r["rc"] in (0, 1)
    mods = set(r["modules"])
    assert "attnplan.cli.plan" in mods
    others = {"attnplan.cli.preflight", "attnplan.cli.serve", "attnplan.cli.verify", "attnplan.cli.upgrade",
              "attnplan.cli.compare", "attnplan.cli.cubins", "attnplan.cli.labels", "attnplan.cli.completion"}
    assert not mods & others, sorted(mods & others)
    assert not any(m.startswith(("attnplan.rest", "attnplan.preflight", "attnplan.verify", "attnplan.adapter"))
                   for m in mods)
    # a declared node probes nothing, and the capability matrix is `attnplan matrix`'s (policy/__init__.py __getattr__)
    assert not mods & {"attnplan.node.probe", "attnplan.policy.matrix", "attnplan.policy.representative"}
    assert "attnplan.request" in mods          # the one request pipeline (attnplan/request.py plan_request)
    # vllm/serve.py takes policy's names (not vllm/backends.py, vllm/mapping.py's re-exports), a rule-set load imports
    # sglang/data.py alone (sglang/__init__.py: flags on first use), the tables never import --json's render/answer.py
    assert not mods & {"attnplan.vllm.backends", "attnplan.vllm.mapping", "attnplan.sglang.flags",
                       "attnplan.render.answer"}, sorted(mods)
    # issue 36 item 6: fewer modules on this path than at 447ed6d, which imported 56 (54 when this was written)
    assert len(mods) < 56, len(mods)


def test_global_flags_before_the_command_keep_the_short_path():
    mods = set(_run("-q", "plan", "--device", "H100", "--head-dim", "128", "--num-heads", "8")["modules"])
    assert "attnplan.cli.plan" in mods and "attnplan.cli.verify" not in mods
    # a config given by flags reads no vllm line (cli/options.py: vllm/args.py only for --speculative-config) and
    # builds no model request (cli/plan.py: attnplan.request only for --model-config)
    assert not any(m.startswith(("attnplan.vllm", "attnplan.request")) for m in mods), sorted(mods)


def test_an_unknown_command_lists_every_command():
    done = subprocess.run([sys.executable, "-m", "attnplan", "nosuchcommand"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    for name in ("plan", "vllm", "sglang", "preflight", "serve", "verify", "cubins", "upgrade"):
        assert f"'{name}'" in done.stderr


def test_the_command_table_names_every_command_each_module_registers():
    # a command missing from COMMANDS still runs (the whole parser is built), only without its short path
    from attnplan.cli.main import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == {n for _, names in COMMANDS for n in names}
