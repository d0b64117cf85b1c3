"""An empty, missing or malformed rule set fails closed: the CLI exits 2 with one line naming the
file, and the REST service stays not ready with plan routes at 503 (issue 11)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from attnplan.cli.main import main as cli_main
from attnplan.policy import RulePackError, load_rules, simulated_node
from attnplan.rest.app import create_app
from attnplan.rest.server import BackgroundServer
from attnplan.rules import PACKS_DIR

PLAN = ["plan", "--device", "B200", "--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]


def bad_dirs(tmp: Path) -> dict[str, Path]:
    empty = tmp / "empty"
    empty.mkdir()
    missing = tmp / "missing"
    no_rules = tmp / "no-rules"
    no_rules.mkdir()
    (no_rules / "a.yaml").write_text("pack: a\nrules: []\n")
    broken = tmp / "broken"
    shutil.copytree(PACKS_DIR, broken)
    (broken / "core.yaml").write_text("pack: core\nrules: [\n")
    return {"empty": empty, "missing": missing, "no-rules": no_rules, "broken": broken}


@pytest.mark.parametrize("kind", ["empty", "missing", "no-rules", "broken"])
def test_load_rules_refuses(tmp_path, kind):
    d = bad_dirs(tmp_path)[kind]
    with pytest.raises(RulePackError) as exc:
        load_rules(d)
    assert str(d) in str(exc.value) or d.name in str(exc.value)


@pytest.mark.parametrize("cmd", [PLAN, ["rules"], ["matrix"], ["explain", *PLAN[1:]]])
@pytest.mark.parametrize("kind", ["empty", "missing", "no-rules", "broken"])
def test_cli_exits_2_with_one_line(tmp_path, capsys, cmd, kind):
    d = bad_dirs(tmp_path)[kind]
    assert cli_main([*cmd, "--rules", str(d)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert d.name in err


def test_cli_reads_attnplan_rules(tmp_path, capsys, monkeypatch):
    d = bad_dirs(tmp_path)["empty"]
    monkeypatch.setenv("ATTNPLAN_RULES", str(d))
    assert cli_main(PLAN) == 2
    assert "empty" in capsys.readouterr().err


def test_server_with_bad_packs_is_not_ready(tmp_path):
    d = bad_dirs(tmp_path)["broken"]
    with BackgroundServer(create_app(node=simulated_node("H100"), rules_dir=d)) as srv:
        ready = httpx.get(f"{srv.url}/readyz")
        assert ready.status_code == 503 and "core.yaml" in ready.json()["reason"]
        assert httpx.get(f"{srv.url}/healthz").status_code == 200  # the process is up, not ready
        r = httpx.post(f"{srv.url}/v1/plan", json={"config": {"head_dim": 128, "num_qo_heads": 8}})
        assert r.status_code == 503 and "core.yaml" in r.json()["detail"]
        for path in ("/v1/rules", "/v1/matrix"):
            assert httpx.get(f"{srv.url}{path}").status_code == 503


def test_server_with_own_packs_serves_them(tmp_path):
    d = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, d)
    with BackgroundServer(create_app(node=simulated_node("H100"), rules_dir=d)) as srv:
        assert httpx.get(f"{srv.url}/readyz").status_code == 200
        assert httpx.get(f"{srv.url}/v1/rules").json()["rules"]
