"""Issue 40 #4: a REST client never makes the node read its files.

``revision`` (``POST /v1/plan`` model references, ``--revision`` in ``/v1/plan/serve`` lines) is a git ref
or commit hash, resolved inside the repo's HuggingFace cache folder only, with bounded reads; a serve
line from a client never opens a file (``--config FILE``, ``@FILE``: refused by name before any parser);
no error carries file contents. On the CLI ``--config FILE`` is the user's own file: read by vLLM's
parser, but a missing or unreadable one is exit 2 and no error quotes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from attnplan.cli.main import main
from attnplan.policy import InvalidInputError, simulated_node
from attnplan.model.hfconfig import cached_config, check_revision
from attnplan.rest.app import create_app

ROOT = Path(__file__).resolve().parents[1]
MARK = "SECRET-5f1c0ffee"
LLAMA = json.loads((ROOT / "attnplan" / "presets" / "llama-3.1-8b.json").read_text())
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture()
def world(tmp_path, monkeypatch):
    """A HF cache holding acme/tiny at main, and the node's own files beside it."""
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "config.json").write_text(json.dumps(LLAMA))
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "config.json").write_text(json.dumps({**LLAMA, MARK: 1, "num_attention_heads": 16}))
    (secret / "secret.yaml").write_text(f"{MARK}: {MARK}\ntensor-parallel-size: 2\n")
    (secret / "notutf8").write_bytes(b"\xff\xfe" * 10)
    # hostile entries inside the cache: refs pointing outside, a snapshot linking outside, a non-UTF-8
    # ref, a ref far over any commit's size
    os.symlink(secret / "config.json", repo / "refs" / "evil")
    (repo / "snapshots" / "outside").mkdir()
    os.symlink(secret / "config.json", repo / "snapshots" / "outside" / "config.json")
    (repo / "refs" / "binary").write_bytes(b"\xff\xfe\x00bad")
    (repo / "refs" / "huge").write_bytes(b"a" * (8 << 20))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return {"tmp": tmp_path, "repo": repo, "secret": secret}


@pytest.fixture()
def client(world):
    with TestClient(create_app(node=simulated_node("H100")), raise_server_exceptions=False) as c:
        yield c


def _no_leak(r) -> None:
    assert r.status_code != 500, r.text
    assert MARK not in r.text, r.text


@pytest.mark.parametrize("rev", ["main", "v1.0.2", "release_2024-01", COMMIT, "a" * 128])
def test_refs_and_commits_are_revisions(rev):
    assert check_revision(rev) == rev


@pytest.mark.parametrize("rev", ["/etc", "../../secret", "..", "main/../..", "a/b", "refs/pr/1", "~root", "",
                                 " main", "main\n", ".hidden", "-rf", "a" * 129, "x..y", "C:\\x", "$(id)", "@{1}"])
def test_paths_are_not_revisions(rev):
    with pytest.raises(InvalidInputError) as info:
        check_revision(rev)
    with pytest.raises(InvalidInputError) as other:
        check_revision("/another/path")
    assert info.value.field == "revision" and str(info.value) == str(other.value)  # never quoting the value


def test_the_cache_is_read_only_inside_the_repo_folder(world):
    assert cached_config("acme/tiny") == world["repo"] / "snapshots" / COMMIT / "config.json"
    assert cached_config("acme/tiny", COMMIT) is not None
    for rev in ("evil", "outside", "binary", "huge", "nope"):  # outside the folder, unreadable, over the bound
        assert cached_config("acme/tiny", rev) is None, rev


def test_plan_revision_never_opens_a_node_file(world, client):
    secret = world["secret"]
    ok = client.post("/v1/plan", json={"model": "acme/tiny", "revision": "main"})
    assert ok.status_code == 200 and ok.json()["status"] in ("ok", "rejected")
    assert client.post("/v1/plan", json={"model": "acme/tiny", "revision": COMMIT}).status_code == 200
    for rev in (str(secret), os.path.relpath(secret, world["repo"] / "snapshots"), "../../../secret",
                "evil", "outside", "binary", "huge", str(secret / "notutf8")):
        r = client.post("/v1/plan", json={"model": "acme/tiny", "revision": rev})
        _no_leak(r)
        assert r.status_code == 422, (rev, r.text)
        assert r.json()["detail"][0]["field"] in ("revision", "model"), r.text
        assert rev not in r.text or rev in ("evil", "outside", "binary", "huge")


def test_a_serve_line_never_opens_a_node_file(world, client):
    s = world["secret"]
    for line in (f"vllm serve llama-3.1-8b --config {s / 'secret.yaml'}",
                 f"vllm serve llama-3.1-8b --config={s / 'secret.yaml'}",
                 f"vllm serve llama-3.1-8b --hf-overrides @{s / 'config.json'}",
                 f"vllm serve llama-3.1-8b --hf-overrides=@{s / 'config.json'}",
                 f"vllm serve llama-3.1-8b @{s / 'secret.yaml'}",
                 f"vllm serve acme/tiny --revision {s}",
                 "vllm serve acme/tiny --revision ../../../secret",
                 f"vllm serve {s}",
                 f"vllm serve {s / 'config.json'}"):
        for r in (client.post("/v1/plan/serve", json={"line": line}),
                  client.post("/v1/plan/serve", content=line, headers={"content-type": "text/plain"})):
            _no_leak(r)
            assert r.status_code == 422, (line, r.text)
            assert str(s) not in r.text, r.text
    r = client.post("/v1/plan/serve", json={"line": "vllm serve acme/tiny --revision main -tp 2"})
    assert r.status_code == 200, r.text


def test_cli_config_file_errors_are_exit_2_and_never_quote_the_file(world, capsys):
    pytest.importorskip("vllm")
    s = world["secret"]
    for extra in (["--config", str(s / "missing.yaml")], ["--config", str(s / "notutf8")],
                  ["--config", str(s / "secret.yaml")], ["--config", str(s / "config.json")],
                  ["--config", str(s / "secret.yaml"), "--config", str(s / "secret.yaml")]):
        rc = main(["vllm", "serve", "llama-3.1-8b", *extra, "--device", "H100"])
        cap = capsys.readouterr()
        assert rc == 2, (extra, cap.err)
        assert MARK not in cap.out + cap.err and len(cap.err.strip().splitlines()) == 1, cap.err


def test_cli_revision_is_a_ref(world, capsys):
    rc = main(["vllm", "serve", "acme/tiny", "--revision", str(world["secret"]), "--device", "H100"])
    cap = capsys.readouterr()
    assert rc == 2 and "revision" in cap.err and MARK not in cap.out + cap.err
