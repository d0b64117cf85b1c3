"""TRTLLM-gen calls built from B200 plans, bound to FlashInfer 0.7.2's real signatures.

No GPU here: the signature comes from ``inspect`` when flashinfer imports, else from the installed
source parsed with ``ast`` - either way ``Signature.bind`` rejects a missing or unknown argument.
"""

from __future__ import annotations

import math

import pytest

from attnplan.policy import AttentionConfig, plan_for, simulated_node

torch = pytest.importorskip("torch")

from attnplan.adapter import AttentionParams, StepInput, allocate, build_step  # noqa: E402
from attnplan.adapter.calls import strategy  # noqa: E402
from attnplan.adapter.calls.trtllm_context import context_kwargs  # noqa: E402
from attnplan.adapter.calls.trtllm_decode import decode_kwargs  # noqa: E402
from attnplan.adapter.calls.trtllm_mla_decode import mla_decode_kwargs  # noqa: E402
from attnplan.adapter.calls.trtllm_ragged import ragged_kwargs  # noqa: E402
from attnplan.adapter.signatures import flashinfer_root, flashinfer_version, real_signature  # noqa: E402
from attnplan.errors import SourceNotFoundError  # noqa: E402

try:
    flashinfer_root()
except SourceNotFoundError:
    pytest.skip("flashinfer-python is not installed", allow_module_level=True)

B200 = simulated_node("B200", cubins="available")
LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
DSV3 = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def test_installed_flashinfer_is_the_supported_one():
    from attnplan.policy import SUPPORTED_FLASHINFER

    assert flashinfer_version() == SUPPORTED_FLASHINFER == "0.7.2.post1"


def bind(entry: str, kwargs: dict):
    module, name = strategy(entry).entry_point.rsplit(".", 1)   # the call's strategy names its entry point
    sig, how = real_signature(module, name)
    bound = sig.bind(**kwargs)          # TypeError on a missing required or an unknown argument
    return bound, sig, how


def setup(cfg_kw, q_lens, seq, nd):
    answer = plan_for(AttentionConfig(**cfg_kw), B200)
    assert answer.ok, answer.violations
    plan = answer.plan
    params = AttentionParams.from_answer(answer)
    page = plan.kv_cache.page_size
    width = max((s + page - 1) // page for s in seq)
    table = torch.arange(len(seq) * width, dtype=torch.int32).view(len(seq), width)
    # No host seq lens: a batch that runs trtllm-gen in every phase needs none (seed 001).
    step = build_step(plan, StepInput(q_lens, torch.tensor(seq, dtype=torch.int32), table, nd, max_seq_len=4096))
    cache = allocate(plan.kv_cache, len(seq) * width, "cpu")
    ws = torch.zeros(plan.decode.workspace_bytes // 1024, dtype=torch.uint8)
    return answer, plan, params, step, cache, ws


@pytest.mark.parametrize("cfg, kv_dtype", [
    (dict(LLAMA), torch.bfloat16),
    (dict(LLAMA, kv_cache_dtype="fp8"), torch.float8_e4m3fn),
    (dict(LLAMA, num_speculative_tokens=3), torch.bfloat16),
    (dict(LLAMA, sliding_window=1024), torch.bfloat16),
    # NVFP4 at head 256 (the table has no NVFP4 kernel at head 512)
    (dict(head_dim=256, num_qo_heads=32, num_kv_heads=8, kv_cache_dtype="nvfp4"), torch.uint8),
])
def test_decode_and_context_calls_bind(cfg, kv_dtype):
    answer, plan, params, step, cache, ws = setup(cfg, [1 + cfg.get("num_speculative_tokens", 0)] * 2 + [7],
                                                  [9, 40, 30], 2)
    assert answer.backends() == ("trtllm-gen", "trtllm-gen") and plan.kv_cache.layout == "HND"
    hd, qd = cfg["head_dim"], plan.decode.q_len_per_req
    q_dtype = getattr(torch, plan.decode.query_dtype)
    dec = decode_kwargs(plan, params, step.decode, torch.zeros(2 * qd, 32, hd, dtype=q_dtype), cache, ws,
                               torch.empty(2 * qd, 32, hd, dtype=torch.bfloat16), k_scale=0.5, v_scale=2.0)
    bound, sig, how = bind("trtllm_decode", dec)
    assert set(dec) <= set(sig.parameters)
    assert dec["backend"] == "trtllm-gen" and dec["kv_layout"] == "HND" and dec["q_len_per_req"] == qd
    assert dec["kv_cache"].dtype == kv_dtype and dec["kv_cache"].shape[:3] == (cache.num_pages, 2, 8)
    assert math.isclose(dec["bmm1_scale"], 0.5 / math.sqrt(hd)) and dec["bmm2_scale"] == 2.0
    assert dec["window_left"] == (cfg.get("sliding_window", 0) - 1)
    assert dec["seq_lens"].tolist() == [9, 40] and dec["max_seq_len"] == 4096
    if cfg.get("kv_cache_dtype") == "nvfp4":
        k_sf, v_sf = dec["kv_cache_sf"]
        assert k_sf.dtype == v_sf.dtype == torch.float8_e4m3fn and k_sf.shape[-1] == hd // 16
        assert plan.decode.query_dtype == "float8_e4m3fn" and dec["kv_cache"].shape[-1] == hd // 2
    else:
        assert dec["kv_cache_sf"] is None

    ctx = context_kwargs(plan, params, step.prefill, torch.zeros(7, 32, hd, dtype=q_dtype), cache, ws,
                                torch.empty(7, 32, hd, dtype=torch.bfloat16))
    bind("trtllm_context", ctx)
    assert ctx["causal"] is True and ctx["batch_size"] == 1 and ctx["max_q_len"] == 7
    # Seed 001: cum_seq_lens_kv is this step's page indptr, cumsummed on the device.
    assert ctx["cum_seq_lens_kv"] is step.prefill.kv_page_indptr
    assert ctx["cum_seq_lens_kv"].tolist() == [0, 30 // plan.kv_cache.page_size + 1]
    assert ctx["cum_seq_lens_q"].tolist() == [0, 7]


def test_binding_is_real():
    """The same check refuses a call FlashInfer would refuse."""
    _, plan, params, step, cache, ws = setup(dict(LLAMA), [1], [9], 1)
    kw = decode_kwargs(plan, params, step.decode, torch.zeros(1, 32, 128), cache, ws, None)
    with pytest.raises(TypeError):
        bind("trtllm_decode", {**kw, "logits_soft_cap": 30.0})     # trtllm-gen has no soft cap (rule trtllm.softcap)
    kw.pop("max_seq_len")
    with pytest.raises(TypeError):
        bind("trtllm_decode", kw)


def test_mla_decode_and_ragged_calls_bind():
    answer, plan, params, step, cache, ws = setup(dict(DSV3), [1, 1, 6], [9, 70, 20], 2)
    assert answer.backends() == ("trtllm-ragged", "trtllm-gen-mla")
    assert plan.kv_cache.page_size in (32, 64)
    q = torch.zeros(2, 1, 16, 576, dtype=torch.bfloat16)
    dec = mla_decode_kwargs(plan, params, step.decode, q, cache, ws, torch.empty(2, 1, 16, 512, dtype=torch.bfloat16))
    _, _, how = bind("trtllm_mla_decode", dec)
    assert (dec["kv_lora_rank"], dec["qk_rope_head_dim"], dec["qk_nope_head_dim"]) == (512, 64, 128)
    assert dec["kv_cache"].shape[1:] == (plan.kv_cache.page_size, 576) and dec["backend"] == "trtllm-gen"
    assert math.isclose(dec["bmm1_scale"], 1 / math.sqrt(192))
    qo = torch.tensor([0, 6], dtype=torch.int32)
    rag = ragged_kwargs(params, q=torch.zeros(6, 16, 192), k=torch.zeros(20, 16, 192), v=torch.zeros(20, 16, 128),
                               workspace=ws, seq_lens=torch.tensor([20], dtype=torch.int32), cum_seq_lens_q=qo,
                               cum_seq_lens_kv=torch.tensor([0, 20], dtype=torch.int32), max_q_len=6, max_kv_len=20,
                               batch_size=1, causal=False, out=torch.empty(6, 16, 128), lse=torch.empty(6, 16))
    bound, sig, _ = bind("trtllm_ragged", rag)
    required = {n for n, p in sig.parameters.items() if p.default is p.empty}
    assert required <= set(rag)
    assert rag["return_lse"] is True and rag["is_causal"] is False


def test_signature_reader_agrees_with_the_source():
    from attnplan.adapter.signatures import source_signature

    sig = source_signature("flashinfer.decode", "trtllm_batch_decode_with_kv_cache")
    assert list(sig.parameters)[:6] == ["query", "kv_cache", "workspace_buffer", "block_tables", "seq_lens", "max_seq_len"]
    assert sig.parameters["kv_layout"].default is not sig.parameters["query"].default
    # A re-export is read where it is defined: flashinfer/decode.py imports the MLA decode from .mla.
    mla = source_signature("flashinfer.decode", "trtllm_batch_decode_with_kv_cache_mla")
    assert list(mla.parameters)[:5] == ["query", "kv_cache", "workspace_buffer", "qk_nope_head_dim", "kv_lora_rank"]
