"""Property tests: random attention configs x every catalog device x random node facts.

Two independent re-checks of every answer:

* ``spec_*`` below is SPEC §3/§4/§5 written out by hand in Python (no rule data, no engine code):
  it predicts the status, the backends and the page size, and which rules may appear in a rejection.
* ``recheck_with_rule_data`` evaluates every check of ``default_ruleset()`` for the chosen
  backends at the chosen page size, with a fact context built here (not the engine's).
"""

from __future__ import annotations

from typing import Any, Optional

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from attnplan import policy
from attnplan.policy import AttentionConfig, Fact, NodeFacts, apply_suggestion, simulated_node

SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

DEVICES = policy.catalog().names()
FI_VERSIONS = ["0.6.6", "0.6.7", "0.6.7.post1", "0.6.7.post2", "0.7.2", "0.7.2.post1"]
DOMAIN = (16, 32, 64, 128)                      # every page size SPEC §3 names
TRT_FAMILY = {"trtllm-gen", "trtllm-gen-mla", "trtllm-ragged"}
MLA_BACKENDS = {"fa2-mla", "fa3-mla", "trtllm-gen-mla", "trtllm-ragged"}
HANG = {Version("0.6.7"), Version("0.6.7.post1")}
PAGE_RULES = {"page-size", "mla.page-size"}


# -- strategies --------------------------------------------------------------------------
def often(usual, *others, weight: int = 4):
    """``usual`` about ``weight`` times as likely as each of ``others``: most examples plan ok."""
    return st.sampled_from([usual] * weight * max(1, len(others)) + list(others))


@st.composite
def nodes(draw) -> NodeFacts:
    fi = draw(often(None, *FI_VERSIONS, weight=1))
    cubins = draw(often(None, "available", "missing", weight=2))
    bi = draw(often(None, False, True))
    if draw(st.integers(0, 9)):
        node = simulated_node(draw(st.sampled_from(DEVICES)), flashinfer_version=fi, cubins=cubins, batch_invariant=bi)
    else:
        cap = draw(st.sampled_from(["10.7", "11.0", "12.1", "8.7", "7.5", "none"]))
        node = simulated_node(capability=cap if cap != "none" else "10.0",
                              flashinfer_version=fi, cubins=cubins, batch_invariant=bi)
        if cap == "none":                          # a probe that found no device
            node = node.with_fact(capability=Fact.unknown("no GPU"), gpu_name=Fact.unknown("no GPU"))
    extra = draw(often("none", "dir", "wheel-mismatch", "artifactory", "artifactory-down", weight=1))
    if extra == "dir":
        node = node.with_fact(cubin_dir=Fact.declared("/opt/cubins"), cubin_dir_has_cubins=Fact.declared(True))
    elif extra == "wheel-mismatch":
        node = node.with_fact(flashinfer_cubin_version=Fact.declared("0.6.0"))
    elif extra == "artifactory":
        node = node.with_fact(artifactory_reachable=Fact.declared(True))
    elif extra == "artifactory-down":
        node = node.with_fact(artifactory_reachable=Fact.declared(False))
    return node


# Each field has usual values (most configs plan ok) and its full range; an example perturbs a few fields.
STD_FIELDS = {
    "dtype": (["bf16", "fp16"], ["bf16", "fp16", "fp32", "fp8_e4m3"]),
    "kv_cache_dtype": (["auto", "auto", "fp8"], ["auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"]),
    "page_size": ([None], [None, 8, 16, 32, 64, 128, 256]),
    "head_dim": ([64, 128, 128, 256], [64, 96, 128, 192, 256, 512]),
    "head_dim_vo": ([None], [None, 64, 128]),
    "sliding_window": ([None, 4096], [None, 4096]),
    "logits_soft_cap": ([None], [None, 30.0]),
    "sinks": ([False], [False, True]),
    "attention_backend": (["auto"], ["auto", "fa2", "fa3", "trtllm-gen", "fa2-mla"]),
    "batch_invariant": ([None], [None, False, True]),
    "num_speculative_tokens": ([0, 1, 3], [0, 1, 3]),
    "dcp_world_size": ([1, 2], [1, 2]),
    "cascade": ([False, True], [False, True]),
}
MLA_FIELDS = {
    **{k: STD_FIELDS[k] for k in ("dtype", "page_size", "batch_invariant", "num_speculative_tokens",
                                  "dcp_world_size", "cascade", "sinks")},
    "kv_cache_dtype": (["auto", "bf16"], ["auto", "fp16", "bf16", "fp8", "fp8_e5m2", "nvfp4"]),
    "kv_lora_rank": ([512], [512, 256]),
    "mla_dims": ([(128, 64, 128), (192, 64, 256)], [(128, 64, 128), (192, 64, 256), (160, 32, 128), (64, 64, 64)]),
    "attention_backend": (["auto"], ["auto", "fa2", "fa3", "trtllm-gen", "fa2-mla", "trtllm-ragged"]),
}


@st.composite
def configs(draw) -> AttentionConfig:
    is_mla = draw(st.integers(0, 3)) == 0          # MLA, a quarter of the time
    table = MLA_FIELDS if is_mla else STD_FIELDS
    names = sorted(table)
    perturbed = set(draw(st.permutations(names))[:draw(st.sampled_from([0, 0, 1, 1, 1, 2, 2, 3]))])
    f = {k: draw(st.sampled_from(table[k][1] if k in perturbed else table[k][0])) for k in names}
    if is_mla:
        f["qk_nope_head_dim"], f["qk_rope_head_dim"], f["v_head_dim"] = f.pop("mla_dims")
        f["num_qo_heads"] = draw(st.sampled_from([16, 128]))
        return AttentionConfig(**f)
    qo = draw(st.sampled_from([1, 4, 8, 12, 16, 32, 64]))
    divisors = [k for k in range(1, qo + 1) if qo % k == 0]
    kv = draw(st.sampled_from(divisors)) if draw(st.integers(0, 9)) else draw(st.integers(1, qo))
    return AttentionConfig(num_qo_heads=qo, num_kv_heads=kv, **f)


# -- SPEC, written out by hand -----------------------------------------------------------
def kv_of(cfg: AttentionConfig) -> str:
    return {"auto": cfg.dtype, "fp8": "fp8_e4m3"}.get(cfg.kv_cache_dtype, cfg.kv_cache_dtype)


def dims(cfg: AttentionConfig) -> tuple[int, int]:
    if cfg.kv_lora_rank is not None:
        return cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim
    return cfg.head_dim, cfg.head_dim_vo if cfg.head_dim_vo is not None else cfg.head_dim


def batch_invariant(cfg: AttentionConfig, node: NodeFacts) -> bool:
    return cfg.batch_invariant if cfg.batch_invariant is not None else bool(node.batch_invariant_env.value)


def cubins_ok(node: NodeFacts) -> bool:
    fi, wheel = node.flashinfer_version.value, node.flashinfer_cubin_version.value
    return (node.cubin_dir_has_cubins.value is True
            or (wheel is not None and wheel == fi)
            or node.artifactory_reachable.value is True)


def spec_pair(cfg: AttentionConfig, node: NodeFacts) -> set[str]:
    cap = node.capability.value
    out = set()
    if cap is None:
        out.add("device.cuda")
    kvh = cfg.num_kv_heads or cfg.num_qo_heads
    if cfg.num_qo_heads % kvh:
        out.add("heads.gqa")
    if kv_of(cfg) == "nvfp4" and cap not in (100, 103):
        out.add("kv.nvfp4-sm100f")
    if cfg.sinks and (cap is None or cap // 10 != 10):
        out.add("sinks")
    return out


def spec_candidate(cfg: AttentionConfig, node: NodeFacts, backend: str) -> set[str]:
    """Page-independent candidate rules of SPEC §3 for one backend."""
    cap = node.capability.value
    major = cap // 10 if cap is not None else None
    q, kv, mla = cfg.dtype, kv_of(cfg), cfg.kv_lora_rank is not None
    qk, vo = dims(cfg)
    trt = backend in TRT_FAMILY
    v = set()
    if cap is None or not 80 <= cap <= 121:
        v.add("device.capability")
    if backend == "trtllm-gen":
        if not (q in ("fp16", "bf16") or (q == "fp8_e4m3" and kv in ("fp8_e4m3", "nvfp4"))):
            v.add("dtype.query")
    elif q not in ("fp16", "bf16"):
        v.add("dtype.query")
    if not mla:
        fa2_ok = qk in (64, 128, 256) and qk == vo
        if (backend == "fa2" and not fa2_ok) or (backend == "fa3" and not (fa2_ok or (qk, vo) == (192, 128))) \
                or (backend == "trtllm-gen" and not (qk in (64, 128, 256, 512) and qk == vo)):
            v.add("head-size")
        if backend in ("fa2", "fa3") and kv not in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
            v.add("kv.dtype")
        if backend == "fa3" and kv != q:
            v.add("fa3.dtype")
    if backend in ("fa3", "fa3-mla") and major != 9:
        v.add("fa3.arch")
    if backend == "trtllm-gen" and major != 10:
        v.add("trtllm.family")
    if trt and not cubins_ok(node):
        v.add("trtllm.cubins")
    if trt and batch_invariant(cfg, node):
        v.add("trtllm.batch-invariant")
    fi = node.flashinfer_version.value
    if backend == "trtllm-gen" and cap == 103 and (fi is None or Version(fi) in HANG):
        v.add("trtllm.sm103-hang")
    if backend == "trtllm-gen" and kv not in ("fp16", "bf16", "fp8_e4m3", "nvfp4"):
        v.add("trtllm.kv-dtype")
    if trt and cfg.logits_soft_cap is not None:
        v.add("trtllm.softcap")
    if kv == "nvfp4" and backend != "trtllm-gen":
        v.add("kv.nvfp4-sm100f")
    if cfg.sinks and backend != "trtllm-gen":
        v.add("sinks")
    if (backend in MLA_BACKENDS and not mla) or (backend == "trtllm-gen" and mla):
        v.add("mla.backend")
    if backend in ("trtllm-gen-mla", "trtllm-ragged") and major != 10:
        v.add("mla.family")
    if backend in MLA_BACKENDS and not (cfg.kv_lora_rank == 512 and cfg.qk_rope_head_dim == 64):
        v.add("mla.dims")
    if (backend in ("trtllm-gen-mla", "trtllm-ragged") and kv not in ("fp16", "bf16", "fp8_e4m3")) or \
            (backend in ("fa2-mla", "fa3-mla") and kv not in ("fp16", "bf16")):
        v.add("mla.kv-dtype")
    if backend == "trtllm-ragged" and (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim) not in \
            ((128, 64, 128), (192, 64, 256)):
        v.add("mla.ragged-dims")
    if backend in ("fa2", "fa3") and mla and (qk, vo) != (192, 128):
        v.add("mla.prefill-dims")
    return v


def spec_page_ok(cfg: AttentionConfig, backend: str, page: int) -> bool:
    mla = cfg.kv_lora_rank is not None
    if backend in ("fa2", "fa3"):
        return mla or page in (16, 32, 64)            # MLA prefill is ragged (no paged K/V)
    if backend == "trtllm-gen":
        return page in (16, 32, 64, 128)
    if backend in ("trtllm-gen-mla", "trtllm-ragged"):
        return page in (32, 64)
    if backend in ("fa2-mla", "fa3-mla"):
        return page in (16, 32, 64)
    raise AssertionError(f"no page rule known for {backend}")


def spec_valid_pages(cfg: AttentionConfig, backend: str) -> set[int]:
    pages = (cfg.page_size,) if cfg.page_size is not None else DOMAIN
    return {p for p in pages if spec_page_ok(cfg, backend, p)}


FORCE_MLA = {"fa2": ("fa2", "fa2-mla"), "fa2-mla": ("fa2", "fa2-mla"), "fa3": ("fa3", "fa3-mla"),
             "fa3-mla": ("fa3", "fa3-mla"), "trtllm-gen": ("trtllm-ragged", "trtllm-gen-mla"),
             "trtllm-gen-mla": ("trtllm-ragged", "trtllm-gen-mla"), "trtllm-ragged": ("trtllm-ragged", "trtllm-gen-mla")}


def spec_candidates(cfg: AttentionConfig, node: NodeFacts, phase: str) -> list[str]:
    mla = cfg.kv_lora_rank is not None
    if cfg.attention_backend != "auto":
        if mla:
            return [FORCE_MLA[cfg.attention_backend][0 if phase == "prefill" else 1]]
        return [cfg.attention_backend]
    cap = node.capability.value
    major = cap // 10 if cap is not None else None
    if major == 10:
        return {"prefill": ["trtllm-ragged", "fa2"], "decode": ["trtllm-gen-mla", "fa2-mla"]}[phase] if mla \
            else ["trtllm-gen", "fa2"]
    if major == 9:
        return {"prefill": ["fa3", "fa2"], "decode": ["fa3-mla", "fa2-mla"] if mla else ["fa2"]}[phase]
    return ["fa2"] if phase == "prefill" else (["fa2-mla"] if mla else ["fa2"])


def spec_expect(cfg: AttentionConfig, node: NodeFacts) -> Optional[tuple[str, str, int]]:
    """(prefill, decode, page) per SPEC §4/§5, or None for a rejection."""
    if spec_pair(cfg, node):
        return None
    ok = {ph: [b for b in spec_candidates(cfg, node, ph)
               if not spec_candidate(cfg, node, b) and spec_valid_pages(cfg, b)] for ph in ("prefill", "decode")}
    for p in ok["prefill"]:
        for d in ok["decode"]:
            common = spec_valid_pages(cfg, p) & spec_valid_pages(cfg, d)
            if common:
                return p, d, cfg.page_size if cfg.page_size is not None else min(common)
    return None


# -- the rule data, re-checked with a context built here ---------------------------------
def fact_context(cfg: AttentionConfig, node: NodeFacts, phase: Optional[str], backend: Optional[str],
                 page: Optional[int]) -> dict[str, Any]:
    cap = node.capability.value
    qk, vo = dims(cfg)
    ctx: dict[str, Any] = {
        "backend": backend, "phase": phase,
        "config.head_dim": qk, "config.head_dim_vo": vo,
        "config.num_kv_heads": cfg.num_kv_heads or cfg.num_qo_heads,
        "config.kv_dtype": kv_of(cfg), "config.page_size": page,
        "config.is_mla": cfg.kv_lora_rank is not None,
        "config.batch_invariant": batch_invariant(cfg, node),
        "node.capability": cap, "node.capability_major": cap // 10 if cap is not None else None,
    }
    for f in ("num_qo_heads", "dtype", "kv_cache_dtype", "sliding_window", "logits_soft_cap", "sinks",
              "num_speculative_tokens", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
              "dcp_world_size", "cascade"):
        ctx[f"config.{f}"] = getattr(cfg, f)
    for f in ("gpu_count", "flashinfer_version", "flashinfer_cubin_version", "cubin_dir_has_cubins",
              "artifactory_reachable", "torch_version", "torch_cuda_version", "driver_version", "mig_enabled"):
        ctx[f"node.{f}"] = getattr(node, f).value
    return ctx


def recheck_with_rule_data(cfg: AttentionConfig, node: NodeFacts, prefill: str, decode: str, page: int) -> list[str]:
    failed = []
    for check in policy.default_ruleset().checks:
        if check.scope == "pair":
            targets = [(None, None)]
        else:
            targets = [(ph, b) for ph, b in (("prefill", prefill), ("decode", decode))
                       if (check.backends is None or b in check.backends)
                       and (check.phases is None or ph in check.phases)]
        for ph, b in targets:
            ctx = fact_context(cfg, node, ph, b, page)
            if check.when is not None and not check.when.test(ctx):
                continue
            if not check.require.test(ctx):
                failed.append(f"{check.rule.id}[{check.index}] {ph}/{b}")
    return failed


def test_fact_context_covers_every_fact_a_rule_may_read():
    from attnplan.policy.facts_catalog import FACTS

    ctx = fact_context(AttentionConfig(head_dim=128, num_qo_heads=8), simulated_node("B200"), "decode", "fa2", 16)
    assert set(ctx) == set(FACTS)


# -- properties --------------------------------------------------------------------------
@SETTINGS
@given(cfg=configs(), node=nodes())
def test_answer_matches_the_spec(cfg, node):
    a = policy.evaluate(cfg, node, suggest=False)
    expected = spec_expect(cfg, node)
    if expected is None:
        assert a.status == "rejected", (a.backends(), a.notes)
        assert a.plan is None and a.violations
        allowed_pair = spec_pair(cfg, node)
        for v in a.violations:
            if v.phase == "both":
                assert v.backend is None
                assert v.rule in allowed_pair | {"page-size"}, v
            else:
                assert v.rule in spec_candidate(cfg, node, v.backend) | PAGE_RULES, v
                assert v.backend in spec_candidates(cfg, node, v.phase), v
        for r in allowed_pair:
            assert any(v.rule == r and v.phase == "both" for v in a.violations), r
    else:
        assert a.status == "ok", a.violations
        assert not a.violations
        assert (a.plan.prefill.backend, a.plan.decode.backend, a.plan.kv_cache.page_size) == expected


@SETTINGS
@given(cfg=configs(), node=nodes())
def test_ok_plan_never_violates_a_rule(cfg, node):
    a = policy.evaluate(cfg, node, suggest=False)
    if a.status != "ok":
        return
    p, d, page = a.plan.prefill.backend, a.plan.decode.backend, a.plan.kv_cache.page_size
    assert recheck_with_rule_data(cfg, node, p, d, page) == []
    assert not spec_pair(cfg, node)
    assert not spec_candidate(cfg, node, p) and not spec_candidate(cfg, node, d)
    if cfg.attention_backend != "auto":                 # forced: exactly that backend, no fallback
        assert [p] == spec_candidates(cfg, node, "prefill") and [d] == spec_candidates(cfg, node, "decode")


@SETTINGS
@given(cfg=configs(), node=nodes())
def test_every_suggestion_is_verified(cfg, node):
    a = policy.evaluate(cfg, node)
    if a.ok:
        assert not a.suggestions
        return
    for s in a.suggestions:
        c2, n2 = apply_suggestion(cfg, node, s)
        if s.target == "config":
            assert n2 == node
            changed = {k for k in policy.CONFIG_FIELDS if getattr(c2, k) != getattr(cfg, k)}
            assert changed == {s.field}, (s, changed)
        else:
            assert c2 == cfg
        again = policy.evaluate(c2, n2, suggest=False)
        assert again.ok, (s, again.violations)
        assert again.backends() == (s.prefill, s.decode), s
        exp = spec_expect(c2, n2)
        assert exp is not None and exp[:2] == (s.prefill, s.decode), (s, exp)


@SETTINGS
@given(cfg=configs(), node=nodes())
def test_config_suggestions_are_complete(cfg, node):
    """Every single-field config change SPEC §4 names that the SPEC says works is offered."""
    a = policy.evaluate(cfg, node)
    if a.ok:
        return
    offered = {(s.field, s.value) for s in a.suggestions}
    offered_kv = {kv_of(cfg.replace(kv_cache_dtype=v)) for f, v in offered if f == "kv_cache_dtype"}
    for kv in policy.KV_CACHE_DTYPES:
        trial = cfg.replace(kv_cache_dtype=kv)
        if kv_of(trial) != kv_of(cfg) and spec_expect(trial, node) is not None:
            assert kv_of(trial) in offered_kv, (kv, a.suggestions)
    for page in DOMAIN:
        if page != cfg.page_size and spec_expect(cfg.replace(page_size=page), node) is not None:
            assert ("page_size", page) in offered, (page, a.suggestions)
    if batch_invariant(cfg, node) and spec_expect(cfg.replace(batch_invariant=False), node) is not None:
        assert ("batch_invariant", False) in offered
    if cfg.attention_backend != "auto" and spec_expect(cfg.replace(attention_backend="auto"), node) is not None:
        assert ("attention_backend", "auto") in offered


@SETTINGS
@given(cfg=configs(), node=nodes())
def test_evaluation_is_deterministic_and_memo_equals_fresh(cfg, node):
    first = policy.evaluate(cfg, node)
    second = policy.evaluate(cfg, node)
    assert first == second
    assert first.to_json() == second.to_json()
    memo = policy.plan_for(cfg, node)
    assert policy.plan_for(cfg, node) == memo
    assert memo == first
    # an equal node built separately hits the same answer
    clone = NodeFacts.model_validate(node.model_dump())
    assert policy.plan_for(cfg, clone) == first


@SETTINGS
@given(cfg=configs(), node=nodes())
def test_layout_and_page_size(cfg, node):
    a = policy.evaluate(cfg, node, suggest=False, trace=False)
    if not a.ok:
        return
    plan = a.plan
    p, d = plan.prefill.backend, plan.decode.backend
    any_trt = p in TRT_FAMILY or d in TRT_FAMILY
    assert plan.kv_cache.layout == ("HND" if any_trt else "NHD")
    page = plan.kv_cache.page_size
    assert spec_page_ok(cfg, p, page) and spec_page_ok(cfg, d, page)
    if cfg.page_size is None:
        assert page == min(x for x in DOMAIN if spec_page_ok(cfg, p, x) and spec_page_ok(cfg, d, x))
        assert any("page_size" in n for n in a.notes)
    else:
        assert page == cfg.page_size
    for ph in (plan.prefill, plan.decode):
        for m in ph.modules:
            assert m.params["page_size"] == page
            assert m.kind == ("cubin" if ph.backend in TRT_FAMILY else "jit")
    # SPEC §5 views: fp8 is float8 (never nvfp4); only nvfp4 quantizes the query
    kv = kv_of(cfg)
    view = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}.get(kv)
    if view:
        assert plan.kv_cache.storage_dtype == "uint8" and plan.kv_cache.view_dtype == view
    if kv != "nvfp4":
        assert plan.kv_cache.nvfp4_scale_dtype is None
    # SPEC §5 metadata formulas
    dcp = cfg.dcp_world_size > 1
    for kind, has_p, has_d in (("prefill_only", True, False), ("decode_only", False, True), ("mixed", True, True)):
        m = getattr(plan.metadata, kind)
        all_trt = (not has_p or p in TRT_FAMILY) and (not has_d or d in TRT_FAMILY)
        assert m.all_uses_trtllm == all_trt
        assert m.needs_host_seq_lens == (dcp or cfg.cascade or not all_trt)
        assert m.needs_paged_kv_indices == (cfg.cascade or not all_trt)
    # SPEC §5: use_tensor_cores for native (non-MLA) decode with group size >= 4
    if d in ("fa2",) and cfg.kv_lora_rank is None:
        group = cfg.num_qo_heads // (cfg.num_kv_heads or cfg.num_qo_heads)
        assert plan.decode.use_tensor_cores == (group >= 4)
    assert plan.decode.q_len_per_req == 1 + cfg.num_speculative_tokens
