"""Issue 24, inputs: each hostile input of #2-#7, #10-#13 (and the strict floats and ``vllm==``)
is exit 2 with one line naming the file, line or field, or an error row, never exit 70, a hang,
or a pass. Each reproduced the fault before the fix (hang, TypeError, ValueError, OSError,
OverflowError, MemoryError, a gigabyte decoded, ``status: ok`` counted)."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import ValidationError

from attnplan.cli.main import main
from attnplan.policy import AttentionConfig, InvalidInputError, ModelConfigError, default_ruleset, load_rules
from attnplan.policy import make_config, plan_for, simulated_node
from attnplan.model import read_layers
from attnplan.policy.engines import resolve_engine
from attnplan.model.layers import MAX_LAYERS
from attnplan.policy.rulepack import MAX_DIR_BYTES, RulePackError
from attnplan.preflight.model import NamedConfig
from attnplan.preflight.transport import BodyError, BoundedInflater, inflater_for
from attnplan.rules import PACKS_DIR
from attnplan.safeio import MAX_NODES, parse_yaml

LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]
CFG = make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8})
# 31 anchors, each a mapping naming the previous one twice: 62 aliases (under the alias limit),
# 2^31 nodes once expanded (issue 24 #2).
DOUBLING = "c0: &c0 {fact: config.head_dim, eq: 128}\n" + "".join(
    f"c{i}: &c{i} {{all: [*c{i - 1}, *c{i - 1}]}}\n" for i in range(1, 32))


def run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


def packs(tmp_path: Path, evil: str) -> Path:
    d = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, d)
    (d / "zz-evil.yaml").write_text(evil)
    return d


RULE = "pack: evil\nrules:\n  - id: evil.rule\n    title: t\n    reason: r\n    source: s\n    backends: [fa2]\n"


# -- #2, #3: expanded size, not alias count ------------------------------------------------------
def test_doubling_aliases_refused_by_expanded_size_before_composition():
    t0 = time.monotonic()
    with pytest.raises(InvalidInputError, match=f"expands to more than {MAX_NODES} YAML nodes"):
        parse_yaml(DOUBLING, what="rules", name="f.yaml")
    assert time.monotonic() - t0 < 30  # (a guard against a hang, not a speed assertion: it took > 60 s)


def test_aliases_that_expand_little_still_load():
    text = "a: &a {x: 1}\n" + "".join(f"b{i}: *a\n" for i in range(40))
    assert parse_yaml(text, what="rules", name="f.yaml")["b39"] == {"x": 1}


def test_doubling_in_a_pack_condition_is_exit_2(tmp_path, capsys):
    body = "    require: {all: [" + ", ".join(["*c31"]) + "]}\n"
    d = packs(tmp_path, DOUBLING.replace("c0:", "x0:", 1).replace("\nc", "\nx") + "\n" + RULE + body)
    rc, err = run(capsys, "rules", "--rules", str(d))
    assert rc == 2 and one_line(err) and "zz-evil.yaml" in err and "expands to more than" in err


def test_doubling_in_configs_yaml_is_exit_2(tmp_path, capsys):
    p = tmp_path / "configs.yaml"
    p.write_text(DOUBLING + "list:\n  - *c31\n")
    rc, err = run(capsys, "preflight", "--simulate", "B200=1", "--configs", str(p))
    assert rc == 2 and one_line(err) and "configs.yaml" in err and "expands to more than" in err


# -- #4, #5: unhashable keys and huge integers -------------------------------------------------------
@pytest.mark.parametrize("text, line", [("a: 1\n{[a, b]: 1}: 2\n", 2), ("? [a]\n", 1), ("x:\n  ? {k: v}\n  : 1\n", 2)])
def test_unhashable_keys_name_the_line(text, line):
    with pytest.raises(InvalidInputError, match=f"f.yaml: line {line}: a mapping key must be a plain value"):
        parse_yaml(text, what="rules", name="f.yaml")


def test_yaml_sets_refused():
    with pytest.raises(InvalidInputError, match="YAML sets"):
        parse_yaml("a: !!set {x, y}\n", what="rules", name="f.yaml")


def test_huge_integer_refused_and_long_ones_accepted():
    with pytest.raises(InvalidInputError, match="line 2: an integer of 5000 digits"):
        parse_yaml("a: 1\nb: " + "9" * 5000 + "\n", what="configs", name="f.yaml")
    assert parse_yaml("a: " + "9" * 40, what="x", name="f") == {"a": int("9" * 40)}


@pytest.mark.parametrize("evil", ["{[a, b]: 1}: 2\n", "? [a]\n", "big: " + "7" * 4400 + "\n"])
def test_pack_and_configs_with_unhashable_key_or_huge_int_exit_2(tmp_path, capsys, evil):
    d = packs(tmp_path, RULE + "    require: {fact: config.head_dim, eq: 128}\n" + evil)
    rc, err = run(capsys, "rules", "--rules", str(d))
    assert rc == 2 and one_line(err) and "zz-evil.yaml" in err and "line" in err
    p = tmp_path / "c.yaml"
    p.write_text("- {head_dim: 128, num_qo_heads: 32}\n- " + evil)
    rc, err = run(capsys, "preflight", "--simulate", "B200=1", "--configs", str(p))
    assert rc == 2 and one_line(err) and "c.yaml" in err and "line 2" in err


def test_unhashable_key_through_attnplan_rules(tmp_path, capsys, monkeypatch):
    d = packs(tmp_path, RULE + "    require: {fact: config.head_dim, eq: 128}\n{[a]: 1}: 2\n")
    monkeypatch.setenv("ATTNPLAN_RULES", str(d))
    rc, err = run(capsys, "plan", "--device", "B200", *LLAMA)
    assert rc == 2 and one_line(err) and "zz-evil.yaml" in err


# -- #10, #13: rules directory -------------------------------------------------------------------
def test_overlong_rules_path_is_exit_2(capsys, monkeypatch):
    monkeypatch.setenv("ATTNPLAN_RULES", "/" + "a" * 5000)
    rc, err = run(capsys, "rules")
    assert rc == 2 and one_line(err) and "file name too long" in err and len(err) < 400


def test_rules_path_that_is_a_file_is_exit_2(tmp_path, capsys):
    rc, err = run(capsys, "rules", "--rules", str(PACKS_DIR / "core.yaml"))
    assert rc == 2 and one_line(err) and "not a directory" in err


def test_rules_directory_total_size_limit(tmp_path):
    d = tmp_path / "big"
    shutil.copytree(PACKS_DIR, d)
    # Each pack under the per-file limit, together over the directory's.
    filler = "# " + "x" * 1000 + "\n"
    n = MAX_DIR_BYTES // (900 * 1024) + 1
    for i in range(n):
        (d / f"filler{i}.yaml").write_text(RULE.replace("evil.rule", f"evil.rule{i}") + "    require: {fact: config.head_dim, eq: 128}\n"
                                           + filler * 900)
    t0 = time.monotonic()
    with pytest.raises(RulePackError, match=f"over {MAX_DIR_BYTES} bytes in all"):
        load_rules(d)
    assert time.monotonic() - t0 < 30  # refused before parsing (40 such packs ran past 150 s)


# -- #6, #7: model configs -------------------------------------------------------------------------
BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 4}
MLA = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "kv_lora_rank": 512,
       "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
FALCON_H1 = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "mamba_n_heads": 8,
             "mamba_d_head": 64, "mamba_d_state": 16}


@pytest.mark.parametrize("over, field", [
    ({"num_hidden_layers": 10_000_000}, "num_hidden_layers"),
    ({"num_hidden_layers": 10**9}, "num_hidden_layers"),
    ({"num_hidden_layers": 10**5000}, "num_hidden_layers"),
    ({"layer_types": [["x"]] * 4}, "layer_types"),
    ({"layer_types": [{"a": 1}, "full_attention", "full_attention", "full_attention"]}, "layer_types"),
    ({**MLA, "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": "x"}}, "mscale_all_dim"),
    ({**MLA, "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": [1]}}, "mscale_all_dim"),
    ({**MLA, "rope_scaling": {"type": "yarn", "factor": 10**400}}, "factor"),
    (FALCON_H1, "mamba_expand"),
    ({**FALCON_H1, "mamba_expand": 1e308}, "mamba_expand"),
    ({"head_dim": 10**400}, "head_dim"),
])
def test_model_config_refusals_name_the_field(over, field):
    with pytest.raises(ModelConfigError, match=field):
        read_layers({**BASE, **over})


def test_layer_limit_and_grouping_without_per_layer_models():
    model = read_layers({**BASE, "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
                         "sliding_window": 4096, "num_hidden_layers": MAX_LAYERS})
    assert [(g.kind, len(g.layers)) for g in model.groups] == [("sliding", MAX_LAYERS // 2), ("full", MAX_LAYERS // 2)]
    assert model.groups[0].layers[:3] == (0, 2, 4)
    ok = read_layers({**BASE, **FALCON_H1, "mamba_expand": 2})
    assert [g.kind for g in ok.groups] == ["full", "mamba"] and ok.groups[1].layers == (0, 1, 2, 3)


@pytest.mark.parametrize("over", [{"num_hidden_layers": 10_000_000}, {"layer_types": [["x"]] * 4},
                                  {**FALCON_H1, "mamba_expand": 1e308}])
def test_model_config_refusals_are_exit_2_on_the_cli(tmp_path, capsys, over):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**BASE, **over}))
    rc, err = run(capsys, "plan", "--device", "B200", "--model-config", str(p))
    assert rc == 2 and one_line(err) and "config.json" in err


# -- also: strict floats, "vllm==" ---------------------------------------------------------------------
@pytest.mark.parametrize("field", ["logits_soft_cap", "sm_scale"])
@pytest.mark.parametrize("value", ["128", True, "50.0"])
def test_float_fields_are_strict(field, value):
    with pytest.raises(ValidationError):
        AttentionConfig.model_validate({"head_dim": 128, "num_qo_heads": 32, field: value})


@pytest.mark.parametrize("field", ["logits_soft_cap", "sm_scale"])
def test_float_fields_take_json_numbers(field):
    assert getattr(AttentionConfig.model_validate({"head_dim": 128, "num_qo_heads": 32, field: 50}), field) == 50.0


@pytest.mark.parametrize("engine", ["vllm==", "vllm== ", "VLLM==", "flashinfer=="])
def test_engine_with_empty_version_refused(engine):
    with pytest.raises(InvalidInputError, match="engine"):
        resolve_engine(engine, simulated_node("H100"), default_ruleset())


def test_engine_with_empty_version_is_exit_2(capsys):
    rc, err = run(capsys, "plan", "--device", "H100", *LLAMA, "--engine", "vllm==")
    assert rc == 2 and one_line(err) and "names no version" in err


# -- #11: bounded decoding --------------------------------------------------------------------------
def test_stacked_and_unknown_encodings_refused():
    for enc in ("gzip, gzip", "gzip,deflate", "deflate, gzip, gzip"):
        with pytest.raises(BodyError, match="stacked"):
            inflater_for(enc, 1000)
    with pytest.raises(BodyError, match="not accepted"):
        inflater_for("br", 1000)
    assert inflater_for(None, 10) is None and inflater_for("identity", 10) is None


def test_inflater_stops_at_the_limit_without_producing_more():
    bomb = gzip.compress(b"\0" * (50 << 20))  # 50 MiB of zeros in ~50 KiB
    inf = BoundedInflater("gzip", 1 << 20)
    with pytest.raises(BodyError, match="larger than 1048576 bytes once decoded"):
        for i in range(0, len(bomb), 4096):
            inf.feed(bomb[i:i + 4096])
    assert inf.produced <= (1 << 20) + 1


@pytest.mark.parametrize("encoding, packer", [("gzip", gzip.compress), ("deflate", zlib.compress),
                                              ("deflate", lambda b: zlib.compress(b)[2:-4])])
def test_honest_encodings_decode(encoding, packer):
    data = json.dumps({"x": list(range(1000))}).encode()
    inf = BoundedInflater(encoding, 1 << 20)
    packed = packer(data)
    out = b"".join(inf.feed(packed[i:i + 100]) for i in range(0, len(packed), 100)) + inf.finish()
    assert out == data


class EncodedNode:
    """A node answering with a fixed body and Content-Encoding."""

    def __init__(self, body: bytes, encoding: str = ""):
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                if outer.encoding:
                    self.send_header("content-encoding", outer.encoding)
                self.send_header("content-length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *a):
                pass

        self.body, self.encoding = body, encoding
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _ask(*hosts: str):
    from attnplan.preflight.http import HttpOptions, parse_host, query_hosts

    sink: dict = {}
    asyncio.run(query_hosts([parse_host(h) for h in hosts], [NamedConfig(name="c", config=CFG)],
                            HttpOptions(retries=0, timeout=60.0), sink))
    return [sink[i] for i in range(len(hosts))]


def wire(answer, **changes) -> bytes:
    body = {"schema_version": "1", **answer.to_json(trace=False)}
    body.update(changes)
    return json.dumps(body).encode()


def test_gzip_bombs_are_error_rows_and_other_nodes_answer():
    good = wire(plan_for(CFG, simulated_node("B200")))
    inner = gzip.compress(b" " * (64 << 20), 9)
    double = gzip.compress(inner, 9)
    with EncodedNode(good) as ok, EncodedNode(good, "gzip") as plain_gz, \
            EncodedNode(double, "gzip, gzip") as stacked, EncodedNode(inner, "gzip") as single:
        plain_gz.body = gzip.compress(good)
        rows = _ask(ok.host, plain_gz.host, stacked.host, single.host)
    kinds = [(r.kind, r.reason) for r in rows]
    assert rows[0].kind == "answered" and rows[1].kind == "answered", kinds
    assert rows[2].kind == "error" and "stacked Content-Encoding" in rows[2].reason, kinds
    assert rows[3].kind == "error" and "once decoded" in rows[3].reason, kinds


# -- #12: ok with violations ---------------------------------------------------------------------
def test_ok_answer_with_violations_is_an_error_row():
    ok = plan_for(CFG, simulated_node("B200"))
    rejected = plan_for(make_config({"head_dim": 100, "num_qo_heads": 32, "num_kv_heads": 8}), simulated_node("B200"))
    assert rejected.status == "rejected" and rejected.violations
    body = json.loads(wire(ok))
    body["violations"] = json.loads(wire(rejected))["violations"]
    with EncodedNode(json.dumps(body).encode()) as node:
        (row,) = _ask(node.host)
    assert row.kind == "error" and "status ok with" in row.reason and "violated rule" in row.reason, row.reason
