"""Issue 16, CLI: output paths that cannot be written are bad input (exit 2, one line), and
``--rules DIR`` reaches ``preflight`` (simulated nodes plan with it) and ``labels``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from attnplan.cli.main import main
from attnplan.cli.output import open_output, write_output
from attnplan.policy import InvalidInputError, load_rules
from attnplan.rules import PACKS_DIR

LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("target,why", [("/nonexistent/m.md", "no such directory"), ("/tmp", "is a directory"),
                                        ("", "empty file name")])
def test_open_output_refuses_unwritable_paths(target, why):
    with pytest.raises(InvalidInputError) as exc:
        open_output(target)
    assert why in str(exc.value) and len(str(exc.value).splitlines()) == 1


def test_write_output_writes(tmp_path):
    write_output(tmp_path / "m.md", "hello\n")
    assert (tmp_path / "m.md").read_text() == "hello\n"


@pytest.mark.parametrize("target", ["/tmp", "/nonexistent/dir/labels", ""])
def test_labels_output_unwritable_exits_2(capsys, target):
    rc, out, err = run(capsys, "labels", "--device", "B200", "--output", target)
    assert rc == 2 and one_line(err) and out == "", err


def test_labels_output_writes_the_file(capsys, tmp_path):
    rc, _, err = run(capsys, "labels", "--device", "B200", "--output", str(tmp_path / "attnplan"))
    assert rc == 0, err
    assert "attnplan.io/trtllm-gen=true" in (tmp_path / "attnplan").read_text()


def without_rule(tmp_path: Path, rule_id: str) -> Path:
    d = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, d)
    for f in d.glob("*.yaml"):
        data = yaml.safe_load(f.read_text())
        kept = [r for r in data.get("rules", []) if r.get("id") != rule_id]
        if len(kept) != len(data.get("rules", [])):
            data["rules"] = kept
            f.write_text(yaml.safe_dump(data, sort_keys=False))
            return d
    raise AssertionError(f"no rule {rule_id}")


def test_preflight_simulate_plans_with_rules_dir(capsys, tmp_path):
    argv = ["preflight", "--simulate", "GB300=2", *LLAMA, "--flashinfer-version", "0.6.7", "--json"]
    rc, out, _ = run(capsys, *argv)
    shipped = json.loads(out)
    assert rc == 0 and shipped["nodes"][0]["results"][0]["prefill"] == "fa2"  # trtllm.sm103-hang
    d = without_rule(tmp_path, "trtllm.sm103-hang")
    rc, out, _ = run(capsys, *argv, "--rules", str(d))
    mine = json.loads(out)
    assert rc == 0 and mine["nodes"][0]["results"][0]["prefill"] == "trtllm-gen"
    assert mine["rules_revision"] == load_rules(d).revision != shipped["rules_revision"]


@pytest.mark.parametrize("cmd", [["preflight", "--simulate", "B200=1", *LLAMA], ["labels", "--device", "B200"]])
def test_preflight_and_labels_refuse_bad_rules_dir(capsys, tmp_path, cmd):
    broken = tmp_path / "broken"
    shutil.copytree(PACKS_DIR, broken)
    (broken / "core.yaml").write_text("pack: core\nrules: [\n")
    rc, out, err = run(capsys, *cmd, "--rules", str(broken))
    assert rc == 2 and out == "" and one_line(err) and "core.yaml" in err


def test_labels_with_rules_dir(capsys, tmp_path):
    d = without_rule(tmp_path, "trtllm.sm103-hang")
    argv = ["labels", "--device", "GB300", "--flashinfer-version", "0.6.7", "--json"]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0 and json.loads(out)["attnplan.io/trtllm-gen"] == "false"
    rc, out, _ = run(capsys, *argv, "--rules", str(d))
    labels = json.loads(out)
    assert rc == 0 and labels["attnplan.io/trtllm-gen"] == "true"
    assert labels["attnplan.io/rules-revision"] == load_rules(d).revision
