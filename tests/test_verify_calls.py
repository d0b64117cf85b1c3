"""Every FlashInfer call verify makes binds to the installed FlashInfer's real signatures (CPU)."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flashinfer")

from attnplan.policy import default_ruleset, simulated_node  # noqa: E402
from attnplan.verify import calls, generate  # noqa: E402


def _bind(steps):
    cls = None
    for s in steps:
        if s.kind == "new":
            cls = calls.resolve(s.target)
            inspect.signature(cls).bind(*s.args, **s.kwargs)
        elif s.kind == "method":
            fn = getattr(cls, s.target)
            sig = inspect.signature(getattr(fn, "__wrapped__", fn))
            sig.bind(None, *s.args, **s.kwargs)
            if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
                # BatchDecodeWithPagedKVCacheWrapper.plan(**kwargs) forwards to _plan_impl: bind there.
                impl = getattr(cls, f"_{s.target}_impl")
                inspect.signature(impl).bind(None, *s.args, **s.kwargs)
        else:
            fn = calls.resolve(s.target)
            inspect.signature(getattr(fn, "__wrapped__", fn)).bind(*s.args, **s.kwargs)


def _spec(call, **over):
    spec = dict(call=call, backend="fa2", flashinfer_backend="fa2", phase="decode", use_tensor_cores=True, q_len=1,
                query_dtype="bfloat16", kv_view_dtype="bfloat16", output_dtype="bfloat16", head_dim_qk=64,
                head_dim_vo=64, num_qo_heads=4, num_kv_heads=2, page_size=16, mla=False, kv_lora_rank=None,
                qk_rope_head_dim=None, sm_scale=0.125, window_left=-1, logits_soft_cap=None, sinks=False,
                tolerance=1e-2, seed=1)
    spec.update(over)
    return spec


SPECS = [
    _spec("paged_prefill", phase="prefill"),
    _spec("paged_prefill", phase="prefill", kv_view_dtype="nvfp4", sinks=True),
    _spec("paged_decode"),
    _spec("paged_decode", kv_view_dtype="float8_e4m3fn", window_left=31, logits_soft_cap=30.0),
    _spec("sink", phase="prefill", sinks=True, window_left=63),
    _spec("xqa_decode", flashinfer_backend="xqa", sinks=True, q_len=2),
    _spec("xqa_decode", flashinfer_backend="xqa", kv_view_dtype="nvfp4"),
    _spec("mla_paged_decode", mla=True, kv_lora_rank=64, qk_rope_head_dim=16, num_qo_heads=4, num_kv_heads=4),
    _spec("mla_paged_decode", mla=True, kv_lora_rank=64, qk_rope_head_dim=16, num_qo_heads=4, num_kv_heads=4,
          sinks=True, q_len=2),
    _spec("ragged_prefill", phase="prefill", head_dim_qk=96, head_dim_vo=64),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s['call']}-{s['kv_view_dtype']}")
def test_each_call_binds_to_flashinfer(spec):
    inp = calls.make_inputs(spec, torch, "cpu")
    ws = torch.zeros(16, dtype=torch.uint8)
    _bind(calls.CALLS[spec["call"]](spec, inp, torch, ws))


def test_the_table_covers_every_runnable_call():
    from attnplan.verify.select import runnable_calls

    assert set(calls.CALLS) == set(runnable_calls())


def test_reference_reads_the_cache_the_kernel_reads():
    # The reference's keys are the paged cache's own contents, dequantized: an nvfp4 page holds
    # e2m1 codes times fp8 scales, and the slots past a request's length are never read.
    spec = _spec("paged_decode", kv_view_dtype="nvfp4")
    inp = calls.make_inputs(spec, torch, "cpu")
    assert inp.k.dtype == torch.uint8 and inp.sf[0].dtype == torch.float8_e4m3fn
    assert [k.shape[0] for k in inp.keys] == list(calls.KV_LENS)
    page = spec["page_size"]
    first = inp.pages[0][0]
    deq = calls._dequant_nvfp4(torch, inp.k[first], inp.sf[0][first])
    assert torch.equal(inp.keys[0][:page], deq)
    assert torch.isnan(inp.out).all()


def test_generated_probes_for_the_shipped_rules_build_their_calls():
    gen = generate(default_ruleset(), simulated_node("H100"), quick=True)
    ran = 0
    for p in gen.probes:
        if p.skip or p.spec["query_dtype"] not in ("bfloat16", "float16"):
            continue
        inp = calls.make_inputs(p.spec, torch, "cpu")
        _bind(calls.CALLS[p.call](p.spec, inp, torch, torch.zeros(16, dtype=torch.uint8)))
        ran += 1
    assert ran > 10


def test_child_reports_an_untouched_output_as_nan_and_an_exception_as_error():
    from attnplan.verify.child import run_probe

    spec = _spec("paged_decode")
    res = run_probe(spec, device="cpu", execute=lambda steps: None)      # writes nothing: NaN stays
    assert res["outcome"] == "wrong" and res["nonfinite"] > 0 and "non-finite" in res["error"]

    def boom(steps):
        raise RuntimeError("Unsupported head_dim: 96")

    res = run_probe(spec, device="cpu", execute=boom)
    assert res == {"outcome": "error", "error": "RuntimeError: Unsupported head_dim: 96", "seconds": res["seconds"],
                   "cpu_s": res["cpu_s"]}


def test_child_counts_the_cpu_of_what_the_call_starts():
    """A JIT build is ninja and nvcc in processes the call starts and waits for: their CPU is the
    probe's ``cpu_s`` (what a sweep's builds cost, runner.cpu_summary), beside the time it took."""
    import subprocess
    import sys

    from attnplan.verify.child import run_probe

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"

    def building(steps):
        subprocess.run([sys.executable, "-c", burn], check=True)     # a 'compiler' that spends 0.6 CPU-s
        raise RuntimeError("Ninja build failed")

    res = run_probe(_spec("paged_decode"), device="cpu", execute=building)
    assert res["outcome"] == "error" and res["cpu_s"] >= 0.6
    quick = run_probe(_spec("paged_decode"), device="cpu", execute=lambda steps: None)
    assert 0 <= quick["cpu_s"] < res["cpu_s"]


def test_child_accepts_a_correct_output_within_tolerance():
    import itertools

    from attnplan.adapter.reference import attention_ref
    from attnplan.verify.child import compare, run_probe

    spec = _spec("ragged_prefill", phase="prefill", head_dim_qk=64, head_dim_vo=64, window_left=40)

    def kernel(steps):
        # A correct 'kernel': attention over exactly what the run step was handed, written in bf16.
        (q, k, v), out = steps[-1].args, steps[-1].kwargs["out"]
        qo = [0, *itertools.accumulate(calls.PREFILL_Q)]
        kv = [0, *itertools.accumulate(calls.KV_LENS)]
        for r in range(len(calls.KV_LENS)):
            o, _ = attention_ref(q[qo[r]:qo[r + 1]], k[kv[r]:kv[r + 1]], v[kv[r]:kv[r + 1]],
                                 sm_scale=spec["sm_scale"], window_left=spec["window_left"])
            out[qo[r]:qo[r + 1]] = o.to(out.dtype)
        return out

    res = run_probe(spec, device="cpu", execute=kernel)
    assert res["outcome"] == "ok" and 0 < res["rel_err"] <= 1e-2
    ref = torch.ones(4, 2, 8)
    assert compare(ref + 0.05, ref, 1e-2)["outcome"] == "wrong"


def test_xqa_draft_mask_is_causal_bit_packed():
    m = calls.causal_draft_mask(torch, batch=2, q_len=3, device="cpu")
    assert m.dtype == torch.uint16 and tuple(m.shape) == (2, 3, 2)
    assert [int(x) for x in m[0, :, 0].to(torch.int32)] == [0b1, 0b11, 0b111]
    assert int(m[1, 2, 1].to(torch.int32)) == 0
    m = calls.causal_draft_mask(torch, batch=1, q_len=20, device="cpu")
    assert int(m[0, 19, 0].to(torch.int32)) == 0xFFFF and int(m[0, 19, 1].to(torch.int32)) == 0b1111


def test_soft_cap_probes_make_the_cap_matter():
    # A kernel that ignored the soft cap must fail the comparison: the capped and uncapped
    # references differ by far more than the 16-bit tolerance.
    from attnplan.verify.child import compare

    spec = _spec("paged_prefill", phase="prefill", logits_soft_cap=30.0)
    inp = calls.make_inputs(spec, torch, "cpu")
    capped = calls.reference(spec, inp)
    uncapped = calls.reference(dict(spec, logits_soft_cap=None), inp)
    assert compare(uncapped, capped, spec["tolerance"])["outcome"] == "wrong"


def test_sink_probes_make_the_sinks_matter():
    from attnplan.verify.child import compare

    spec = _spec("sink", phase="prefill", sinks=True)
    inp = calls.make_inputs(spec, torch, "cpu")
    with_sinks = calls.reference(spec, inp)
    inp.sinks = None
    assert compare(calls.reference(spec, inp), with_sinks, spec["tolerance"])["outcome"] == "wrong"
