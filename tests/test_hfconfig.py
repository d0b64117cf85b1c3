"""Models by name and config.json reading (issue 14 item 3, issue 16 items 2 and 11)."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pytest

from attnplan.cli.main import main
from attnplan.policy import ModelConfigError
from attnplan.model import config_from_hf
from attnplan.model.hfconfig import fields_from_hf, model_info, read_model, resolve_model
from attnplan.render.notes import note_text

MODELS = Path(__file__).parent / "models"
LLAMA = MODELS / "vllm-llama-3.1-8b"
READERS = [pytest.param(False, id="attnplan-parser"),
           pytest.param(True, id="transformers", marks=pytest.mark.skipif(
               not __import__("importlib").util.find_spec("transformers"), reason="transformers not installed"))]


def load(name: str) -> dict:
    return json.loads((MODELS / name / "config.json").read_text())


@pytest.mark.parametrize("use_tf", READERS)
def test_falcon_40b_num_kv_heads_is_read_as_kv_heads(use_tf):
    f = fields_from_hf(load("vllm-falcon-40b"), use_transformers=use_tf)
    assert (f["num_qo_heads"], f["num_kv_heads"], f["head_dim"]) == (128, 8, 64)


@pytest.mark.parametrize("use_tf", READERS)
def test_falcon_7b_multi_query_is_one_kv_head(use_tf):
    f = fields_from_hf(load("vllm-falcon-7b"), use_transformers=use_tf)
    assert (f["num_qo_heads"], f["num_kv_heads"], f["head_dim"]) == (71, 1, 64)


@pytest.mark.parametrize("use_tf", READERS)
def test_deepseek_mla_dims(use_tf):
    f = fields_from_hf(load("vllm-deepseek-v3"), use_transformers=use_tf)
    assert (f["kv_lora_rank"], f["qk_nope_head_dim"], f["qk_rope_head_dim"], f["v_head_dim"]) == (512, 128, 64, 128)


@pytest.mark.parametrize("bad", [
    {"num_attention_heads": 0}, {"num_attention_heads": -4}, {"num_key_value_heads": 0},
    {"num_key_value_heads": 3}, {"attn_logit_softcapping": math.nan}, {"attn_logit_softcapping": math.inf},
    {"attn_logit_softcapping": -1.0}, {"head_dim": -128}, {"num_attention_heads": "32"},
])
def test_impossible_values_are_refused(bad):
    data = {**load("vllm-llama-3.1-8b"), **bad}
    with pytest.raises(ModelConfigError):
        fields_from_hf(data, use_transformers=False)


def test_unread_fields_are_named_in_a_note():
    info = model_info({**load("vllm-llama-3.1-8b"), "attention_chunk_size": 8192}, use_transformers=False)
    assert info.reader == "attnplan"
    n, = info.notes_says                                  # data, worded by render/notes.py
    assert n.kind == "unread-fields" and "attention_chunk_size" in n.named_by and "vocab_size" not in n.named_by
    assert note_text(n) == ("config.json: fields not read by attnplan's parser (install transformers to read them as "
                            "the model does): attention_chunk_size")


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("cfg", [{"num_attention_heads": 0}, {"attn_logit_softcapping": "NaN"}])
def test_cli_zero_heads_and_nan_softcap_exit_2_one_line(tmp_path, capsys, cfg):
    data = {**load("vllm-llama-3.1-8b"), **cfg}
    text = json.dumps(data).replace('"NaN"', "NaN")
    (tmp_path / "config.json").write_text(text)
    rc, out, err = run_cli(capsys, "plan", "--device", "B200", "--model", str(tmp_path))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_deep_nesting_duplicate_keys_dev_zero_and_fifo_exit_2(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    dup = tmp_path / "dup.json"
    dup.write_text('{"num_attention_heads": 32, "num_attention_heads": 8, "hidden_size": 4096}')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (deep, dup, "/dev/zero", fifo):
        done: list = []
        t = threading.Thread(target=lambda: done.append(run_cli(capsys, "plan", "--device", "B200",
                                                                "--model-config", str(path))), daemon=True)
        t.start()
        t.join(20)
        assert done, f"{path} hung"
        rc, _out, err = done[0]
        assert rc == 2 and len(err.strip().splitlines()) == 1, (path, err)


def test_directory_without_config_json_exit_2(tmp_path, capsys):
    rc, _out, err = run_cli(capsys, "plan", "--device", "B200", "--model", str(tmp_path))
    assert rc == 2 and "no config.json" in err and len(err.strip().splitlines()) == 1


def _fake_cache(home: Path, repo: str, data: dict) -> None:
    d = home / "hub" / ("models--" + repo.replace("/", "--"))
    (d / "refs").mkdir(parents=True)
    (d / "refs" / "main").write_text("abc123")
    (d / "snapshots" / "abc123").mkdir(parents=True)
    (d / "snapshots" / "abc123" / "config.json").write_text(json.dumps(data))


def test_repo_id_from_the_local_cache_honours_hf_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    _fake_cache(tmp_path, "acme/falcon-40b", load("vllm-falcon-40b"))
    assert resolve_model("acme/falcon-40b") == tmp_path / "hub/models--acme--falcon-40b/snapshots/abc123/config.json"
    c = config_from_hf("acme/falcon-40b")
    assert (c.num_qo_heads, c.kv_heads) == (128, 8)
    rc, out, err = run_cli(capsys, "plan", "--device", "B200", "--model", "acme/falcon-40b", "--json")
    assert rc in (0, 1) and json.loads(out)["config"]["num_kv_heads"] == 8


def test_uncached_repo_id_says_how_to_fetch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    rc, _out, err = run_cli(capsys, "plan", "--device", "B200", "--model", "acme/not-here")
    assert rc == 2 and "hf download acme/not-here config.json" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--device", "--capability"])
def test_empty_device_is_refused_not_probed(capsys, monkeypatch, flag):
    import attnplan.node

    def no_probe():
        raise AssertionError("probed the local machine")

    # cli/plan.py imports the probe where it probes (only without a declared node)
    monkeypatch.setattr(attnplan.node, "local_node", no_probe)
    rc, _out, err = run_cli(capsys, "plan", flag, "", "--num-heads", "8", "--head-dim", "128")
    assert rc == 2 and "empty" in err and len(err.strip().splitlines()) == 1


def test_read_model_applies_hf_overrides():
    info = read_model(LLAMA, hf_overrides={"num_key_value_heads": 4})
    assert info.fields["num_kv_heads"] == 4
