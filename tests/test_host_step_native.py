"""The step metadata's host arithmetic in C (attnplan/adapter/host_step.c, loaded by host_native.py) writes
what the numpy path writes, byte for byte, over random prefill, mixed and decode steps: page sizes that are
and are not powers of two, with and without the engine's host block table, page indices on the host and
(past HOST_KV_ENTRIES) on the device, host lengths as int32 / int64 tensors and as lists (issue 41).
Without a C compiler the numpy path runs and ``status()`` says why."""

from __future__ import annotations

import itertools
import random

import pytest

torch = pytest.importorskip("torch")

from attnplan.adapter import StepInput, host_metadata, host_native  # noqa: E402
from attnplan.adapter.metadata import build_step  # noqa: E402
from attnplan.errors import AdapterCallError  # noqa: E402
from attnplan.policy import AttentionConfig, plan_for, simulated_node  # noqa: E402

native = host_native.library()
needs_native = pytest.mark.skipif(native is None, reason=f"host_step.c not built: {host_native.status()['why']}")


def _plan(page: int, **cfg):
    a = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="fa2",
                                 page_size=page, **cfg), simulated_node("H100"), engine="flashinfer")
    assert a.ok, a.violations
    return a.plan


def _step(rnd: random.Random, q_dec: int, page: int, host_table: bool, seq_kind: str):
    nd, npre = rnd.choice([(0, rnd.randint(1, 6)), (rnd.randint(1, 40), rnd.randint(1, 4)), (rnd.randint(1, 40), 0)])
    top = min(5000, 40 * page)              # a block table of at most a few hundred pages a row
    q = [q_dec] * nd + [rnd.randint(1, top // 5) for _ in range(npre)]
    seq = [rnd.randint(q_dec, top) for _ in range(nd)] + [x + rnd.choice([0, rnd.randint(1, top // 2)]) for x in q[nd:]]
    width = max(-(-s // page) for s in seq) + rnd.randint(0, 3)
    table = torch.randperm(len(q) * width + 50, dtype=torch.int32)[: len(q) * width].view(len(q), width)
    seq_cpu = {"int32": torch.tensor(seq, dtype=torch.int32), "int64": torch.tensor(seq, dtype=torch.int64),
               "list": list(seq)}[seq_kind]
    return StepInput(q, torch.tensor(seq, dtype=torch.int32), table, nd, seq_lens_cpu=seq_cpu,
                     block_table_cpu=table.clone() if host_table else None)


class _ZeroedStaging(host_metadata.HostStaging):
    """CPU staging whose buffers start zeroed: past the layout both paths' buffers hold the same bytes."""

    def take(self, n):
        buf, slot = super().take(n)
        return buf.zero_(), slot


def _both(monkeypatch, plan, inp):
    """(native step, numpy step, their staging buffers' bytes)."""
    steps = []
    for lib in (native, None):
        monkeypatch.setattr(host_native, "library", lambda lib=lib: lib)
        step = build_step(plan, inp, _ZeroedStaging("cpu"))
        batch = step.prefill or step.decode
        whole = torch.empty(0, dtype=torch.uint8).set_(batch.qo_indptr_cpu.untyped_storage())
        steps.append((step, whole.numpy().tobytes()))
    return steps


def _layout_bytes(plan, inp):
    """The staging buffer's bytes after one step of ``plan`` (zeroed past the layout), on the current path."""
    step = build_step(plan, inp, _ZeroedStaging("cpu"))
    batch = step.prefill or step.decode
    return torch.empty(0, dtype=torch.uint8).set_(batch.qo_indptr_cpu.untyped_storage()).numpy().tobytes()


def _fields(step):
    out = {"num_tokens": step.num_tokens, "kind": step.kind, "slots": step.slots.tolist()}
    for ph in ("decode", "prefill"):
        b = getattr(step, ph)
        if b is None:
            out[ph] = None
            continue
        out[ph] = {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in vars(b).items()}
    return out


@needs_native
@pytest.mark.parametrize("page", [16, 64, 1, 12])
@pytest.mark.parametrize("host_table", [False, True], ids=["device-table", "host-table"])
@pytest.mark.parametrize("seq_kind", ["int32", "int64", "list"])
def test_native_writes_the_numpy_bytes(monkeypatch, page, host_table, seq_kind):
    rnd = random.Random(f"{page}{host_table}{seq_kind}")
    for spec in (0, 2):
        plan = _plan(page, num_speculative_tokens=spec) if spec else _plan(page)
        for _ in range(12):
            inp = _step(rnd, plan.decode.q_len_per_req, page, host_table, seq_kind)
            (a, bytes_a), (b, bytes_b) = _both(monkeypatch, plan, inp)
            assert bytes_a == bytes_b
            assert _fields(a) == _fields(b)


@needs_native
def test_native_with_page_indices_expanded_on_the_device(monkeypatch):
    monkeypatch.setattr(host_metadata, "HOST_KV_ENTRIES", 0)
    rnd = random.Random(7)
    plan = _plan(16)
    for _ in range(10):
        inp = _step(rnd, 1, 16, False, "int32")
        (a, bytes_a), (b, bytes_b) = _both(monkeypatch, plan, inp)
        assert bytes_a == bytes_b and _fields(a) == _fields(b)
        assert a.extra == b.extra


@needs_native
def test_native_names_the_short_request_as_numpy_does(monkeypatch):
    plan = _plan(16)
    table = torch.arange(40, dtype=torch.int32).view(4, 10)
    inp = StepInput([1, 1, 30, 5], torch.tensor([9, 3, 20, 7], dtype=torch.int32), table, 2,
                    seq_lens_cpu=torch.tensor([9, 3, 20, 7], dtype=torch.int32))
    msgs = []
    for lib in (native, None):
        monkeypatch.setattr(host_native, "library", lambda lib=lib: lib)
        with pytest.raises(AdapterCallError) as e:
            build_step(plan, inp)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] and msgs[0].startswith("prefill:")


def test_a_request_longer_than_its_table_row_is_refused_on_both_paths(monkeypatch):
    # host_step.c reads the host block table through a pointer: a request whose pages overrun its row would
    # read past it, so the step is refused first (numpy's gather would raise IndexError, the device's assert)
    plan = _plan(16)
    table = torch.arange(8, dtype=torch.int32).view(2, 4)           # 4 pages = 64 tokens a request
    seq = torch.tensor([64, 65], dtype=torch.int32)
    inp = StepInput([1, 5], seq, table, 1, seq_lens_cpu=seq.clone(), block_table_cpu=table.clone())
    for lib in (native, None):
        monkeypatch.setattr(host_native, "library", lambda lib=lib: lib)
        with pytest.raises(AdapterCallError, match="needs 5 pages of 16 tokens; the block table holds 4"):
            build_step(plan, inp)


def test_without_a_compiler_the_numpy_path_runs_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNPLAN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    host_native._reset()
    try:
        st = host_native.status()
        assert st["compiled"] is False and "no-such-cc" in st["why"]
        plan = _plan(16)
        table = torch.arange(20, dtype=torch.int32).view(2, 10)
        inp = StepInput([1, 7], torch.tensor([5, 9], dtype=torch.int32), table, 1,
                        seq_lens_cpu=torch.tensor([5, 9], dtype=torch.int32))
        step = build_step(plan, inp)
        # request 0 decodes at KV position 4 (entry 0, offset 4); request 1's 7 tokens sit at 2..8 of row 1
        assert step.slots.tolist() == [4] + [10 * 16 + p for p in range(2, 9)]
    finally:
        host_native._reset()


def test_the_switch_keeps_the_numpy_path(monkeypatch):
    monkeypatch.setenv("ATTNPLAN_NATIVE_HOST", "0")
    host_native._reset()
    try:
        st = host_native.status()
        assert st["compiled"] is False and "ATTNPLAN_NATIVE_HOST=0" in st["why"]
    finally:
        host_native._reset()


@needs_native
def test_the_library_is_built_once_per_source_and_checks_its_abi(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNPLAN_CACHE_DIR", str(tmp_path))
    host_native._reset()
    try:
        lib = host_native.library()
        assert lib is not None and lib.ap_abi() == host_native.ABI
        built = list(tmp_path.glob("host_step/*/host_step.so"))
        assert len(built) == 1 and host_native.status()["path"] == str(built[0])
        mtime = built[0].stat().st_mtime_ns
        host_native._reset()
        assert host_native.library() is not None and built[0].stat().st_mtime_ns == mtime   # loaded, not rebuilt
        # other flags (host_native.FLAGS) are another build beside it, not the cached one
        monkeypatch.setattr(host_native, "FLAGS", (*host_native.FLAGS, "-DATTNPLAN_FLAGS_TEST"))
        host_native._reset()
        assert host_native.library() is not None and len(list(tmp_path.glob("host_step/*/host_step.so"))) == 2
        monkeypatch.setattr(host_native, "ABI", host_native.ABI + 1)
        host_native._reset()
        assert host_native.library() is None and "ABI" in host_native.status()["why"]
    finally:
        host_native._reset()


@pytest.mark.parametrize("host_table", [False, True], ids=["device-table", "host-table"])
@pytest.mark.parametrize("lib_kind", ["c", "numpy"])
def test_a_general_step_carries_each_new_tokens_page_and_offset(monkeypatch, host_table, lib_kind):
    # so that the per-layer append launches no division of the slots (kv_cache.append): the two parts agree
    # with the slots, and an append through them writes the cache an append through the slots writes
    if lib_kind == "c" and native is None:
        pytest.skip(f"host_step.c not built: {host_native.status()['why']}")
    from attnplan.adapter import kv_cache

    monkeypatch.setattr(host_native, "library", lambda: native if lib_kind == "c" else None)
    rnd = random.Random(f"parts{host_table}{lib_kind}")
    page = 16
    plan = _plan(page)
    for _ in range(8):
        inp = _step(rnd, 1, page, host_table, "int32")
        step = build_step(plan, inp)
        assert step.slot_pages is not None and step.slot_offsets is not None
        slots = step.slots.tolist()
        assert (step.slot_pages.long() * page + step.slot_offsets.long()).tolist() == slots
        assert all(0 <= o < page for o in step.slot_offsets.tolist())
        pages = int(inp.block_table.max()) + 1
        k = torch.randn(step.num_tokens, 8, 128, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        caches = []
        for parts in ((step.slot_pages, step.slot_offsets), None):
            cache = kv_cache.allocate(plan.kv_cache, pages, "cpu", zeroed=True)
            kv_cache.append(cache, step.slots, k, v, pages_offsets=parts)
            caches.append(cache.data)
        assert torch.equal(caches[0], caches[1]) and caches[0].abs().sum() > 0


def _mla_plan(page: int):
    a = plan_for(AttentionConfig(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                 v_head_dim=128, page_size=page),
                 simulated_node("H100"), engine="flashinfer")
    assert a.ok, a.violations
    assert a.plan.kv_cache.mla
    return a.plan


@pytest.mark.parametrize("lib_kind", ["c", "numpy"])
@pytest.mark.parametrize("page", [64, 12])
@pytest.mark.parametrize("pages_on", ["host", "device"])
def test_an_mla_prefill_step_brings_its_context_in_the_one_copy(monkeypatch, lib_kind, page, pages_on):
    # executor._plan_mla_prefill plans the ragged context part over each prefill request's cached context, and
    # mla_prefill merges it where a token's request has some: those arrays come with the step's one copy
    # (host_step.c fill_context), equal to their definitions, the same bytes from C and numpy
    if lib_kind == "c" and native is None:
        pytest.skip(f"host_step.c not built: {host_native.status()['why']}")
    if pages_on == "device":                          # the context parts then follow the expansion's two
        monkeypatch.setattr(host_metadata, "HOST_KV_ENTRIES", 0)
    plan = _mla_plan(page)
    rnd = random.Random(f"mla{page}{pages_on}")
    for _ in range(12):
        inp = _step(rnd, plan.decode.q_len_per_req, page, rnd.random() < 0.5, "int32")
        nd = inp.num_decodes
        if lib_kind == "c":
            (a, bytes_a), (b, bytes_b) = _both(monkeypatch, plan, inp)
            assert bytes_a == bytes_b and _fields(a) == _fields(b)
            assert {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in a.extra.items()} == \
                   {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in b.extra.items()}
        else:
            monkeypatch.setattr(host_native, "library", lambda: None)
            a = build_step(plan, inp)
        if len(inp.query_lens) == nd:
            assert "context_lens" not in a.extra                          # decode-only: no context parts
            continue
        q, seq = list(inp.query_lens[nd:]), inp.seq_lens_cpu.tolist()[nd:]
        ctx = [s - n for s, n in zip(seq, q)]
        x = a.extra
        assert x["new_lens"].tolist() == q
        assert x["any_context"] == (sum(ctx) > 0) and x["context_tokens"] == sum(ctx)
        assert x["longest_context"] == max(ctx)
        if sum(ctx):
            assert x["context_lens"].tolist() == x["context_lens_dev"].tolist() == ctx
            assert x["context_indptr_cpu"].tolist() == x["context_indptr"].tolist() == [0, *itertools.accumulate(ctx)]
            assert x["has_context"].dtype == torch.bool
            assert x["has_context"].tolist() == [c > 0 for c, n in zip(ctx, q) for _ in range(n)]
        else:
            # only the context part and the merge read the context parts: a step without context brings none,
            # and its layout is the same step's without MLA (the new part's KV lengths are the prefill's seq lens)
            assert all(x[k] is None for k in ("context_lens", "context_lens_dev", "context_indptr_cpu",
                                              "context_indptr", "has_context"))
            assert x["new_lens"] is a.prefill.seq_lens_cpu
            plain = plan.model_copy(update={"kv_cache": plan.kv_cache.model_copy(update={"mla": False})})
            assert _layout_bytes(plain, inp) == _layout_bytes(plan, inp)
