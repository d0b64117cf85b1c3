"""SGLang's fixes (issue 36): a command SGLang would not run well is offered SGLang's other backends as its own
``--attention-backend``, each re-resolved by SGLang's rules to the outcome it gives, only better outcomes, and
never a backend of the other model kind (backends.yaml engines.sglang.native.backends.<name>.kinds)."""

from __future__ import annotations

import pytest

from attnplan.engine_request import with_backend
from attnplan.policy import EngineSpec, default_ruleset, parse_engine, plan_for, simulated_node
from attnplan.policy.verdict import OUTCOMES
from attnplan.sglang.data import native
from attnplan.sglang.flags import SglangEngine, SglangFlags

GEMMA2 = dict(num_qo_heads=16, num_kv_heads=8, head_dim=256, dtype="bfloat16", logits_soft_cap=50.0)
MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
           dtype="bfloat16")


def _sglang(**flags) -> EngineSpec:
    return parse_engine(SglangEngine(flags=SglangFlags().with_(**flags)), default_ruleset())


def test_wrong_output_gets_sglangs_own_backends():
    a = plan_for(GEMMA2, simulated_node("B200"), engine=_sglang())
    v = a.verdict
    assert v.outcome == "wrong-output" and v.selected.decode == "trtllm_mha"
    fixes = {f.args: f for f in v.fixes}
    assert "--attention-backend flashinfer" in fixes
    # each fix is what planning the same command with that flag gives
    for args, f in fixes.items():
        name = args.split()[-1]
        spec, _ = with_backend(_sglang(), name)
        again = plan_for(GEMMA2, simulated_node("B200"), engine=spec).verdict
        assert again.outcome == f.outcome, args
        assert OUTCOMES.index(f.outcome) < OUTCOMES.index(v.outcome)


@pytest.mark.parametrize("cfg, device, flags, other", [
    (GEMMA2, "B200", {}, "mla"),
    (MLA, "H100", {"attention_backend": "trtllm_mla"}, "standard"),
])
def test_fixes_never_offer_the_other_kind(cfg, device, flags, other):
    v = plan_for(cfg, simulated_node(device), engine=_sglang(**flags)).verdict
    assert v.outcome != "runs" and v.fixes
    table = native(default_ruleset()).backends
    offered = {f.args.split()[-1] for f in v.fixes if f.args and f.args.startswith("--attention-backend")}
    assert offered and all(table[n].kinds != [other] for n in offered)
    only_other = {n for n, row in table.items() if row.kinds == [other]}
    assert only_other and not (offered & only_other)


def test_own_kernels_are_said_to_be_unmodelled():
    v = plan_for(GEMMA2, simulated_node("B200"), engine=_sglang()).verdict
    table = native(default_ruleset()).backends
    for f in v.fixes:
        name = f.args.split()[-1]
        assert ("not modelled" in f.change or "only SGLang's checks" in f.change) == (not table[name].runs_flashinfer)
