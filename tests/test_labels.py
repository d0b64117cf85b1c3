"""Kubernetes labels (NFD local feature file): derived from the rules, valid label syntax,
written atomically; the deploy/ examples agree with what is produced."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from attnplan.cli.main import main as cli_main
from attnplan.policy import Fact, InvalidInputError, NodeFacts, default_ruleset, simulated_node
from attnplan.preflight.labels import node_labels, render_feature_file, sanitize_value, write_atomic

ROOT = Path(__file__).resolve().parents[1]
NFD_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
# Kubernetes' own syntax (apimachinery validation), written out independently of the module.
NAME = re.compile(r"^attnplan\.io/(?=.{1,63}$)[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
VALUE = re.compile(r"^(?=.{0,63}$)(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def assert_valid(labels: dict[str, str]) -> None:
    assert labels
    for k, v in labels.items():
        assert NAME.match(k), k
        assert VALUE.match(v), (k, v)


def test_b200_labels():
    lab = node_labels(simulated_node("B200"))
    assert_valid(lab)
    assert lab["attnplan.io/trtllm-gen"] == "true"
    assert lab["attnplan.io/nvfp4-kv"] == "true"
    assert lab["attnplan.io/fa3"] == "false"
    assert lab["attnplan.io/fa2"] == "true"
    assert lab["attnplan.io/sinks"] == "true"
    assert lab["attnplan.io/max-head-dim"] == "512"
    assert (lab["attnplan.io/capability-major"], lab["attnplan.io/capability-minor"]) == ("10", "0")
    assert lab["attnplan.io/rules-revision"] == default_ruleset().revision


def test_h100_labels():
    lab = node_labels(simulated_node("H100"))
    assert_valid(lab)
    assert lab["attnplan.io/fa3"] == "true" and lab["attnplan.io/trtllm-gen"] == "false"
    # vLLM 0.33 on 9.0: XQA decode (artifactory reachable), sinks through it, NVFP4 KV through fa2
    # (_nvfp4_kv_on_fa2), head_dim 512 on fa2 (JIT); head 96 decodes on XQA but nothing prefills it
    assert lab["attnplan.io/xqa"] == "true"
    assert lab["attnplan.io/nvfp4-kv"] == "true" and lab["attnplan.io/sinks"] == "true"
    assert lab["attnplan.io/max-head-dim"] == "512" and lab["attnplan.io/head-dim-96"] == "false"
    assert (lab["attnplan.io/capability-major"], lab["attnplan.io/capability-minor"]) == ("9", "0")
    assert (lab["attnplan.io/engine"], lab["attnplan.io/engine-version"]) == ("vllm", "0.33.0")


def test_labels_follow_the_rules_not_the_device_name():
    # Same silicon family, different software facts: the rules, not a device table, decide.
    hang = node_labels(simulated_node("GB300", flashinfer_version="0.6.7"))  # trtllm.sm103-hang
    # head_dim 512 still plans (fa2 runs it), but no longer on trtllm-gen
    assert hang["attnplan.io/trtllm-gen"] == "false" and hang["attnplan.io/max-head-dim"] == "512"
    assert node_labels(simulated_node("GB300"))["attnplan.io/trtllm-gen"] == "true"
    assert node_labels(simulated_node("B200", cubins="missing"))["attnplan.io/trtllm-gen"] == "false"
    bi = node_labels(simulated_node("B200", batch_invariant=True))
    assert bi["attnplan.io/trtllm-gen"] == "false" and bi["attnplan.io/batch-invariant"] == "true"
    # 12.x is "blackwell" to GPU feature discovery, but not family 10.x
    rtx = node_labels(simulated_node("RTX PRO 6000"))
    assert rtx["attnplan.io/trtllm-gen"] == "false" and rtx["attnplan.io/fa3"] == "false"
    assert rtx["attnplan.io/xqa"] == "true" and rtx["attnplan.io/nvfp4-kv"] == "true"  # fa2 / XQA on 12.x
    assert rtx["attnplan.io/capability-major"] == "12"
    # an A100 reads NVFP4 on fa2 too, but vLLM serves sinks on 9.0/12.x only (supports_sink)
    a100 = node_labels(simulated_node("A100"))
    assert a100["attnplan.io/nvfp4-kv"] == "true" and a100["attnplan.io/sinks"] == "false"
    assert a100["attnplan.io/xqa"] == "false"


def test_labels_follow_the_engine_layer():
    # On 9.0 vLLM 0.33 serves sinks only on the XQA path it gates on the artifactory check; the
    # kernel layer runs them through the sink wrapper whatever the cubins (issue 12's table).
    h100 = simulated_node("H100", cubins="missing")
    vllm, kernel = node_labels(h100), node_labels(h100, engine="flashinfer")
    assert vllm["attnplan.io/xqa"] == "false" and vllm["attnplan.io/sinks"] == "false"
    assert kernel["attnplan.io/sinks"] == "true" and kernel["attnplan.io/engine"] == "flashinfer"
    assert "attnplan.io/engine-version" in kernel  # the node's flashinfer
    assert node_labels(h100, engine="vllm==0.33.0") == vllm
    with pytest.raises(InvalidInputError, match="engine"):
        node_labels(h100, engine="vllm==0.1.0")


def test_cli_labels_engine(capsys):
    assert cli_main(["labels", "--device", "H100", "--cubins", "missing", "--engine", "flashinfer", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["attnplan.io/sinks"] == "true"
    assert cli_main(["labels", "--device", "H100", "--engine", "sglang==0.4.0"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "vllm==0.33.0" in err


def test_no_gpu_node():
    node = NodeFacts(gpu_count=Fact.measured(0, "NVML"), capability=Fact.unknown("no GPU"),
                     torch_version=Fact.measured("2.9.0+cu128"), driver_version=Fact.unknown())
    lab = node_labels(node)
    assert_valid(lab)
    assert lab["attnplan.io/cuda"] == "false" and lab["attnplan.io/max-head-dim"] == "0"
    assert "attnplan.io/capability-major" not in lab
    assert all(lab[f"attnplan.io/{b}"] == "false" for b in default_ruleset().backends)
    assert lab["attnplan.io/torch-version"] == "2.9.0-cu128"  # '+' is not a label character
    assert "attnplan.io/driver-version" not in lab  # unknown: left out, not 'None'


@pytest.mark.parametrize("raw, want", [
    ("2.9.0+cu128", "2.9.0-cu128"), ("0.7.2.post1", "0.7.2.post1"), (True, "true"), (10, "10"),
    ("NVIDIA B200", "NVIDIA-B200"), ("+++", None), (None, None), ("-x-", "x"), ("a" * 80, "a" * 63),
    ("é", None),
])
def test_sanitize(raw, want):
    got = sanitize_value(raw)
    assert got == want
    if got is not None:
        assert VALUE.match(got)


def test_hostile_fact_values_never_break_the_file():
    node = simulated_node("B200").with_fact(
        gpu_name=Fact.declared("evil\nattnplan.io/fa3=true"), flashinfer_version=Fact.declared("0.7.2.post1"))
    lab = node_labels(node)
    assert_valid(lab)
    text = render_feature_file(lab, node)
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert "attnplan.io/fa3=false" in lines and "attnplan.io/fa3=true" not in lines


def test_cli_labels_stdout_feature_file_format(capsys):
    rc = cli_main(["labels", "--device", "B200"])
    out = capsys.readouterr().out
    assert rc == 0
    body = [ln for ln in out.splitlines() if ln and not ln.startswith("#")]
    pairs = dict(ln.split("=", 1) for ln in body)
    assert_valid(pairs)
    assert pairs["attnplan.io/trtllm-gen"] == "true" and pairs["attnplan.io/max-head-dim"] == "512"
    rc = cli_main(["labels", "--device", "H100", "--json"])
    assert json.loads(capsys.readouterr().out)["attnplan.io/fa3"] == "true"


def test_cli_labels_output_is_atomic(tmp_path, capsys):
    target = tmp_path / "attnplan"
    target.write_text("old")
    assert cli_main(["labels", "--device", "GB300", "--output", str(target)]) == 0
    text = target.read_text()
    assert "attnplan.io/capability-minor=3" in text
    assert len(text.encode()) < 64 * 1024
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attnplan"]  # no dotfile left behind
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "attnplan"
    target.write_text("attnplan.io/fa2=true\n")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(InvalidInputError, match="no space left on device"):  # exit 2, one line
        write_atomic(target, "attnplan.io/fa2=false\n")
    assert target.read_text() == "attnplan.io/fa2=true\n"
    assert [p.name for p in tmp_path.iterdir()] == ["attnplan"]


def test_cli_labels_bad_output(capsys, tmp_path):
    assert cli_main(["labels", "--device", "B200", "--output", str(tmp_path / "nope" / "attnplan")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert cli_main(["labels", "--device", "B200", "--output", str(tmp_path / ".hidden")]) == 2
    assert "dotfiles" in capsys.readouterr().err


def test_cli_labels_local_node_without_gpu(capsys, monkeypatch):
    # This machine (no GPU in CI): probed, reported as cuda=false, never crashing.
    monkeypatch.setenv("ATTNPLAN_ARTIFACTORY_CHECK", "never")
    from attnplan.node import probe

    monkeypatch.setattr(probe, "LOCAL", probe.NodeCache(lambda: NodeFacts(
        gpu_count=Fact.measured(0, "NVML"), capability=Fact.unknown("no GPU"))))
    assert cli_main(["labels"]) == 0
    assert "attnplan.io/cuda=false" in capsys.readouterr().out


def test_daemonset_writes_into_nfd_features_d():
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "daemonset-labels.yaml").read_text()))
    ds = docs[0]
    assert ds["kind"] == "DaemonSet"
    spec = ds["spec"]["template"]["spec"]
    c = spec["containers"][0]
    script = " ".join(c["command"] + c["args"])
    assert f"attnplan labels --output {NFD_DIR}/attnplan" in script
    assert any(m["mountPath"] == NFD_DIR for m in c["volumeMounts"])
    vol = next(v for v in spec["volumes"] if v["name"] == c["volumeMounts"][0]["name"])
    assert vol["hostPath"]["path"] == NFD_DIR
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_affinity_example_matches_produced_labels():
    dep = yaml.safe_load((ROOT / "deploy" / "node-affinity-example.yaml").read_text())
    aff = dep["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    required = aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    exprs = [e for term in required for e in term["matchExpressions"]]
    exprs += [e for p in aff.get("preferredDuringSchedulingIgnoredDuringExecution", [])
              for e in p["preference"]["matchExpressions"]]

    def matches(labels: dict[str, str], es) -> bool:
        for e in es:
            v = labels.get(e["key"])
            op = e["operator"]
            if op == "In" and v not in e["values"]:
                return False
            if op in ("Gt", "Lt"):
                if v is None or not v.lstrip("-").isdigit():
                    return False
                if (op == "Gt" and not int(v) > int(e["values"][0])) or (op == "Lt" and not int(v) < int(e["values"][0])):
                    return False
        return True

    req = [e for term in required for e in term["matchExpressions"]]
    every = set(node_labels(simulated_node("B200")))
    assert {e["key"] for e in exprs} <= every  # no key the labeler does not produce
    # GPT-OSS + nvfp4 KV: family 10.x only - not Hopper, not the 12.x "Blackwell" parts
    assert matches(node_labels(simulated_node("B200")), req)
    assert matches(node_labels(simulated_node("GB300")), req)
    for dev in ("H100", "RTX PRO 6000", "DGX Spark", "A100"):
        assert not matches(node_labels(simulated_node(dev)), req), dev
    assert not matches(node_labels(simulated_node("B200", cubins="missing")), req)


# -- one label per configured model ------------------------------------------------------------
MODELS = ROOT / "tests" / "models"


def test_model_labels_are_valid_kubernetes_labels(capsys, tmp_path):
    long = tmp_path / ("a-very-long-model-name-" * 4 + "x.json")
    long.write_text((MODELS / "gpt-oss-20b.json").read_text())
    rc = cli_main(["labels", "--device", "A100", "--model", str(long), "--model", str(MODELS / "gemma-3-27b-it.json"),
                   "--serve", f"vllm serve {MODELS / 'deepseek-v3.json'} -tp 8", "--json"])
    labels = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert_valid(labels)
    models = {k: v for k, v in labels.items() if k.startswith("attnplan.io/model-") and not k.endswith("-backend")}
    backends = {k: v for k, v in labels.items() if k.startswith("attnplan.io/model-") and k.endswith("-backend")}
    assert len(models) == 3 and len(backends) == 3
    long_label = next(k for k in models if "very-long" in k)
    assert len(long_label.split("/", 1)[1]) <= 63
    # vLLM serves gpt-oss's sinks on 8.0 with TRITON_ATTN (FlashInfer has none there): the model runs, and the
    # label says so - a node-affinity rule on it never keeps a model off a node that serves it
    assert models[long_label] == "runs"
    assert "TRITON_ATTN" in backends.values()
    assert models["attnplan.io/model-gemma-3-27b-it"] == "runs"
    # the capability labels are still there, unchanged by the model labels
    assert labels["attnplan.io/fa2"] == "true"


def test_model_labels_feature_file_and_bad_input(capsys, tmp_path):
    out = tmp_path / "attnplan"
    # Gemma-2's soft cap: vLLM 0.33 runs it on an A100 (fa2 keeps the cap) and would drop it on a B200.
    rc = cli_main(["labels", "--device", "A100", "--model", "gemma-2-9b", "--output", str(out)])
    assert rc == 0 and "attnplan.io/model-gemma-2-9b=runs\n" in out.read_text()
    rc = cli_main(["labels", "--device", "B200", "--model", "gemma-2-9b", "--output", str(out)])
    assert rc == 0 and "attnplan.io/model-gemma-2-9b=vllm.softcap-dropped\n" in out.read_text()
    capsys.readouterr()
    # two models under one label name: which one would the label describe?
    (tmp_path / "gemma_2_9b.json").write_text((ROOT / "attnplan" / "presets" / "gemma-2-9b.json").read_text())
    (tmp_path / "c.yaml").write_text(f"- {{name: 'gemma 2', model: {tmp_path / 'gemma_2_9b.json'}}}\n"
                                     f"- {{name: 'gemma-2', model: gemma-2-9b}}\n")
    rc = cli_main(["labels", "--device", "B200", "--configs", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "distinct names" in err
    rc = cli_main(["labels", "--device", "B200", "--model", str(tmp_path / "missing.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "model_config" in err and "Traceback" not in err


@pytest.mark.parametrize("facts, state", [
    (dict(cubin_dir_has_cubins=True, artifactory_reachable=False), "on-disk"),
    (dict(flashinfer_cubin_version="0.7.2.post1", cubin_dir_has_cubins=False, artifactory_reachable=False), "on-disk"),
    # a cubin wheel of another version is ignored by FlashInfer 0.7.2 (jit/env.py _get_cubin_dir)
    (dict(flashinfer_cubin_version="0.7.0.post1", cubin_dir_has_cubins=False, artifactory_reachable=True), "download"),
    (dict(flashinfer_cubin_version=None, cubin_dir_has_cubins=False, artifactory_reachable=False), "missing"),
])
def test_trtllm_cubins_ready_label(facts, state):
    node = simulated_node("B200", flashinfer_version="0.7.2.post1").with_fact(
        **{k: Fact.measured(v) for k, v in facts.items()})
    lab = node_labels(node)
    assert lab["attnplan.io/trtllm-cubins"] == state
    assert lab["attnplan.io/trtllm-kernel-table"] == "none"
    # the capability label still follows the rules, not this label: missing cubins refuse trtllm-gen
    assert (lab["attnplan.io/trtllm-gen"] == "true") == (state != "missing")
    assert "attnplan.io/trtllm-cubins" not in node_labels(simulated_node("H100"))


def test_flashinfer_imports_label():
    ok = simulated_node("B200").with_fact(flashinfer_import_error=Fact.measured(None))
    bad = ok.with_fact(flashinfer_import_error=Fact.measured("flashinfer-cubin version (0.7.2) does not match ..."))
    assert node_labels(ok)["attnplan.io/flashinfer-imports"] == "true"
    assert node_labels(bad)["attnplan.io/flashinfer-imports"] == "false"


@pytest.mark.parametrize("cubins, state", [("available", "on-disk"), ("missing", "missing")])
def test_preflight_groups_carry_cubins_ready(cubins, state, capsys):
    """Issue 37: preflight's JSON report says, per group of 10.x nodes, where trtllm-gen's cubins would come from
    (the same function as the label); other GPUs carry none."""
    rc = cli_main(["preflight", "--simulate", "B200=2,H100=1", "--head-dim", "128", "--num-heads", "32",
                   "--num-kv-heads", "8", "--cubins", cubins, "--json"])
    data = json.loads(capsys.readouterr().out)
    got = {g["device"]: g.get("trtllm_cubins") for g in data["groups"]}
    assert got == {"B200": state, "H100": None}
    assert rc in (0, 1)
