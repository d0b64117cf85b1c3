"""vLLM 0.31.0 / 0.32.0 / 0.33.0 on the command line (issue 42): `attnplan vllm serve --engine vllm==X` reads the line
with release X's own flag table (shipped: attnplan/vllm/tables) where the installed vLLM is another release, plans it
with X's engine layer and the FlashInfer X pins, and an unmodelled release is exit 2 naming the modelled ones."""

from __future__ import annotations

import json

import pytest

from attnplan.cli.main import main
from attnplan.policy import InvalidInputError, default_ruleset
from attnplan.vllm.args import parse_serve_line, shipped_table

LLAMA = "llama-3.1-8b"


def _run(capsys, *argv):
    rc = main(["vllm", "serve", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_modelled_release_ships_its_flag_table():
    for v in default_ruleset().engines["vllm"].versions:
        assert shipped_table(v) is not None, v


def test_a_release_reads_the_line_with_its_own_flags():
    # 0.33 added --enable-X/--disable-X negatives for every boolean flag; 0.32's parser refuses them
    line = parse_serve_line([LLAMA, "--disable-prefix-caching"], release="0.33.0")
    assert "--disable-prefix-caching" in line.ignored
    with pytest.raises(InvalidInputError, match="--disable-prefix-caching"):
        parse_serve_line([LLAMA, "--disable-prefix-caching"], release="0.32.0")
    assert parse_serve_line([LLAMA, "-tp", "2"], release="0.31.0").tensor_parallel_size == 2


def test_release_plans_with_its_layer_and_pin(capsys):
    rc, out, _ = _run(capsys, LLAMA, "--device", "H100", "--kv-cache-dtype", "nvfp4", "--engine", "vllm==0.31.0", "--json")
    old = json.loads(out)
    rc2, out2, _ = _run(capsys, LLAMA, "--device", "H100", "--kv-cache-dtype", "nvfp4", "--engine", "vllm==0.32.0", "--json")
    new = json.loads(out2)
    assert old["vllm"]["version"] == "0.31.0" and new["vllm"]["version"] == "0.32.0"
    # vLLM 0.32.0 added NVFP4 on fa2 outside 10.x (_nvfp4_kv_on_fa2); 0.31.0 has none there
    assert new["verdict"]["outcome"] == "runs" and rc2 == 0
    assert old["verdict"]["outcome"] != "runs" and rc == 1
    assert "vllm.nvfp4-trtllm-only" in old["verdict"]["rules"] or old["verdict"]["selected"]["decode"] != "FLASHINFER"
    node = old["per_rank"]["node"]
    assert node["flashinfer_version"]["value"] == "0.7.0.post1"   # vLLM 0.31.0's pin, on a declared node


def test_unmodelled_release_is_bad_input(capsys):
    rc, _, err = _run(capsys, LLAMA, "--device", "H100", "--engine", "vllm==0.30.0")
    assert rc == 2 and "vllm==0.31.0" in err and "Traceback" not in err
    rc, _, err = _run(capsys, LLAMA, "--device", "H100", "--engine", "sglang==0.5.23")
    assert rc == 2 and "vLLM's" in err


def test_upgrade_reports_what_loads_not_who_decided_it():
    """0.32 -> 0.33 on a B200: the selection code that decides the trtllm-gen kernels changes (FlashInfer 0.7.0.post1
    -> 0.7.2.post1), the cubins loaded do not: no kernel change is reported; on an H100 nvfp4 0.31 -> 0.32 is."""
    from attnplan.policy import plan_for, simulated_node
    from attnplan.upgrade import Target, model_planner, parse_sides, upgrade
    from attnplan.presets import PRESETS_DIR

    rs = default_ruleset()
    cfg = dict(num_qo_heads=32, num_kv_heads=8, head_dim=128, dtype="bfloat16", kv_cache_dtype="nvfp4")
    b200 = simulated_node("B200")
    a32, a33 = (plan_for(cfg, b200, engine=f"vllm=={v}") for v in ("0.32.0", "0.33.0"))
    assert a32.plan.decode.kernel_table != a33.plan.decode.kernel_table
    same = [c.file for c in a32.plan.decode.cubins] == [c.file for c in a33.plan.decode.cubins]
    rep = upgrade(rs, *parse_sides("vllm==0.32.0", "vllm==0.33.0", rs), {"llama": model_planner(
        str(PRESETS_DIR / "llama-3.1-8b.json"), rs, overrides={"kv_cache_dtype": "nvfp4"})},
                  [Target("B200", b200)])
    kernel_changes = [c for d in rep.deployments for g in d.groups for c in g.changes if c.what == "kernel"] + \
                     [c for d in rep.deployments for c in d.changes if c.what == "kernel"]
    assert (kernel_changes == []) == same


@pytest.mark.parametrize("kv, release, ok", [("octave_k3v4", "0.32.0", False), ("ultraquant_4bit", "0.31.0", False),
                                             ("ultraquant_4bit", "0.32.0", True), ("fp8", "0.31.0", True)])
def test_cache_dtype_spellings_per_release(kv, release, ok):
    """config/cache.py CacheDType grew between releases: a spelling the release lacks is refused as it refuses it
    (a spelling it has but no FlashInfer kernel attnplan models reads is the other bad input, naming those)."""
    from attnplan.request import ModelRequest

    req = ModelRequest.build(model="llama-3.1-8b", engine=f"vllm=={release}", kv_cache_dtype=kv)
    try:
        req.line_fields()
        refused = None
    except InvalidInputError as exc:
        refused = str(exc)
    assert (refused is None or f"vLLM {release} has no" not in refused) == ok
