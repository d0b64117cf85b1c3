"""Engine releases as data (issue 42): ``versions:`` on an item of ``engines.<name>`` keeps it for those releases
only, each release's layer is loaded and checked like the newest's, ``--engine vllm==X`` plans with X's layer, and
a declared node planned for a release has the FlashInfer that release pins (policy/engines.py release_node)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from attnplan import plan_for   # the public call: a finished answer (its notes written by render/)
from attnplan.policy import default_ruleset, load_rules, simulated_node
from attnplan.policy.engines import flashinfer_pin, parse_engine, resolve_engine
from attnplan.policy.errors import InvalidInputError, RulePackError
from attnplan.rules import BACKENDS_FILE, PACKS_DIR

LLAMA = dict(num_qo_heads=32, num_kv_heads=8, head_dim=128, dtype="bfloat16", kv_cache_dtype="auto")


def _variant(tmp_path: Path, edit) -> Path:
    """A copy of the shipped rules whose backends.yaml ``edit`` changed (the packs as shipped)."""
    packs = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, packs)
    data = yaml.safe_load(Path(BACKENDS_FILE).read_text())
    edit(data)
    out = tmp_path / "backends.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _two_releases(data: dict) -> None:
    """A made-up change between the shipped releases: vLLM 0.32.0 (and 0.31.0) decode with fa2 on 9.0, 0.33.0 as
    shipped (XQA first). The releases and their pins are the shipped ones."""
    vllm = data["engines"]["vllm"]
    assert {"0.32.0", "0.33.0"} <= set(vllm["versions"]) and vllm["releases"]["0.32.0"]["flashinfer"] == "0.7.0.post1"
    rows = vllm["selection"]["standard"]["decode"]
    i = next(i for i, r in enumerate(rows) if r.get("capability_major") == 9)
    rows[i] = {**rows[i], "versions": ">=0.33.0"}
    rows.insert(i, {"capability_major": 9, "candidates": ["fa2"], "versions": "<0.33.0"})


@pytest.fixture
def rs2(tmp_path: Path):
    return load_rules(tmp_path / "packs", _variant(tmp_path, _two_releases))


def test_each_release_has_its_own_layer(rs2) -> None:
    old = rs2.layer("vllm", "0.32.0").selection["standard"]["decode"]
    new = rs2.layer("vllm", "0.33.0").selection["standard"]["decode"]
    row = lambda rows: next(r for r in rows if r.capability_major == 9)  # noqa: E731
    assert row(old).candidates == ["fa2"] and row(new).candidates == ["xqa", "fa2"]
    assert rs2.layer("vllm") is rs2.engines["vllm"] is rs2.layer("vllm", "0.33.0")
    # a patch release inside covers answers as the newest listed release not after it
    assert rs2.layer("vllm", "0.32.5") is rs2.layer("vllm", "0.32.0")


def test_engine_release_selects_the_layer(rs2) -> None:
    node = simulated_node(device="H100")
    a32 = plan_for(LLAMA, node, ruleset=rs2, engine="vllm==0.32.0")
    a33 = plan_for(LLAMA, node, ruleset=rs2, engine="vllm==0.33.0")
    assert a32.engine.version == "0.32.0" and a33.engine.version == "0.33.0"
    # the shipped 0.33 data's decode pick on 9.0 is the one the 0.33 layer of the variant gives
    shipped = plan_for(LLAMA, node, engine="vllm==0.33.0")
    assert a33.plan.decode.backend == shipped.plan.decode.backend != "fa2"
    assert a32.plan.decode.backend == "fa2"


def test_declared_node_gets_the_release_pin(rs2) -> None:
    node = simulated_node(device="H100")
    a32 = plan_for(LLAMA, node, ruleset=rs2, engine="vllm==0.32.0")
    assert flashinfer_pin(rs2, a32.engine) == "0.7.0.post1"
    assert a32.node.flashinfer_version.value == "0.7.0.post1"
    assert a32.node.flashinfer_cubin_version.value == "0.7.0.post1"   # an assumed cubin wheel follows it
    assert not any("pins flashinfer-python" in n for n in a32.notes)
    # a node that declares its FlashInfer keeps it, and is told the release pins another
    own = simulated_node(device="H100", flashinfer_version="0.7.2.post1")
    told = plan_for(LLAMA, own, ruleset=rs2, engine="vllm==0.32.0")
    assert told.node.flashinfer_version.value == "0.7.2.post1"
    assert any("pins flashinfer-python==0.7.0.post1" in n and "0.7.2.post1" in n for n in told.notes)


def test_unmodelled_release_names_the_modelled_ones(rs2) -> None:
    with pytest.raises(InvalidInputError) as e:
        parse_engine("vllm==0.30.0", rs2)
    assert "0.31.0" in str(e.value)
    # with no release asked and no vllm on the node: the newest modelled
    assert resolve_engine("vllm", simulated_node(device="H100"), rs2).version == "0.33.0"


def test_releases_must_match_versions(tmp_path: Path) -> None:
    def edit(data: dict) -> None:
        data["engines"]["vllm"]["versions"] = ["0.30.0", *data["engines"]["vllm"]["versions"]]
        data["engines"]["vllm"]["covers"] = ">=0.30.0,<0.34"
    with pytest.raises(RulePackError, match="one entry per modelled release"):
        load_rules(tmp_path / "packs", _variant(tmp_path, edit))


def test_bad_row_range_fails_the_load_naming_it(tmp_path: Path) -> None:
    def edit(data: dict) -> None:
        _two_releases(data)
        data["engines"]["vllm"]["selection"]["standard"]["decode"][0]["versions"] = "newer than 0.32"
    with pytest.raises(RulePackError, match=r"selection\.standard\.decode\[0\]\.versions"):
        load_rules(tmp_path / "packs", _variant(tmp_path, edit))


def test_a_release_layer_is_checked_like_the_newest(tmp_path: Path) -> None:
    def edit(data: dict) -> None:
        _two_releases(data)
        data["engines"]["vllm"]["selection"]["standard"]["decode"].insert(
            0, {"capability_major": 9, "candidates": ["no-such-backend"], "versions": "<0.33.0"})
    with pytest.raises(RulePackError, match=r"release 0\.3[12]\.0.*no-such-backend"):
        load_rules(tmp_path / "packs", _variant(tmp_path, edit))


def test_shipped_pins_are_read_from_the_engine_wheels() -> None:
    rs = default_ruleset()
    for name, spec in rs.engines.items():
        if spec.versions and spec.releases:
            assert set(spec.releases) == set(spec.versions)
            for v, pin in spec.releases.items():
                assert "METADATA" in pin.source, (name, v)
    ref = resolve_engine("vllm==0.33.0", None, rs)
    assert flashinfer_pin(rs, ref) == "0.7.2.post1"
    assert plan_for(LLAMA, simulated_node(device="H100"), engine="vllm==0.33.0").node.flashinfer_version.value \
        == "0.7.2.post1"
