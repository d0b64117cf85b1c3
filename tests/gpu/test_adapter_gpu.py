"""FlashInfer through the adapter on a real GPU, against the float32 reference (bf16: rel err <= 1e-2).

Plans come from this machine's probed facts (on an H100: fa3 prefill, fa2 decode). Every check
draws fresh random inputs and NaN-poisons both the cache and the output first.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, answer, Batch, executor, no_device_sync, prebuild, random_lens, rel_err, settled_memory  # noqa: E402

from attnplan.policy import AttentionConfig, PlanMismatchError, plan_for, simulated_node  # noqa: E402

from attnplan.adapter import AttentionExecutor, build_step, check_plan  # noqa: E402

pytestmark = pytest.mark.gpu

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)          # GQA group 4
G8 = dict(head_dim=128, num_qo_heads=32, num_kv_heads=4)
MHA = dict(head_dim=128, num_qo_heads=8, num_kv_heads=8)             # group 1: CUDA-core decode kernel
FP8 = dict(LLAMA, kv_cache_dtype="fp8")
E5M2 = dict(LLAMA, kv_cache_dtype="fp8_e5m2")
SPEC = [dict(LLAMA, num_speculative_tokens=k) for k in (1, 2, 3)]


@pytest.fixture(scope="module", autouse=True)
def built():
    prebuild(*(answer(**c) for c in (LLAMA, G8, MHA, FP8, E5M2, *SPEC)))


def test_b200_plan_refused_before_memory_moves():
    torch.cuda.init()
    before = settled_memory()
    # head 128: trtllm-gen has no head-512 NVFP4 kernels (issue 29's kernel table: trtllm.kernel-missing)
    b200 = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, kv_cache_dtype="nvfp4"),
                    simulated_node("B200", cubins="available"))
    assert b200.backends() == ("trtllm-gen", "trtllm-gen")
    with pytest.raises(PlanMismatchError) as err:
        AttentionExecutor(b200)                               # live probe of this machine
    assert {"kv.nvfp4-sm100f", "trtllm.family"} <= {v.rule for v in err.value.violations}
    assert (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()) == before    # no gc here: nothing hidden
    print(err.value)


def test_live_facts_confirm_the_local_plan():
    a = answer(**LLAMA)
    live = check_plan(a)
    node = live.node
    print("live node:", node.gpu_name.value, node.capability_str, node.flashinfer_version.value, node.torch_version.value)
    assert node.capability.source.value == "measured"
    assert live.plan == a.plan
    if node.capability.value == 90:
        assert a.backends() == ("fa3", "fa2") and a.plan.decode.use_tensor_cores


def test_fa3_prefill_chunked():
    ex = executor(**LLAMA)
    q = random_lens(5, 1, 700)
    ctx = [0] + random_lens(4, 1, 1500)          # one request without cached context
    b = Batch(ex, q, [a + c for a, c in zip(q, ctx)], 0)
    err = rel_err(b.run(), b.reference())
    print(f"{ex.plan.prefill.backend} chunked prefill q={q} ctx={ctx}: rel err {err:.2e}")
    assert err <= TOL


@pytest.mark.parametrize("cfg", [LLAMA, G8, MHA], ids=["group4", "group8", "group1"])
def test_fa2_decode(cfg):
    ex = executor(**cfg)
    seq = random_lens(16, 1, 3000)
    b = Batch(ex, [1] * 16, seq, 16)
    err = rel_err(b.run(), b.reference())
    print(f"{ex.plan.decode.backend} decode tc={ex.plan.decode.use_tensor_cores} group={cfg['num_qo_heads'] // cfg['num_kv_heads']}: rel err {err:.2e}")
    assert err <= TOL


@pytest.mark.parametrize("cfg", [LLAMA, G8, MHA], ids=["group4", "group8", "group1"])
def test_mixed_batch(cfg):
    ex = executor(**cfg)
    nd = 6
    q = [1] * nd + random_lens(3, 1, 500)
    seq = random_lens(nd, 1, 2500) + [q[nd], q[nd + 1] + 700, q[nd + 2] + random_lens(1, 0, 1200)[0]]
    b = Batch(ex, q, seq, nd)
    err = rel_err(b.run(), b.reference())
    print(f"mixed {ex.answer.backends()} group={cfg['num_qo_heads'] // cfg['num_kv_heads']}: rel err {err:.2e}")
    assert err <= TOL


@pytest.mark.parametrize("cfg", [FP8, E5M2], ids=["e4m3", "e5m2"])
def test_fp8_kv(cfg):
    ex = executor(**cfg)
    assert ex.allocate_kv_cache(1).data.dtype == torch.uint8
    nd = 5
    q = [1] * nd + random_lens(2, 1, 400)
    seq = random_lens(nd, 1, 2000) + [q[nd] + 300, q[nd + 1]]
    b = Batch(ex, q, seq, nd, k_scale=0.5)
    err = rel_err(b.run(), b.reference())
    print(f"fp8 KV {ex.plan.kv_cache.kv_view_dtype} {ex.answer.backends()}: rel err {err:.2e}")
    assert err <= TOL


@pytest.mark.parametrize("cfg", SPEC, ids=lambda c: f"q{1 + c['num_speculative_tokens']}")
def test_speculative_decode(cfg):
    ex = executor(**cfg)
    qd = ex.plan.decode.q_len_per_req
    assert qd == 1 + cfg["num_speculative_tokens"] and ex.plan.decode.runs_on_prefill_kernel
    nd = 8
    q = [qd] * nd + random_lens(2, 1, 300)
    seq = random_lens(nd, qd, 2000) + [q[nd] + 500, q[nd + 1]]
    b = Batch(ex, q, seq, nd)
    err = rel_err(b.run(), b.reference())
    print(f"spec decode q_len={qd} on {ex.plan.decode.kernel}: rel err {err:.2e}")
    assert err <= TOL


def test_native_step_does_no_device_to_host_sync():
    """Seed 001: host metadata comes from the host; nothing is read back from the device."""
    ex = executor(**LLAMA)
    nd = 4
    q = [1] * nd + [37, 5]
    b = Batch(ex, q, random_lens(nd, 1, 900) + [37, 600], nd)
    ref = b.reference()
    b.run()                                   # first pass outside the check (lazy allocations)
    k, v = b.new_kv()
    out = torch.empty(sum(q), 32, 128, dtype=torch.bfloat16, device="cuda")
    with no_device_sync():
        step = ex.plan_step(b.input)
        ex.append_kv(step, b.cache, k, v)
        ex.forward(step, b.q, b.cache, out)
    assert rel_err(out, ref) <= TOL


def test_trtllm_metadata_needs_no_host_data():
    """A B200 plan (trtllm-gen in both phases) builds its step from device tensors alone."""
    b200 = plan_for(AttentionConfig(**LLAMA), simulated_node("B200", cubins="available"))
    assert not b200.plan.metadata.mixed.needs_host_seq_lens
    seq = torch.tensor([9, 40, 70], dtype=torch.int32, device="cuda")
    table = torch.arange(15, dtype=torch.int32, device="cuda").view(3, 5)
    from attnplan.adapter import StepInput

    inp = StepInput([1, 1, 30], seq, table, 2, max_seq_len=80)
    with no_device_sync():
        step = build_step(b200.plan, inp)
    assert step.prefill.kv_page_indptr.tolist() == [0, 70 // b200.plan.kv_cache.page_size + 1]


@pytest.mark.parametrize("cfg", [LLAMA, SPEC[1]], ids=["q1", "q3"])
def test_cuda_graph_decode(cfg):
    """The rules' own plan here, captured whole (tests/gpu/test_decode_graphs_gpu.py: every call)."""
    from attnplan.adapter import DecodeGraph

    ex = executor(**cfg)
    qd = ex.plan.decode.q_len_per_req
    bs = 8
    first = Batch(ex, [qd] * bs, random_lens(bs - 1, qd, 1500) + [1500], bs)
    graph = DecodeGraph(ex, bs, first.table.shape[1], first.cache)
    graph.update(first.input.seq_lens, first.table, first.input.seq_lens_cpu)
    graph.capture()
    errs = [rel_err(graph.replay(first.q, *first.new_kv()).clone(), first.reference())]
    # Next step: new lengths, same batch size and cache: update the graph's inputs, replay it.
    second = Batch(ex, [qd] * bs, random_lens(bs, qd, 1500), bs, reuse=first)
    graph.update(second.input.seq_lens, second.table, second.input.seq_lens_cpu)
    errs.append(rel_err(graph.replay(second.q, *second.new_kv()).clone(), second.reference()))
    print(f"CUDA graph decode q_len={qd}: rel errs {errs}")
    assert max(errs) <= TOL


def test_warmup_then_first_request_compiles_nothing():
    from attnplan.adapter.warmup import _built, _jit_dir

    ex = executor(**LLAMA)
    events = []
    prebuilt = _built(_jit_dir())        # the module fixture built these modules already
    report = ex.warmup(progress=events.append)
    assert _built(_jit_dir()) == prebuilt, "warm-up rebuilt a module that was already built"
    print(report.summary())
    assert [m.name for m in report.modules] == [m.name for m in (*ex.plan.prefill.modules, *ex.plan.decode.modules)]
    # and, where the plan carries a per-shape decode choice, each decode call forced once (executor.warmup)
    from attnplan.adapter.calls import decode_phases

    each = [f"decode_only:{pp.call}" for pp in decode_phases(ex.plan)] if ex.plan.decode_choice is not None else []
    assert list(report.batch_kinds) == ["prefill_only", "decode_only", "mixed", *each]
    assert report.compiled_during_exercise == []
    before = _built(_jit_dir())
    q = [1, 1, 1, 333]
    b = Batch(ex, q, random_lens(3, 1, 5000) + [900], 3)
    import time

    t0 = time.perf_counter()
    out = b.run()
    first = time.perf_counter() - t0
    assert _built(_jit_dir()) == before, "the first request compiled a module"
    assert rel_err(out, b.reference()) <= TOL
    print(f"first request after warm-up: {first * 1e3:.1f} ms")
