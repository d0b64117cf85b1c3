"""The general step's host metadata (issue 41: prefill-only and mixed steps, and decode-only steps
built without a layout cache) against the definitions, written plainly here: for many random
batches - decodes of the plan's q_len_per_req (1 and > 1) then prefills, several page sizes
(powers of two and not), contiguous block tables and column slices of wider ones, page indices
sent from the host and expanded on the device - every tensor ``build_step`` hands the kernels
equals the definition's, value and dtype:

    slot of new token at KV position pos of request r = table[r, pos // page] * page + pos % page
    kv indices = table[r, :pages_r] concatenated; pages_r = ceil(seq_r / page)
    qo / kv page indptrs = cumulative sums (restarted at 0 per phase); last page len = (seq - 1) % page + 1

The timing of the same path is bench/general_step_host.py (no timed assertions here)."""

from __future__ import annotations

import zlib

import pytest

from attnplan.errors import AdapterCallError
from attnplan.policy import AttentionConfig, plan_for, simulated_node

torch = pytest.importorskip("torch")

from attnplan.adapter import StepInput, build_step  # noqa: E402
from attnplan.adapter import host_metadata  # noqa: E402
from attnplan.adapter.host_metadata import HostStaging  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)


def plan(node="H100", page=None, **kw):
    answer = plan_for(AttentionConfig(**LLAMA, **kw), simulated_node(node, cubins="available") if node.startswith("B")
                      else simulated_node(node), engine="flashinfer")
    assert answer.ok, answer.violations
    p = answer.plan
    if page is not None:
        p = p.model_copy(update={"kv_cache": p.kv_cache.model_copy(update={"page_size": page})})
    return p


def reference(table, seq, q, nd, page):
    """Every value of the step from the definitions, per phase, as Python lists."""
    slots = [int(table[r, pos // page]) * page + pos % page
             for r in range(len(q)) for pos in range(seq[r] - q[r], seq[r])]
    phases = {}
    for phase, r0, r1 in (("decode", 0, nd), ("prefill", nd, len(q))):
        if r0 == r1:
            continue
        qo, kp, idx = [0], [0], []
        for r in range(r0, r1):
            pages = (seq[r] + page - 1) // page
            qo.append(qo[-1] + q[r])
            kp.append(kp[-1] + pages)
            idx += [int(table[r, j]) for j in range(pages)]
        phases[phase] = dict(qo=qo, kp=kp, idx=idx, seq=seq[r0:r1], last=[(s - 1) % page + 1 for s in seq[r0:r1]],
                             tok=(sum(q[:r0]), sum(q[:r1])), req=(r0, r1), max_q=max(q[r0:r1]), max_kv=max(seq[r0:r1]),
                             q=tuple(q[r0:r1]))
    return slots, phases


def random_batch(gen, q_dec, page, *, contiguous, nd=None, npre=None):
    nd = int(torch.randint(0, 7, (1,), generator=gen)) if nd is None else nd
    npre = int(torch.randint(0 if nd else 1, 5, (1,), generator=gen)) if npre is None else npre
    q = [q_dec] * nd + torch.randint(1, 400, (npre,), generator=gen).tolist()
    seq = [x + int(torch.randint(0, 700, (1,), generator=gen)) for x in q]
    width = max((s + page - 1) // page for s in seq) + int(torch.randint(1, 3, (1,), generator=gen))
    step = 1 if contiguous else 2       # not contiguous: every other column of a wider table
    wide = torch.randperm(len(q) * width * step * 3, generator=gen)[: len(q) * width * step]
    table = wide.view(len(q), width * step).int()[:, ::step]
    assert table.is_contiguous() == contiguous
    return q, seq, nd, table


def check(step, table, seq, q, nd, page, p):
    slots, phases = reference(table, seq, q, nd, page)
    assert step.slots.dtype == torch.int64 and step.slots.tolist() == slots
    assert step.num_tokens == len(slots)
    needs = p.metadata.decode_only if nd == len(q) else p.metadata.prefill_only if nd == 0 else p.metadata.mixed
    for phase in ("decode", "prefill"):
        b, ref = getattr(step, phase), phases.get(phase)
        assert (b is None) == (ref is None), phase
        if b is None:
            continue
        r0, r1 = ref["req"]
        assert (b.req, b.tok, b.num_reqs, b.num_tokens) == (slice(r0, r1), slice(*ref["tok"]), r1 - r0,
                                                            ref["tok"][1] - ref["tok"][0])
        assert (b.max_q_len, b.max_kv_len, b.query_lens) == (ref["max_q"], ref["max_kv"], ref["q"])
        for dev, cpu, key in ((b.qo_indptr, b.qo_indptr_cpu, "qo"), (b.kv_page_indptr, b.kv_page_indptr_cpu, "kp"),
                              (b.last_page_len, b.last_page_len_cpu, "last"), (None, b.seq_lens_cpu, "seq")):
            for t in (dev, cpu):
                if t is not None:
                    assert t.dtype == torch.int32 and t.tolist() == ref[key], (phase, key)
        assert b.seq_lens.tolist() == ref["seq"] and torch.equal(b.block_table, table[r0:r1])
        if needs.needs_paged_kv_indices:
            assert b.kv_indices.dtype == torch.int32 and b.kv_indices.tolist() == ref["idx"], phase
        else:
            assert b.kv_indices is None


CASES = [("H100", {}, None), ("H100", dict(num_speculative_tokens=2), None), ("H100", {}, 1), ("H100", {}, 24),
         ("H100", dict(num_speculative_tokens=1), 64), ("B200", {}, None), ("B200", dict(num_speculative_tokens=3), 32)]


@pytest.mark.parametrize("node,kw,page", CASES)
@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("host_table", [False, True], ids=["device-table", "host-table"])
def test_random_batches_equal_the_definitions(node, kw, page, contiguous, host_table):
    """``host_table``: the engine also hands its host copy of the block table (``block_table_cpu``, as
    vLLM keeps one): the host gathers the slots and page indices; the same values either way."""
    p = plan(node, page, **kw)
    page, q_dec = p.kv_cache.page_size, p.decode.q_len_per_req
    gen = torch.Generator().manual_seed(zlib.crc32(repr((node, page, q_dec, contiguous)).encode()))
    staging = HostStaging("cpu")
    for i in range(12):
        shape = {} if i >= 3 else [dict(nd=0), dict(npre=0, nd=5), dict(nd=1, npre=1)][i]
        q, seq, nd, table = random_batch(gen, q_dec, page, contiguous=contiguous, **shape)
        seq_t = torch.tensor(seq, dtype=torch.int32)
        host = table.clone() if host_table else None     # a copy: nothing may read the device table for it
        step = build_step(p, StepInput(q, seq_t.clone(), table, nd, seq_lens_cpu=seq_t, block_table_cpu=host), staging)
        check(step, table, seq, q, nd, page, p)
        # with the host table the slots are part of the one copy itself (no gather, no add on the device)
        one_copy = (step.decode or step.prefill).qo_indptr.untyped_storage().data_ptr()
        assert (step.slots.untyped_storage().data_ptr() == one_copy) == host_table


def test_a_host_table_of_another_shape_is_an_error():
    p = plan()
    seq_t = torch.tensor([40, 70], dtype=torch.int32)
    table = torch.arange(20, dtype=torch.int32).view(2, 10)
    with pytest.raises(AdapterCallError, match="block_table_cpu has shape"):
        build_step(p, StepInput([40, 70], seq_t.clone(), table, 0, seq_lens_cpu=seq_t, block_table_cpu=table[:, :5]))


@pytest.mark.parametrize("seed", range(4))
def test_page_indices_expanded_on_the_device_equal_the_definitions(seed, monkeypatch):
    """Past HOST_KV_ENTRIES pages the device expands the page indices; the same definitions hold."""
    monkeypatch.setattr(host_metadata, "HOST_KV_ENTRIES", 0)
    p = plan("H100", (16, 24)[seed % 2], num_speculative_tokens=seed % 2)
    assert p.metadata.mixed.needs_paged_kv_indices
    gen = torch.Generator().manual_seed(700 + seed)
    q, seq, nd, table = random_batch(gen, p.decode.q_len_per_req, p.kv_cache.page_size, contiguous=seed < 2)
    seq_t = torch.tensor(seq, dtype=torch.int32)
    check(build_step(p, StepInput(q, seq_t.clone(), table, nd, seq_lens_cpu=seq_t)), table, seq, q, nd,
          p.kv_cache.page_size, p)


def test_a_table_past_two_to_the_31_positions_takes_the_int64_host_path():
    """b * width * page >= 2**31 (a wide table, as a stride-0 view: no memory): the per-token
    arithmetic runs in int64 on the host, and the step still equals the definitions."""
    p = plan("H100")
    page = p.kv_cache.page_size
    width = (1 << 31) // page // 4 + 7
    gen = torch.Generator().manual_seed(5)
    row = torch.randint(0, 1 << 20, (1, width), generator=gen, dtype=torch.int32)
    table = row.expand(4, width)
    q, seq = [1, 1, 300, 17], [40, 1, 900, 17]
    seq_t = torch.tensor(seq, dtype=torch.int32)
    check(build_step(p, StepInput(q, seq_t.clone(), table, 2, seq_lens_cpu=seq_t)), table, seq, q, 2, page, p)


def test_a_kv_length_under_the_query_length_names_the_phase():
    p = plan("H100")
    t = torch.zeros(2, 4, dtype=torch.int32)
    for nd, what in ((2, "decode"), (1, "prefill")):
        q = [1, 1] if nd == 2 else [1, 5]
        seq = torch.tensor([0, 3] if nd == 2 else [1, 3], dtype=torch.int32)
        with pytest.raises(AdapterCallError, match=what):
            build_step(p, StepInput(q, seq.clone(), t, nd, seq_lens_cpu=seq))


def test_the_prefill_plan_gets_the_longest_query_flashinfer_would_work_out_itself():
    """plan_prefill hands FlashInfer the batch's longest query (``max_token_per_sequence``) so that its plan
    skips recomputing it with host torch ops: it must be what FlashInfer computes from the same host arrays
    (flashinfer/prefill.py plan: ``(qo_indptr_host[1:] - qo_indptr_host[:-1]).max()``). The longest KV length
    is never passed (a CUDA graph replays its recorded plan arguments: it would go stale)."""
    from types import SimpleNamespace

    from attnplan.adapter.calls._paged_wrappers import plan_prefill

    p = plan("H100", num_speculative_tokens=1)
    seen = []
    wrapper = SimpleNamespace(plan=lambda *a, **k: seen.append((a, k)))
    ctx = SimpleNamespace(params=SimpleNamespace(num_qo_heads=32, num_kv_heads=8, head_dim_qk=128, head_dim_vo=128,
                                                 causal=True), plan=p, common={"prefill": {}, "decode": {}})
    gen = torch.Generator().manual_seed(11)
    for _ in range(6):
        q, seq, nd, table = random_batch(gen, p.decode.q_len_per_req, p.kv_cache.page_size, contiguous=True)
        seq_t = torch.tensor(seq, dtype=torch.int32)
        step = build_step(p, StepInput(q, seq_t.clone(), table, nd, seq_lens_cpu=seq_t))
        for phase in ("decode", "prefill"):
            b = getattr(step, phase)
            if b is None:
                continue
            plan_prefill(ctx, wrapper, b, phase)
            args, kw = seen.pop()
            qo = args[0]
            assert kw["max_token_per_sequence"] == int((qo[1:] - qo[:-1]).max())
            assert "max_sequence_kv" not in kw


def test_a_step_from_device_table_entries_makes_its_slots_only_where_something_reads_them():
    """Without the engine's host table the device gathers each new token's page; the int64 slots are
    then made at their first read (step._Slots), not by ``build_step``: the executor's append reads the
    pages and offsets and makes none. Read, they equal the definition, made once."""
    import importlib.util
    from pathlib import Path

    from attnplan.adapter import AttentionExecutor
    from attnplan.adapter import kv_cache as kvc

    # the bench's op counter (bench/general_step_host.py OpCount), which counts the same path's launches
    spec = importlib.util.spec_from_file_location(
        "general_step_host", Path(__file__).resolve().parents[1] / "bench" / "general_step_host.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    answer = plan_for(AttentionConfig(**LLAMA, attention_backend="fa2"), simulated_node("H100"), engine="flashinfer")
    ex = AttentionExecutor(answer, device="cpu", backend="reference", check=False)
    p = ex.plan
    page = p.kv_cache.page_size
    q, seq, nd = [1, 1, 37, 5], [40, 17, 37, 90], 2
    width = max((s + page - 1) // page for s in seq)
    table = torch.randperm(len(seq) * width, dtype=torch.int32).view(len(seq), width)
    seq_t = torch.tensor(seq, dtype=torch.int32)
    with bench.OpCount() as oc:
        step = build_step(p, StepInput(q, seq_t.clone(), table, nd, seq_lens_cpu=seq_t), HostStaging("cpu"))
    assert oc.ops["index_select"] == 1 and not oc.ops["add"] and not oc.ops["mul"], oc.ops
    assert step.__dict__["_slots"] is None
    cache = ex.allocate_kv_cache(len(seq) * width)
    cache.data.zero_()
    t = sum(q)
    k = torch.randn(t, p.kv_cache.num_kv_heads, p.kv_cache.head_dim_k).to(cache.data.dtype)
    ex.append_kv(step, cache, k, k.clone())
    assert step.__dict__["_slots"] is None                  # the append read the pages and offsets
    want, _ = reference(table, seq, q, nd, page)
    assert step.slots.dtype == torch.int64 and step.slots.tolist() == want
    assert step.slots is step.slots
    # the rows went where the slots say: the same cache as an append through the slots themselves
    other = ex.allocate_kv_cache(len(seq) * width)
    other.data.zero_()
    kvc.append(other, step.slots, k, k.clone())
    assert torch.equal(other.data, cache.data) and cache.data.abs().sum() > 0
