"""Issue 41: the decode metadata kernel writing the step's new K/V rows itself (``decode_kernel.py``
with ``APPEND``), held to the torch path it replaces - ``DecodeLayout.compute_torch`` then
``kv_cache.append`` - byte for byte: every metadata output and the whole cache after the step.

The kernel needs triton, which the CPU venv does not ship: these tests run where triton imports,
on a CUDA device or, on a CPU machine, under Triton's interpreter - e.g. triton 3.5.1's wheel and
numpy 2.2's unpacked into two directories (the 3.5 interpreter turns 1-element arrays into ints,
which numpy 2.4 refuses), then
``TRITON_INTERPRET=1 PYTHONPATH=NUMPY_DIR:TRITON_DIR .venv/bin/python -m pytest tests/test_fused_append.py``.
The choice of path (``fused_target``) needs no triton and runs everywhere. The GPU twin is
tests/gpu/test_decode_graphs_gpu.py."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from attnplan.adapter import kv_cache as kvc  # noqa: E402
from attnplan.adapter.decode_layout import DecodeLayout  # noqa: E402
from attnplan.policy import KVCachePlan  # noqa: E402


def _plan(layout="NHD", page=16, storage="bfloat16", view=None, mla=False, heads=4, dim=32, **kw) -> KVCachePlan:
    return KVCachePlan(layout=layout, page_size=page, kv_storage_dtype=storage, kv_view_dtype=view or storage,
                       num_kv_heads=1 if mla else heads, head_dim_k=dim, head_dim_v=dim - 64 if mla else dim,
                       mla=mla, **kw)


def _kernel():
    """``decode_kernel.decode_metadata`` and the device to run it on, or a skip saying why not."""
    try:
        import triton  # noqa: F401
    except ImportError:
        pytest.skip("triton is not installed here (the CPU venv has none); the GPU test covers the kernel")
    cuda = torch.cuda.is_available()
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no CUDA device: set TRITON_INTERPRET=1 to run the kernel under Triton's interpreter")
    from attnplan.adapter.decode_kernel import decode_metadata

    return decode_metadata, "cuda" if cuda else "cpu"


# -- which caches take the fused launch (no triton needed) ------------------------------------------
@pytest.mark.parametrize("storage,view,fused", [("bfloat16", None, True), ("float16", None, True),
                                                ("uint8", "float8_e4m3fn", False), ("uint8", "float8_e5m2", False),
                                                ("float32", None, False)])
def test_only_caches_that_store_the_rows_as_they_come_take_the_fused_launch(storage, view, fused):
    plan = _plan(storage=storage, view=view)
    cache = kvc.allocate(plan, 4, "cpu")
    k = torch.zeros(3, 4, 32, dtype=cache.data.dtype if fused else torch.bfloat16)
    got = kvc.fused_target(cache, k, k.clone())
    assert (got is not None) is fused
    if fused:
        # Scales other than 1 divide before the cast: append's job, not a copy.
        assert kvc.fused_target(cache, k, k.clone(), k_scale=0.5) is None
        # Rows of another shape than the cache's heads x dim are refused, not written askew.
        assert kvc.fused_target(cache, k[:, :2], k[:, :2].clone()) is None
        # Rows of another dtype need a rounding cast: append's (Tensor.to), not the kernel's.
        other = torch.float16 if cache.data.dtype == torch.bfloat16 else torch.bfloat16
        assert kvc.fused_target(cache, k.to(other), k.to(other)) is None


def test_nvfp4_cache_keeps_the_quantizing_append():
    plan = _plan(storage="uint8", view="nvfp4", nvfp4_scale_dtype="float8_e4m3fn", nvfp4_block_size=16)
    cache = kvc.allocate(plan, 2, "cpu")
    k = torch.zeros(1, 4, 32, dtype=torch.bfloat16)
    assert kvc.fused_target(cache, k, k.clone()) is None


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_fused_strides_name_the_slot_append_writes(layout):
    """The strides the kernel gets address exactly the element ``append`` writes: page p, K/V i,
    offset o, head h, dim d."""
    plan = _plan(layout=layout)
    cache = kvc.allocate(plan, 5, "cpu", zeroed=True)
    k = torch.zeros(1, 4, 32, dtype=torch.bfloat16)
    f = kvc.fused_target(cache, k, k.clone())
    p, i, o, h, d = 3, 1, 7, 2, 9
    flat = cache.data.view(-1)
    flat[p * f.strides[0] + i * f.strides[1] + o * f.strides[2] + h * f.strides[3] + d * f.strides[4]] = 1.0
    ref = kvc.gather(cache, torch.tensor([p]), 16)[i]          # [L, H, D] whatever the layout
    assert ref[o, h, d] == 1.0 and float(ref.abs().sum()) == 1.0


# -- the kernel against the torch path ------------------------------------------------------------
def _case(device, *, layout, page, q, mla, b, rows_dtype=torch.bfloat16, storage="bfloat16", seed=0):
    gen = torch.Generator().manual_seed(seed)
    plan = _plan(layout=layout, page=page, storage=storage, mla=mla, dim=96 if mla else 32)
    # Lengths on, just past and just before page boundaries, and the shortest one (q itself).
    pool = [q, page, page + 1, 2 * page - 1, 3 * page, 5 * page + 2, 7 * page - 1]
    seq = torch.tensor([max(q, pool[(i * 3 + seed) % len(pool)]) for i in range(b)], dtype=torch.int32)
    width = int(((seq + page - 1) // page).max()) + 1
    n_pages = b * width + 3
    wide = torch.randperm(n_pages, generator=gen)[: b * (width + 2)]
    wide = torch.cat([wide, torch.zeros(b * (width + 2) - wide.numel(), dtype=wide.dtype)])
    table = wide.view(b, width + 2)[:, :width].int()             # not contiguous: a wider engine table
    t = b * q
    if mla:
        k = torch.randn(t, 96, generator=gen).to(rows_dtype)
        v = None
    else:
        k = torch.randn(t, 4, 32, generator=gen).to(rows_dtype)
        v = torch.randn(2 * t, 4, 32, generator=gen).to(rows_dtype)[::2]     # strided rows
    caches = []
    for _ in range(2):
        c = kvc.allocate(plan, n_pages, "cpu")
        c.data.copy_(torch.randn(c.data.shape, generator=torch.Generator().manual_seed(seed + 1)).to(c.data.dtype))
        c.data = c.data.to(device)
        caches.append(c)
    seq, table = seq.to(device), table.to(device)
    k = k.to(device)
    v = None if v is None else v.to(device)
    return plan, seq, table, width, k, v, caches


CASES = [dict(layout=lay, page=page, q=q, mla=False, b=b) for lay in ("NHD", "HND") for page in (16, 32)
         for q, b in ((1, 5), (3, 4))]
CASES += [dict(layout="NHD", page=page, q=q, mla=True, b=b) for page in (16, 32) for q, b in ((1, 6), (3, 3))]
CASES += [dict(layout="HND", page=16, q=2, mla=False, b=3, rows_dtype=torch.float16, storage="float16"),
          dict(layout="NHD", page=32, q=1, mla=True, b=3, rows_dtype=torch.float16, storage="float16")]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("indices", [True, False])
def test_fused_launch_equals_metadata_then_append(case, indices):
    decode_metadata, device = _kernel()
    plan, seq, table, width, k, v, (fused_cache, ref_cache) = _case(device, **case)
    b, q = case["b"], case["q"]
    fused = DecodeLayout(b, q, plan.page_size, width, device, bound=(seq, table), indices=indices)
    ref = DecodeLayout(b, q, plan.page_size, width, device, bound=(seq, table), indices=indices)
    args = kvc.fused_target(fused_cache, k, v)
    assert args is not None
    decode_metadata(fused, args)
    ref.compute_append(ref_cache, k, v)                 # fused=None: compute_torch (CPU) + append
    for name in ("slots", "slot_pages", "slot_offsets", "kv_indptr", "last_page_len"):
        assert torch.equal(getattr(fused, name), getattr(ref, name)), name
    if indices:
        n = int(ref.kv_indptr[-1])
        assert torch.equal(fused.kv_indices[:n], ref.kv_indices[:n])
    # Byte-equal caches: the new rows where append put them, every other byte untouched.
    assert torch.equal(fused_cache.data.view(torch.int16), ref_cache.data.view(torch.int16))
    # And the rows did land: the reference cache differs from its starting contents.
    start = kvc.allocate(plan, fused_cache.num_pages, "cpu")
    start.data.copy_(torch.randn(start.data.shape, generator=torch.Generator().manual_seed(1)).to(start.data.dtype))
    assert not torch.equal(ref_cache.data.cpu().view(torch.int16), start.data.view(torch.int16))


def test_page_entries_outside_the_cache_write_nothing():
    """A block-table entry past the cache (a bad table) must not write out of bounds: the token is
    skipped; the metadata is still the table's."""
    decode_metadata, device = _kernel()
    plan = _plan(page=16)
    cache = kvc.allocate(plan, 4, "cpu", zeroed=True)
    cache.data = cache.data.to(device)
    seq = torch.tensor([5, 20], dtype=torch.int32, device=device)
    table = torch.tensor([[1, 0], [2, 9]], dtype=torch.int32, device=device)     # page 9 of 4
    k = torch.ones(2, 4, 32, dtype=torch.bfloat16, device=device)
    lay = DecodeLayout(2, 1, 16, 2, device, bound=(seq, table))
    decode_metadata(lay, kvc.fused_target(cache, k, k.clone()))
    assert lay.slot_pages.tolist() == [1, 9] and lay.slots.tolist() == [1 * 16 + 4, 9 * 16 + 3]
    written = cache.data.view(4, -1).float().abs().sum(1).tolist()
    assert written == [0.0, 2 * 4 * 32, 0.0, 0.0]


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_cpu_layout_keeps_the_torch_path_and_writes_each_row_at_its_slot(layout, monkeypatch):
    """Without a Triton kernel (a CPU device) ``compute_append`` is the metadata ops then
    ``kv_cache.append``: each request's new rows land at the position its length says, in the page
    its block-table row names - checked here against a naive walk, not against the same code."""
    plan = _plan(layout=layout, page=4)
    cache = kvc.allocate(plan, 12, "cpu", zeroed=True)
    seq = torch.tensor([5, 8, 2], dtype=torch.int32)
    table = torch.tensor([[7, 2, 0], [1, 9, 0], [4, 0, 0]], dtype=torch.int32)
    k = torch.randn(6, 4, 32).bfloat16()
    v = torch.randn(6, 4, 32).bfloat16()
    lay = DecodeLayout(3, 2, 4, 3, "cpu", bound=(seq, table))
    assert lay.fused_append(cache, k, v) is None
    monkeypatch.setenv("ATTNPLAN_FUSED_APPEND", "0")
    assert lay.fused_append(cache, k, v) is None
    lay.compute_append(cache, k, v)
    for r, s in enumerate(seq.tolist()):
        for i in range(2):
            pos = s - 2 + i
            got_k, got_v = kvc.gather(cache, table[r].long(), s)
            assert torch.equal(got_k[pos].bfloat16(), k[r * 2 + i]) and torch.equal(got_v[pos].bfloat16(), v[r * 2 + i])
    assert lay.slots.tolist() == [int(table[r, p // 4]) * 4 + p % 4 for r, s in enumerate(seq.tolist())
                                  for p in (s - 2, s - 1)]
