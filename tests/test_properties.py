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
from attnplan.render import finish

SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

DEVICES = policy.catalog().names()
FI_VERSIONS = ["0.6.6", "0.6.7", "0.6.7.post1", "0.6.7.post2", "0.7.2", "0.7.2.post1"]
DOMAIN = (16, 32, 64, 128, 256, 512, 1024)      # every page size a rule names
ENGINES = [None, "flashinfer"]                  # None: vllm (0.33.0, the newest modelled)
TRT_FAMILY = {"trtllm-gen", "trtllm-gen-mla", "trtllm-ragged"}
MLA_BACKENDS = {"fa2-mla", "fa3-mla", "trtllm-gen-mla", "trtllm-ragged"}
HANG = {Version("0.6.7"), Version("0.6.7.post1")}
# rules judged per page: the page sizes, and the kernel table (trtllm-gen has kernels per page size)
PAGE_RULES = {"page-size", "mla.page-size", "vllm.page-size", "trtllm.kernel-missing"}
API = TRT_FAMILY | {"xqa"}                      # called through FlashInfer's trtllm API (block tables)


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
    tool = draw(often("ok", "no-jit", "old-cuda", "no-cubin-wheel", weight=2))
    if tool == "no-jit":
        node = node.with_fact(jit_toolchain=Fact.declared(False))
    elif tool == "old-cuda":
        node = node.with_fact(torch_cuda_version=Fact.declared("12.1"))
    elif tool == "no-cubin-wheel":
        node = node.with_fact(flashinfer_cubin_version=Fact.declared(None))
    return node


# Each field has usual values (most configs plan ok) and its full range; an example perturbs a few fields.
STD_FIELDS = {
    "dtype": (["bf16", "fp16"], ["bf16", "fp16", "fp32", "fp8_e4m3"]),
    "kv_cache_dtype": (["auto", "auto", "fp8"], ["auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"]),
    "page_size": ([None], [None, 1, 8, 16, 32, 64, 128, 256]),
    "head_dim": ([64, 128, 128, 256], [64, 80, 96, 128, 160, 192, 256, 512]),
    "head_dim_vo": ([None], [None, 64, 128]),
    "sliding_window": ([None, 4096], [None, 4096]),
    "logits_soft_cap": ([None], [None, 30.0]),
    "sinks": ([False], [False, True]),
    "attention_backend": (["auto"], ["auto", "fa2", "fa3", "trtllm-gen", "xqa", "fa2-mla"]),
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
    "num_qo_heads": ([16, 128], [16, 96, 128]),
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
        return AttentionConfig(**f)
    qo = draw(st.sampled_from([1, 4, 8, 12, 16, 32, 64]))
    divisors = [k for k in range(1, qo + 1) if qo % k == 0]
    kv = draw(st.sampled_from(divisors)) if draw(st.integers(0, 9)) else draw(st.integers(1, qo))
    return AttentionConfig(num_qo_heads=qo, num_kv_heads=kv, **f)


# -- SPEC, written out by hand (both layers: FlashInfer 0.7.2 kernels, vLLM 0.33 engine) -----
def kv_of(cfg: AttentionConfig) -> str:
    return {"auto": cfg.dtype, "fp8": "fp8_e4m3"}.get(cfg.kv_cache_dtype, cfg.kv_cache_dtype)


def dims(cfg: AttentionConfig) -> tuple[int, int]:
    if cfg.kv_lora_rank is not None:
        return cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim
    return cfg.head_dim, cfg.head_dim_vo if cfg.head_dim_vo is not None else cfg.head_dim


def group(cfg: AttentionConfig) -> Optional[int]:
    kvh = cfg.num_kv_heads or cfg.num_qo_heads
    return cfg.num_qo_heads // kvh if cfg.num_qo_heads % kvh == 0 else None


def batch_invariant(cfg: AttentionConfig, node: NodeFacts) -> bool:
    return cfg.batch_invariant if cfg.batch_invariant is not None else bool(node.batch_invariant_env.value)


def cubins_ok(node: NodeFacts) -> bool:
    fi, wheel = node.flashinfer_version.value, node.flashinfer_cubin_version.value
    return (node.cubin_dir_has_cubins.value is True
            or (wheel is not None and wheel == fi)
            or node.artifactory_reachable.value is True)


def vllm_gate(node: NodeFacts) -> bool:
    """vLLM's has_nvidia_artifactory: flashinfer-cubin importable, or the artifactory answering 200."""
    return node.flashinfer_cubin_version.value is not None or node.artifactory_reachable.value is True


def major_of(node: NodeFacts) -> Optional[int]:
    cap = node.capability.value
    return cap // 10 if cap is not None else None


def spec_query(cfg: AttentionConfig, node: NodeFacts, phase: Optional[str], backend: Optional[str], engine: str) -> str:
    """The phase's query dtype (issue 21): vLLM 0.33's FlashInferMetadataBuilder.get_q_data_type; the
    flashinfer layer keeps the model dtype (fp8_e4m3 for trtllm-gen over nvfp4)."""
    cap, major, kv = node.capability.value, major_of(node), kv_of(cfg)
    if engine == "vllm":
        # MLA decode over an fp8 cache: mla_attention.py forward_impl quantizes the MQA query to fp8
        # (MLACommonImpl.supports_quant_query_input, which FlashInferMLAImpl keeps).
        if cfg.kv_lora_rank is not None and kv == "fp8_e4m3" and phase == "decode":
            return kv
        if cfg.kv_lora_rank is None and kv in ("fp8_e4m3", "fp8_e5m2"):
            if phase == "decode" and (cap == 90 or major == 12):
                return cfg.dtype
            if cap == 90 or major == 10:
                return kv
        if kv == "nvfp4" and major == 10:
            return "fp8_e4m3"
        return cfg.dtype
    return "fp8_e4m3" if kv == "nvfp4" and backend == "trtllm-gen" else cfg.dtype


def spec_pair(cfg: AttentionConfig, node: NodeFacts, engine: str) -> set[str]:
    cap, major = node.capability.value, major_of(node)
    out = set()
    if cap is None:
        out.add("device.cuda")
    kvh = cfg.num_kv_heads or cfg.num_qo_heads
    if cfg.num_qo_heads % kvh:
        out.add("heads.gqa")
    if engine == "vllm":
        qk, _ = dims(cfg)
        if batch_invariant(cfg, node):
            out.add("vllm.batch-invariant")
        if kv_of(cfg) == "nvfp4" and not ((major in (8, 9, 12) and qk != 64 and not cfg.sinks and cfg.dcp_world_size == 1)
                                          or major == 10):
            out.add("vllm.nvfp4")
        if cfg.sinks and not (cap == 90 or major in (10, 12)):
            out.add("vllm.sinks")
        if cfg.sinks and cfg.dcp_world_size > 1:
            out.add("vllm.dcp-sinks")    # vLLM's DCP prefill wrapper takes no sinks (issue 42's oracle)
        # vLLM's XQA / trtllm-gen paths pass no soft cap (issue 21)
        if cfg.logits_soft_cap is not None and not batch_invariant(cfg, node) and vllm_gate(node):
            if major == 10 or ((cap == 90 or major == 12) and 16 <= qk <= 256 and qk % 16 == 0
                               and cfg.dcp_world_size == 1 and not (kv_of(cfg) == "nvfp4" and cap == 90)):
                out.add("vllm.softcap-dropped")
        mla = cfg.kv_lora_rank is not None
        if (cfg.attention_backend == "flashinfer" and mla) or (cfg.attention_backend == "flashinfer-mla" and not mla):
            out.add("vllm.backend-kind")
        if mla and (major != 10 or cfg.qk_nope_head_dim not in (64, 128, 192)):
            out.add("vllm.mla-backend")
        # vLLM 0.33's MLA prefill backends cover four layouts (get_mla_prefill_backend_cls)
        if mla and (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim) not in \
                ((128, 64, 128), (192, 64, 256), (64, 64, 128), (256, 0, 256)):
            out.add("vllm.mla-prefill-dims")
    return out


def spec_candidate(cfg: AttentionConfig, node: NodeFacts, backend: str, phase: str, engine: str) -> set[str]:
    """Page-independent candidate rules for one backend in one phase."""
    cap, major = node.capability.value, major_of(node)
    q, kv, mla = spec_query(cfg, node, phase, backend, engine), kv_of(cfg), cfg.kv_lora_rank is not None
    qk, vo = dims(cfg)
    g = group(cfg)
    trt = backend in TRT_FAMILY
    bi = batch_invariant(cfg, node)
    v = set()
    if cap is None or not 80 <= cap <= 121:
        v.add("device.capability")
    if backend == "trtllm-gen":
        if not (q in ("fp16", "bf16") or (q == "fp8_e4m3" and kv in ("fp8_e4m3", "nvfp4"))):
            v.add("dtype.query")
    elif backend in ("trtllm-gen-mla", "trtllm-ragged"):   # fp8_e4m3 over fp8_e4m3 (SGLang's trtllm_mla, vLLM's decode)
        if not (q in ("fp16", "bf16") or (q == "fp8_e4m3" and kv == "fp8_e4m3")):
            v.add("dtype.query")
    elif backend == "fa3":   # an fp8 query over a cache of the same fp8 type (e5m2 measured: issue 39)
        if not (q in ("fp16", "bf16") or (q in ("fp8_e4m3", "fp8_e5m2") and kv == q and qk == vo)):
            v.add("dtype.query")
    elif q not in ("fp16", "bf16"):
        v.add("dtype.query")
    if not mla:
        if (backend == "fa2" and not (qk in (64, 128, 256, 512) and qk == vo)) \
                or (backend == "fa3" and not (qk in (64, 128, 256) and qk == vo)) \
                or (backend == "trtllm-gen" and not (qk in (64, 128, 256, 512) and qk == vo)):
            v.add("head-size")
        if backend == "fa2" and kv not in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "nvfp4"):
            v.add("kv.dtype")
        if backend == "fa3" and kv not in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
            v.add("kv.dtype")
    fi = node.flashinfer_version.value
    if backend == "fa2" and kv in ("fp8_e4m3", "fp8_e5m2") and major is not None and major <= 9 \
            and (qk > 256 or vo > 256) and fi is not None and Version("0.6.18") <= Version(str(fi)) < Version("0.7.1"):
        v.add("fa2.fp8-large-head")     # before 0.7.1 such fa2 modules build for 10.x+ only (issue 42)
    if backend == "fa3" and kv != q:                       # MLA prefill too (issue 22, H100 sweep)
        v.add("fa3.dtype")
    if backend == "fa3" and q in ("fp8_e4m3", "fp8_e5m2") and cfg.logits_soft_cap is not None:
        v.add("fa3.fp8-softcap")                           # its fp8 variant has no cap (issue 22, H100 sweep)
    if backend == "xqa":
        if not (qk == vo and qk % 16 == 0 and (16 <= qk <= 256 or (qk == 512 and cfg.num_speculative_tokens == 0
                                                                      and g is not None and g <= 16
                                                                      and (fi is None or Version(str(fi)) >= Version("0.6.18"))))):
            v.add("head-size")
        if major == 9 and kv in ("fp16", "bf16") and qk in (144, 160, 176):
            v.add("head-size")          # the H100 sweep, third session: 16-bit XQA does not build these
        if not (kv in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2") or (kv == "nvfp4" and major == 12)):
            v.add("kv.dtype")
        if kv == "fp8_e5m2":
            v.add("xqa.e5m2")            # builds, runs, reads it as 16-bit: wrong (measured, issue 39)
        spec = cfg.num_speculative_tokens
        # sinks + fp8 computed wrong at q_len 3 groups 11-15, q_len 4 groups 9-16 (measured, issue 38 tier 3);
        # q_len 5+ unmeasured: refused from group 9
        if cfg.sinks and kv == "fp8_e4m3" and g is not None and \
                ((spec == 2 and 11 <= g <= 15) or (spec == 3 and 9 <= g <= 16) or (spec >= 4 and g >= 9)):
            v.add("xqa.spec-sinks")
        # sinks + a 16-bit cache: wrong where q_len x group > 32 unless the group is 16 or 32 (tier 5 whole,
        # bf16 and fp16); q_len 5+ past group 8 unmeasured
        if cfg.sinks and kv in ("fp16", "bf16") and g is not None and \
                ((spec == 1 and 17 <= g <= 31) or (spec in (2, 3) and (spec + 1) * g > 32 and g not in (16, 32))
                 or (spec >= 4 and g >= 9)):
            v.add("xqa.spec-sinks")
        if major not in (9, 10, 12):
            v.add("xqa.arch")
        if cfg.dcp_world_size != 1 or cfg.cascade:
            v.add("xqa.no-lse")
    if (backend == "xqa" or (backend == "fa2" and qk == 512) or trt) and node.jit_toolchain.value is not True:
        v.add("jit.toolchain")                              # trtllm-gen: its launcher is JIT-built (issue 22)
    # issue 22 (H100 sweep and FlashInfer source): a 16-bit cache is in the query dtype; fa2's CUDA-core
    # decode cannot read nvfp4 off Blackwell; XQA's GQA-group ceilings; MLA has no window, native MLA
    # decode no soft cap, trtllm-gen MLA writes bf16, MLA ragged prefill reads 16-bit K/V; the sink
    # wrapper runs head <= 256 with qk == vo, and 16-bit queries on fa3.
    if backend in ("fa2", "fa3", "fa2-mla", "fa3-mla", "xqa") and kv in ("fp16", "bf16") and kv != q:
        v.add("kv.query-dtype")
    # vLLM always decodes on tensor cores (use_tensor_cores=True), which read nvfp4 at every group (measured,
    # issue 39); attnplan's own plan (the flashinfer layer) uses CUDA cores below group 4
    if backend == "fa2" and phase == "decode" and kv == "nvfp4" and major is not None and major <= 9 \
            and (g is None or g < 4) and engine != "vllm":
        v.add("kv.nvfp4-decode")
    # the H100 sweep, second session: fa2 prefill over nvfp4 at head 64 computed wrong on 9.x, and the
    # sink wrapper's attention variant has no logits transform (a soft cap would be dropped)
    if backend == "fa2" and phase == "prefill" and kv == "nvfp4" and major is not None and major <= 9 \
            and not mla and qk == 64:
        v.add("kv.nvfp4-prefill")
    # issue 38's sample (H100): the same kernel in decode (tensor cores, speculative) is wrong past 64 packed
    # query rows per KV head (its 128-row tile); with draft tokens a CUDA graph packs rows by batch size
    if backend == "fa2" and phase == "decode" and kv == "nvfp4" and major is not None and major <= 9 \
            and not mla and qk == 64 and (cfg.num_speculative_tokens > 0 or g is None or g > 64):
        v.add("kv.nvfp4-head64-wide-tile")
    if backend in ("fa2", "fa3") and cfg.sinks and not mla and cfg.logits_soft_cap is not None:
        v.add("sinks.softcap")
    if backend == "xqa" and g is None:
        v.add("xqa.group")   # an unknown group (heads not divisible) never satisfies "at most 64": fail closed
    if backend == "xqa" and g is not None:
        bad = g > 64
        if major == 9 and kv in ("fp16", "bf16"):
            bad = bad or not (g <= 16 or 25 <= g <= 32 or 57 <= g <= 64)
        if major == 9 and kv == "fp8_e4m3":
            bad = bad or not (g <= 16 or g == 32)
        if major == 9 and cfg.num_speculative_tokens >= 1 and qk > 128:
            bad = True
        if major == 9 and kv in ("fp16", "bf16") and g >= 57 and qk > 128:
            bad = True                  # 16-bit groups 57-64 build up to head 128 (H100 sweep)
        if major == 12 and qk == 128 and g > 32:
            bad = True
        if bad:
            v.add("xqa.group")
    if backend == "xqa" and major == 9 and kv in ("fp16", "bf16") and cfg.num_speculative_tokens >= 1 \
            and (g is None or g > 32):  # an unknown group fails closed, as in xqa.group
        v.add("xqa.spec-group")         # 16-bit speculative decode at group 64 computed wrong (H100 sweep)
    if cfg.sliding_window is not None and (backend in MLA_BACKENDS or (mla and backend in ("fa2", "fa3"))):
        v.add("mla.window")
    if backend in ("fa2-mla", "fa3-mla") and cfg.logits_soft_cap is not None:
        v.add("mla.softcap")
    if backend == "trtllm-gen-mla" and cfg.dtype != "bf16":      # the model dtype (the output), not the query
        v.add("mla.trtllm-dtype")
    if backend in ("fa3", "fa3-mla"):
        if major != 9:
            v.add("fa3.arch")
        tc = node.torch_cuda_version.value
        if tc is None or Version(str(tc)) < Version("12.3"):
            v.add("fa3.toolchain")
    if trt and cap not in (100, 103, 107):
        v.add("trtllm.family")
    if trt and not cubins_ok(node):
        v.add("trtllm.cubins")
    if (trt or backend in ("xqa", "fa3", "fa3-mla")) and bi:
        v.add("trtllm.batch-invariant")
    fi = node.flashinfer_version.value
    if backend == "trtllm-gen" and cap == 103 and (fi is None or Version(fi) in HANG):
        v.add("trtllm.sm103-hang")
    if backend == "trtllm-gen" and kv not in ("fp16", "bf16", "fp8_e4m3", "nvfp4"):
        v.add("trtllm.kv-dtype")
    if (trt or backend == "xqa") and cfg.logits_soft_cap is not None:
        v.add("trtllm.softcap")
    # fa2 reads nvfp4 at head 64 too (measured on the H100 by attnplan verify); vLLM's refusal of it
    # is the engine rule vllm.nvfp4
    if kv == "nvfp4" and backend == "trtllm-gen" and cap not in (100, 103):
        v.add("kv.nvfp4-sm100f")
    # MLA ragged prefill on fa2/fa3 has no sinks (found dangerous by attnplan verify on the H100)
    if cfg.sinks and (backend in MLA_BACKENDS or (backend in ("fa2", "fa3") and kv == "nvfp4")
                      or (backend in ("fa2", "fa3") and mla and phase == "prefill")
                      or (backend in ("fa2", "fa3") and not mla and not (qk <= 256 and qk == vo))
                      or (backend == "fa3" and q not in ("fp16", "bf16"))):
        v.add("sinks")
    if (backend in MLA_BACKENDS and not mla) or (backend in ("trtllm-gen", "xqa") and mla):
        v.add("mla.backend")
    if backend in ("trtllm-gen-mla", "trtllm-ragged") and major != 10:
        v.add("mla.family")
    if backend == "trtllm-gen-mla" and 64 < cfg.num_qo_heads < 128:
        v.add("mla.heads")
    latent = (cfg.kv_lora_rank, cfg.qk_rope_head_dim)
    # native MLA decode: kv_lora_rank 256 or 512 with rope 64 (256 measured on the H100 by attnplan verify)
    if (backend == "trtllm-ragged" and latent != (512, 64)) or \
            (backend in ("fa2-mla", "fa3-mla") and latent not in ((512, 64), (256, 64), (128, 64))) or \
            (backend == "trtllm-gen-mla" and latent not in ((512, 64), (256, 64), (512, 0))):
        v.add("mla.dims")
    if (backend in ("trtllm-gen-mla", "trtllm-ragged") and kv not in ("fp16", "bf16", "fp8_e4m3")) or \
            (backend in ("fa2-mla", "fa3-mla") and kv not in ("fp16", "bf16")) or \
            (backend in ("fa2", "fa3") and mla and phase == "prefill" and kv not in ("fp16", "bf16")):
        v.add("mla.kv-dtype")
    if backend == "trtllm-ragged" and (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim) not in \
            ((128, 64, 128), (192, 64, 256), (64, 64, 128)):
        v.add("mla.ragged-dims")
    if (backend == "fa2" and mla and (qk, vo) not in ((192, 128), (128, 128), (256, 128))) or \
            (backend == "fa3" and mla and (qk, vo) not in ((192, 128), (128, 128))):
        v.add("mla.prefill-dims")
    if engine == "vllm":
        if backend in ("fa2", "fa3", "trtllm-gen", "xqa") and not mla and qk not in (64, 128, 256, 512):
            v.add("vllm.head-size")
        if (trt or backend == "xqa") and not vllm_gate(node):
            v.add("vllm.trtllm-gate")
        if backend == "xqa" and not ((cap == 90 or major == 12) and 16 <= qk <= 256 and cfg.dcp_world_size == 1
                                     and not (kv == "nvfp4" and major in (8, 9))):
            v.add("vllm.xqa")
        if kv == "nvfp4" and major == 10 and backend != "trtllm-gen":
            v.add("vllm.nvfp4")
        if cfg.sinks and ((phase == "decode" and backend not in ("xqa", "trtllm-gen"))
                          or (phase == "prefill" and major == 10 and backend != "trtllm-gen")):
            v.add("vllm.sinks")
        if phase == "prefill" and backend == "trtllm-gen" and cfg.dcp_world_size > 1 and not (
                cfg.kv_cache_dtype in ("auto", "fp16", "bf16") and cfg.sliding_window is None and cfg.logits_soft_cap is None):
            v.add("vllm.dcp-prefill")
    return v


def spec_page_ok(cfg: AttentionConfig, node: NodeFacts, backend: str, phase: str, page: int, engine: str) -> bool:
    mla = cfg.kv_lora_rank is not None
    g, major = group(cfg), major_of(node)
    ok = True
    if backend == "xqa":
        ok = page in (16, 32, 64, 128)
    elif backend == "trtllm-gen":
        ok = page in (16, 32, 64, 128) or (page in (256, 512, 1024) and g is not None and g >= 2)
    elif backend in ("trtllm-gen-mla", "trtllm-ragged"):
        ok = page in (32, 64)
    elif backend not in ("fa2", "fa3", "fa2-mla", "fa3-mla"):  # the native kernels take any page size
        raise AssertionError(f"no page rule known for {backend}")
    if engine == "vllm" and backend in ("fa2", "fa3", "trtllm-gen", "xqa") and not mla:
        big = (page in (128, 256, 512, 1024) and major == 10 and g is not None and g >= 2
               and not batch_invariant(cfg, node) and vllm_gate(node))
        ok = ok and (page in (16, 32, 64) or big)
        if phase == "decode":
            ok = ok and (page in (16, 32, 64) or backend == "trtllm-gen")
    return ok


def spec_pages(cfg: AttentionConfig, engine: str) -> tuple[int, ...]:
    """The kernel pages tried: vLLM's --block-size runs on the largest kernel page dividing it (issue 21)."""
    if cfg.page_size is None:
        return DOMAIN
    if engine == "vllm":
        return tuple(p for p in sorted(set(DOMAIN) | {cfg.page_size}) if cfg.page_size % p == 0)
    return (cfg.page_size,)


def spec_valid_pages(cfg: AttentionConfig, node: NodeFacts, backend: str, phase: str, engine: str) -> set[int]:
    pages = spec_pages(cfg, engine)
    return {p for p in pages if spec_page_ok(cfg, node, backend, phase, p, engine) and
            spec_kernel_ok(cfg, node, backend, phase, p, engine)}


def spec_kernel_ok(cfg: AttentionConfig, node: NodeFacts, backend: str, phase: str, page: int, engine: str) -> bool:
    """trtllm.kernel-missing: the kernel table is the spec here (attnplan/kernels/trtllm_gen holds FlashInfer's
    selection over it, and the oracle holds that port to FlashInfer's own code compiled with g++)."""
    if backend not in TRT_FAMILY:
        return True
    from attnplan.policy.candidates import trtllm_decision

    d = trtllm_decision(fact_context(cfg, node, phase, backend, page, engine), phase, backend)
    return d is None or d.ok


FORCE_MLA = {"fa2": ("fa2", "fa2-mla"), "fa2-mla": ("fa2", "fa2-mla"), "fa3": ("fa3", "fa3-mla"),
             "fa3-mla": ("fa3", "fa3-mla"), "trtllm-gen": ("trtllm-ragged", "trtllm-gen-mla"),
             "trtllm-gen-mla": ("trtllm-ragged", "trtllm-gen-mla"), "trtllm-ragged": ("trtllm-ragged", "trtllm-gen-mla"),
             "xqa": ("fa2", "xqa")}


def spec_candidates(cfg: AttentionConfig, node: NodeFacts, phase: str, engine: str) -> list[str]:
    mla = cfg.kv_lora_rank is not None
    if cfg.attention_backend not in ("auto", "flashinfer", "flashinfer-mla"):
        if mla:
            return [FORCE_MLA[cfg.attention_backend][0 if phase == "prefill" else 1]]
        if cfg.attention_backend == "xqa":
            return ["fa2" if phase == "prefill" else "xqa"]
        return [cfg.attention_backend]
    major = major_of(node)
    if mla:
        if major == 10:   # vLLM's FLASHINFER_MLA decodes with trtllm-gen only
            return {"prefill": ["trtllm-ragged", "fa2"],
                    "decode": ["trtllm-gen-mla"] if engine == "vllm" else ["trtllm-gen-mla", "fa2-mla"]}[phase]
        if major == 9:
            return {"prefill": ["fa3", "fa2"], "decode": ["fa3-mla", "fa2-mla"]}[phase]
        return ["fa2"] if phase == "prefill" else ["fa2-mla"]
    if major == 10:
        return ["trtllm-gen", "fa2"]
    if phase == "prefill":
        return ["fa3", "fa2"] if major == 9 else ["fa2"]
    if major in (9, 12):
        if engine != "vllm":
            return ["fa2", "xqa"]
        # vLLM's decode kernel is its own static choice: XQA unless one of its own (vllm.*) rules says no;
        # a kernel rule refusing that XQA rejects the config, vLLM never falls back to fa2 for it.
        own = {r for r in spec_candidate(cfg, node, "xqa", "decode", engine) if r.startswith("vllm.")}
        return ["xqa", "fa2"] if own else ["xqa"]
    return ["fa2"]


def spec_expect(cfg: AttentionConfig, node: NodeFacts, engine: str) -> Optional[tuple[str, str, int]]:
    """(prefill, decode, page) per SPEC §4/§5/§10, or None for a rejection."""
    if spec_pair(cfg, node, engine):
        return None
    ok = {ph: [b for b in spec_candidates(cfg, node, ph, engine)
               if not spec_candidate(cfg, node, b, ph, engine) and spec_valid_pages(cfg, node, b, ph, engine)]
          for ph in ("prefill", "decode")}
    for p in ok["prefill"]:
        for d in ok["decode"]:
            common = spec_valid_pages(cfg, node, p, "prefill", engine) & spec_valid_pages(cfg, node, d, "decode", engine)
            if common:
                if cfg.page_size is None:
                    return p, d, min(common)
                return p, d, max(common) if engine == "vllm" else cfg.page_size
    return None


# -- the rule data, re-checked with a context built here ---------------------------------
def fact_context(cfg: AttentionConfig, node: NodeFacts, phase: Optional[str], backend: Optional[str],
                 page: Optional[int], engine: str = "vllm") -> dict[str, Any]:
    cap = node.capability.value
    qk, vo = dims(cfg)
    ctx: dict[str, Any] = {
        "backend": backend, "phase": phase,
        "config.head_dim": qk, "config.head_dim_vo": vo,
        "config.num_kv_heads": cfg.num_kv_heads or cfg.num_qo_heads,
        "config.group_size": group(cfg),
        "config.kv_dtype": kv_of(cfg), "config.page_size": page,
        "config.is_mla": cfg.kv_lora_rank is not None,
        "config.batch_invariant": batch_invariant(cfg, node),
        "node.capability": cap, "node.capability_major": cap // 10 if cap is not None else None,
        "config.attention_backend": cfg.attention_backend,
        "phase.query_dtype": spec_query(cfg, node, phase, backend, engine) if phase is not None else None,
    }
    for f in ("num_qo_heads", "dtype", "kv_cache_dtype", "sliding_window", "logits_soft_cap", "sinks",
              "num_speculative_tokens", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
              "dcp_world_size", "cascade"):
        ctx[f"config.{f}"] = getattr(cfg, f)
    for f in ("gpu_count", "flashinfer_version", "flashinfer_cubin_version", "cubin_dir_has_cubins",
              "artifactory_reachable", "torch_version", "torch_cuda_version", "driver_version", "mig_enabled",
              "jit_toolchain", "vllm_version", "sglang_version", "flashinfer_jit_cache_version", "flashinfer_import_error",
              "trtllm_kernel_table"):
        ctx[f"node.{f}"] = getattr(node, f).value
    # vLLM's --attention-config (issue 36): use_trtllm_attention false, disable_flashinfer_q_quantization
    ctx["config.trtllm_off"] = cfg.use_trtllm_attention is False
    ctx["config.disable_q_quantization"] = cfg.disable_flashinfer_q_quantization
    # the spec: trtllm-gen writes fp8 over an nvfp4 cache (every NVFP4 kernel of the table), else the model dtype
    ctx["phase.output_dtype"] = ("fp8_e4m3" if backend == "trtllm-gen" and kv_of(cfg) == "nvfp4" else cfg.dtype) \
        if phase is not None else None
    ctx["kernel.trtllm_gen"] = ctx["kernel.trtllm_gen_missing"] = ctx["kernel.trtllm_gen_decided_by"] = None
    # the engine's use_tensor_cores for decode (vLLM 0.33: always; the flashinfer layer has no such choice)
    ctx["phase.decode_tensor_cores"] = (True if engine == "vllm" else None) if phase == "decode" else None
    return ctx


def recheck_with_rule_data(cfg: AttentionConfig, node: NodeFacts, prefill: str, decode: str, page: int,
                           engine: Optional[str]) -> list[str]:
    failed = []
    rs = policy.default_ruleset()
    fi = node.flashinfer_version.value
    name, version = ("flashinfer", None) if engine == "flashinfer" else ("vllm", "0.33.0")
    for check in (c for r in rs.rules if r.applies(name, version, fi) for c in r.checks):
        if check.scope == "pair":
            targets = [(None, None)]
        else:
            targets = [(ph, b) for ph, b in (("prefill", prefill), ("decode", decode))
                       if (check.backends is None or b in check.backends)
                       and (check.phases is None or ph in check.phases)]
        for ph, b in targets:
            ctx = fact_context(cfg, node, ph, b, page, name)
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
def eng(engine: Optional[str]) -> str:
    return engine or "vllm"


@SETTINGS
@given(cfg=configs(), node=nodes(), engine=st.sampled_from(ENGINES))
def test_answer_matches_the_spec(cfg, node, engine):
    a = policy.evaluate(cfg, node, engine=engine)
    assert a.engine.name == eng(engine)
    e = eng(engine)
    expected = spec_expect(cfg, node, e)
    if expected is None:
        assert a.status == "rejected", (a.backends(), a.notes)
        assert a.plan is None and a.violations
        allowed_pair = spec_pair(cfg, node, e)
        for v in a.violations:
            assert v.layer == ("engine" if v.rule.startswith("vllm.") else "kernel"), v
            if v.phase == "both":
                assert v.backend is None
                assert v.rule in allowed_pair | {"page-size"}, v
            else:
                assert v.rule in spec_candidate(cfg, node, v.backend, v.phase, e) | PAGE_RULES, v
                assert v.backend in spec_candidates(cfg, node, v.phase, e), v
        for r in allowed_pair:
            assert any(v.rule == r and v.phase == "both" for v in a.violations), r
    else:
        assert a.status == "ok", a.violations
        assert not a.violations
        assert (a.plan.prefill.backend, a.plan.decode.backend, a.plan.kv_cache.page_size) == expected


@SETTINGS
@given(cfg=configs(), node=nodes(), engine=st.sampled_from(ENGINES))
def test_ok_plan_never_violates_a_rule(cfg, node, engine):
    a = policy.evaluate(cfg, node, engine=engine)
    if a.status != "ok":
        return
    e = eng(engine)
    p, d, page = a.plan.prefill.backend, a.plan.decode.backend, a.plan.kv_cache.page_size
    assert recheck_with_rule_data(cfg, node, p, d, page, engine) == []
    assert not spec_pair(cfg, node, e)
    assert not spec_candidate(cfg, node, p, "prefill", e) and not spec_candidate(cfg, node, d, "decode", e)
    if cfg.attention_backend != "auto":                 # forced: exactly that backend, no fallback
        assert [p] == spec_candidates(cfg, node, "prefill", e) and [d] == spec_candidates(cfg, node, "decode", e)


@SETTINGS
@given(cfg=configs(), node=nodes(), engine=st.sampled_from(ENGINES))
def test_every_suggestion_is_verified(cfg, node, engine):
    a = policy.plan_for(cfg, node, engine=engine)
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
        again = policy.evaluate(c2, n2, engine=engine)
        assert again.ok, (s, again.violations)
        assert again.backends() == (s.prefill, s.decode), s
        exp = spec_expect(c2, n2, eng(engine))
        assert exp is not None and exp[:2] == (s.prefill, s.decode), (s, exp)
        if s.field == "flashinfer_cubin":
            said = finish(s).message   # worded by render/ from the suggestion's data
            assert said and ("pip install flashinfer-cubin==" not in said or Version(str(s.value)) <= Version("0.6.13"))


@SETTINGS
@given(cfg=configs(), node=nodes(), engine=st.sampled_from(ENGINES))
def test_config_suggestions_are_complete(cfg, node, engine):
    """Every single-field config change SPEC §4 names that the SPEC says works is offered."""
    a = policy.plan_for(cfg, node, engine=engine)
    if a.ok:
        return
    e = eng(engine)
    offered = {(s.field, s.value) for s in a.suggestions}
    offered_kv = {kv_of(cfg.replace(kv_cache_dtype=v)) for f, v in offered if f == "kv_cache_dtype"}
    for kv in policy.KV_CACHE_DTYPES:
        trial = cfg.replace(kv_cache_dtype=kv)
        if kv_of(trial) != kv_of(cfg) and spec_expect(trial, node, e) is not None:
            assert kv_of(trial) in offered_kv, (kv, a.suggestions)
    for page in DOMAIN:
        if page != cfg.page_size and spec_expect(cfg.replace(page_size=page), node, e) is not None:
            assert ("page_size", page) in offered, (page, a.suggestions)
    if batch_invariant(cfg, node) and spec_expect(cfg.replace(batch_invariant=False), node, e) is not None:
        assert ("batch_invariant", False) in offered
    if cfg.attention_backend != "auto" and spec_expect(cfg.replace(attention_backend="auto"), node, e) is not None:
        assert ("attention_backend", "auto") in offered


@SETTINGS
@given(cfg=configs(), node=nodes(), engine=st.sampled_from(ENGINES))
def test_evaluation_is_deterministic_and_memo_equals_fresh(cfg, node, engine):
    first = policy.plan_for(cfg, node, engine=engine)
    fresh = policy.evaluate(cfg, node, engine=engine)
    assert first.model_copy(update={"suggestions": (), "verdict": None}) == fresh
    # the verdict is a function of the answer alone (policy/verdict.py): the fresh answer gives the same one
    from attnplan.policy.verdict import verdict_for

    assert verdict_for(first, policy.default_ruleset()) == first.verdict.model_copy(update={"fixes": ()})
    assert first.to_json() == policy.plan_for(cfg, node, engine=engine).to_json()
    assert policy.plan_for(cfg, node, engine=engine) == first
    # an equal node built separately hits the same answer
    clone = NodeFacts.model_validate(node.model_dump())
    assert policy.plan_for(cfg, clone, engine=engine) == first


@SETTINGS
@given(cfg=configs(), node=nodes(), engine=st.sampled_from(ENGINES))
def test_layout_and_page_size(cfg, node, engine):
    a = finish(policy.evaluate(cfg, node, trace=False, engine=engine))   # its notes worded by render/
    if not a.ok:
        return
    e = eng(engine)
    plan = a.plan
    p, d = plan.prefill.backend, plan.decode.backend
    any_trt = p in TRT_FAMILY or d in TRT_FAMILY
    assert plan.kv_cache.layout == ("HND" if any_trt else "NHD")
    page = plan.kv_cache.page_size
    assert spec_page_ok(cfg, node, p, "prefill", page, e) and spec_page_ok(cfg, node, d, "decode", page, e)
    if cfg.page_size is None:
        assert page == min(x for x in DOMAIN if spec_page_ok(cfg, node, p, "prefill", x, e)
                           and spec_page_ok(cfg, node, d, "decode", x, e))
        assert any("page_size" in n for n in a.notes)
    elif e == "vllm":   # the block runs on the largest kernel page dividing it (select_common_block_size)
        assert cfg.page_size % page == 0 and plan.kv_cache.block_size == cfg.page_size
        assert page == max(x for x in spec_pages(cfg, e) if spec_page_ok(cfg, node, p, "prefill", x, e)
                           and spec_page_ok(cfg, node, d, "decode", x, e))
    else:
        assert page == cfg.page_size and plan.kv_cache.block_size is None
    mla = cfg.kv_lora_rank is not None
    for ph, phase in ((plan.prefill, "prefill"), (plan.decode, "decode")):
        kernels = [m for m in ph.modules if m.params["kernel"] != "merge_state"]
        merges = [m for m in ph.modules if m.params["kernel"] == "merge_state"]
        assert len(kernels) == 1
        for m in kernels:
            assert m.params["page_size"] == page
            assert m.kind == ("cubin" if ph.backend in TRT_FAMILY else "jit")
        # the complete module list: the LSE merge wherever partial attention is merged (seed 004, cascade)
        assert len(merges) == (1 if (mla and phase == "prefill") or cfg.cascade else 0)
        if merges:
            assert ph.returns_lse or not (mla and phase == "prefill")
        assert ph.call == ("xqa_decode" if ph.backend == "xqa" else ph.call)
        if cfg.sinks and ph.backend in ("fa2", "fa3"):
            assert ph.call == "sink" and ph.entry_point == "flashinfer.BatchAttentionWithAttentionSinkWrapper"
    # SPEC §5 views: fp8 is float8 (never nvfp4); only nvfp4 over trtllm-gen quantizes the query
    kv = kv_of(cfg)
    view = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}.get(kv)
    if view:
        assert plan.kv_cache.kv_storage_dtype == "uint8" and plan.kv_cache.kv_view_dtype == view
    if kv != "nvfp4":
        assert plan.kv_cache.nvfp4_scale_dtype is None
    # SPEC §5 metadata formulas (XQA is called through the trtllm API: block tables + seq_lens)
    dcp = cfg.dcp_world_size > 1
    for kind, has_p, has_d in (("prefill_only", True, False), ("decode_only", False, True), ("mixed", True, True)):
        m = getattr(plan.metadata, kind)
        all_trt = (not has_p or p in API) and (not has_d or d in API)
        assert m.all_uses_trtllm == all_trt
        assert m.needs_host_seq_lens == (dcp or cfg.cascade or not all_trt)
        assert m.needs_paged_kv_indices == (cfg.cascade or not all_trt)
    bi = batch_invariant(cfg, node)
    assert plan.attention.split_kv == ("fixed" if bi else "disabled" if (
        kv == "nvfp4" and major_of(node) == 12 and "fa2" in (p, d)) else "auto")
    # use_tensor_cores for native (non-MLA) decode: the engine's own choice where it has one (vLLM 0.33 always:
    # FlashInferMetadataBuilder._get_decode_wrapper), else group size >= 4 (always with a fixed split)
    if d in ("fa2",) and not mla:
        assert plan.decode.use_tensor_cores == (eng(engine) == "vllm" or group(cfg) >= 4 or bi)
    assert plan.decode.q_len_per_req == 1 + cfg.num_speculative_tokens


def test_every_backend_in_the_catalog_has_an_executable_mapping():
    """Issue 11: a backend without calls for each phase it lists, or a call the adapter does not know, fails."""
    from typing import get_args

    from attnplan.policy.answer import Call

    rs = policy.default_ruleset()
    known = set(get_args(Call))
    for name, spec in rs.backends.items():
        assert set(spec.phases) <= set(spec.calls), name
        for table in (spec.calls, spec.mla_calls, spec.sink_calls):
            for phase, call in table.items():
                assert call.call in known and call.entry_point.startswith("flashinfer."), (name, phase, call)
        for engine in rs.engines.values():
            for kind in engine.selection.values():
                for rows in kind.values():
                    for row in rows:
                        assert set(row.candidates) <= set(rs.backends)
