"""A step's device half from C++ (attnplan/adapter/host_torch.cpp, built by host_torch.py): the copy, both
sides' views, the gather and the table per phase make the step host_metadata.py's Python path makes, field
for field, over random prefill, mixed and decode steps of a standard and an MLA plan - with and without the
engine's host block table, page indices on the host and expanded on the device, a contiguous block table and
a strided one (issue 41). Built for real here (g++ over the CPU torch's headers, once per source and torch
version); where it cannot build, ``status()`` says why and the Python path runs."""

from __future__ import annotations

import os
import random
import shutil

import pytest

torch = pytest.importorskip("torch")

from attnplan.adapter import StepInput, host_metadata, host_native, host_torch  # noqa: E402
from attnplan.adapter.metadata import build_step  # noqa: E402
from attnplan.errors import AdapterCallError  # noqa: E402
from attnplan.policy import AttentionConfig, plan_for, simulated_node  # noqa: E402


@pytest.fixture(scope="module")
def lib():
    mod = host_torch.library()
    if mod is None and shutil.which("c++") is None:
        pytest.skip(f"host_torch.cpp not built: {host_torch.status()['why']}")
    assert mod is not None, host_torch.status()["why"]      # a C++ compiler is here: the source must build
    return mod


def _plan(mla: bool, page: int):
    cfg = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128) if mla \
        else dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="fa2")
    a = plan_for(AttentionConfig(page_size=page, **cfg), simulated_node("H100"), engine="flashinfer")
    assert a.ok, a.violations
    return a.plan


def _input(rnd: random.Random, page: int, host_table: bool, strided: bool) -> StepInput:
    nd, npre = rnd.choice([(0, rnd.randint(1, 6)), (rnd.randint(1, 30), rnd.randint(1, 4)), (rnd.randint(1, 30), 0)])
    top = 40 * page
    q = [1] * nd + [rnd.randint(1, top // 5) for _ in range(npre)]
    seq = [rnd.randint(1, top) for _ in range(nd)] + [x + rnd.choice([0, rnd.randint(1, top // 2)]) for x in q[nd:]]
    width = max(-(-s // page) for s in seq) + rnd.randint(0, 3)
    whole = torch.randperm(len(q) * (width + 5) + 50, dtype=torch.int32)[: len(q) * (width + 5)].view(len(q), width + 5)
    table = whole[:, 2:2 + width] if strided else whole[:, :width].contiguous()
    seq_t = torch.tensor(seq, dtype=torch.int32)
    return StepInput(q, seq_t.clone(), table, nd, seq_lens_cpu=seq_t,
                     block_table_cpu=table.clone() if host_table else None)


def _as_lists(x):
    if isinstance(x, torch.Tensor):
        return (str(x.dtype), x.tolist())
    if isinstance(x, (list, tuple)):
        return [_as_lists(y) for y in x]
    return x


def _fields(step) -> dict:
    out = {"kind": step.kind, "num_tokens": step.num_tokens, "slots": _as_lists(step.slots),
           "slot_pages": _as_lists(step.slot_pages), "slot_offsets": _as_lists(step.slot_offsets),
           "extra": {k: _as_lists(v) for k, v in step.extra.items() if k != "staging_slot"}}
    for ph in ("decode", "prefill"):
        b = getattr(step, ph)
        out[ph] = None if b is None else {k: _as_lists(v) for k, v in vars(b).items()}
    return out


@pytest.mark.parametrize("mla", [False, True], ids=["gqa", "mla"])
@pytest.mark.parametrize("host_table", [False, True], ids=["device-table", "host-table"])
@pytest.mark.parametrize("pages_on", ["host", "device"])
@pytest.mark.parametrize("host_half", ["in-module", "numpy"])
def test_the_cpp_views_make_the_python_paths_step(lib, monkeypatch, mla, host_table, pages_on, host_half):
    """``in-module``: the module's ``step`` (host_step.c compiled in, the device half in the same call) against
    ctypes' host_step.c and the Python twin; ``numpy`` (ATTNPLAN_NATIVE_HOST=0): numpy's host half, then the
    module's ``step_views`` against the Python twin."""
    if pages_on == "device":
        monkeypatch.setattr(host_metadata, "HOST_KV_ENTRIES", 0)
    if host_half == "numpy":
        monkeypatch.setattr(host_native, "library", lambda: None)
    else:
        assert host_native.library() is not None, host_native.status()["why"]
    page = 16
    plan = _plan(mla, page)
    rnd = random.Random(f"{mla}{host_table}{pages_on}")
    calls = []

    class Counting:                        # the C++ path taken, not the Python twin
        def step_views(self, *a):
            calls.append("step_views")
            return lib.step_views(*a)

        def step(self, *a):
            calls.append("step")
            return lib.step(*a)
    want = []
    for i in range(16):
        inp = _input(rnd, page, host_table, strided=i % 2 == 1)
        # the module's step called again where the first buffer was too small; numpy's half retries in Python
        want += ["step"] * (1 + (i % 4 >= 2)) if host_half == "in-module" else ["step_views"]
        got = []
        for views in (Counting(), None):
            st = host_metadata.HostStaging("cpu")
            assert st.views is None           # a CPU executor's staging never builds the module
            st.views = views
            if i % 4 >= 2:
                st.SMALLEST = 1               # the first buffer too small: the call again, into a larger one
            got.append(_fields(build_step(plan, inp, st)))
        assert got[0] == got[1]
    assert calls == want


@pytest.mark.parametrize("case", ["decode-query", "short-kv", "past-the-row"])
def test_the_modules_step_refuses_as_host_step_c_does(lib, monkeypatch, case):
    """A step ap_step refuses raises, through the module's ``step``, the message the ctypes path raises."""
    assert host_native.library() is not None, host_native.status()["why"]
    plan = _plan(False, 16)
    table = torch.arange(40, dtype=torch.int32).view(4, 10)
    q, seq = {"decode-query": ([1, 2, 30, 5], [9, 3, 40, 7]), "short-kv": ([1, 1, 30, 5], [9, 3, 20, 7]),
              "past-the-row": ([1, 1, 30, 5], [9, 3, 200, 7])}[case]
    inp = StepInput(q, torch.tensor(seq, dtype=torch.int32), table, 2, seq_lens_cpu=torch.tensor(seq, dtype=torch.int32))
    msgs = []
    for views in (lib, None):
        st = host_metadata.HostStaging("cpu")
        st.views = views
        with pytest.raises(AdapterCallError) as e:
            build_step(plan, inp, st)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1], msgs


def test_views_are_views_of_one_copy(lib):
    host = torch.arange(10, dtype=torch.int32)
    table = torch.arange(12, dtype=torch.int32).view(3, 4)
    hv, dv, entries, kv, tables = lib.step_views(host, [3, 2, 2], table, True, [1, 2], [1, 2])
    assert [v.tolist() for v in hv] == [[0, 1, 2], [3, 4], [5, 6]]
    assert all(v.untyped_storage().data_ptr() == host.untyped_storage().data_ptr() for v in hv)
    d = dv[0].untyped_storage().data_ptr()
    assert d != host.untyped_storage().data_ptr() and all(v.untyped_storage().data_ptr() == d for v in dv)
    assert entries.tolist() == [0] and [k.tolist() for k in kv] == [[1, 2]]       # table entries 0, 1, 2
    assert [t.tolist() for t in tables] == [[[0, 1, 2, 3]], [[4, 5, 6, 7], [8, 9, 10, 11]]]
    _, _, none, kv, whole = lib.step_views(host, [3], table, False, [3], [])
    assert none is None and kv == [] and len(whole) == 1 and whole[0] is table      # the table itself, as in Python


def test_the_switch_keeps_the_python_path(monkeypatch):
    monkeypatch.setenv("ATTNPLAN_NATIVE_TORCH", "0")
    host_torch._reset()
    try:
        st = host_torch.status()
        assert st["compiled"] is False and "ATTNPLAN_NATIVE_TORCH=0" in st["why"]
    finally:
        host_torch._reset()


def test_the_build_runs_in_a_child_and_leaves_this_process_path_alone(monkeypatch, tmp_path):
    # torch's cpp_extension finds ninja on PATH only: the child gets the pip package's ninja first on its PATH, the
    # engine process keeps its own (host_torch._BUILD); the parent imports what the child built, once
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler here")
    import subprocess

    monkeypatch.setenv("ATTNPLAN_CACHE_DIR", str(tmp_path))
    path = os.environ.get("PATH", "")
    children = []
    real = subprocess.run

    def run(cmd, **kw):
        children.append((cmd, kw["env"]["PATH"], os.environ.get("PATH", "")))
        return real(cmd, **kw)
    monkeypatch.setattr(subprocess, "run", run)
    host_torch._reset()
    try:
        mod = host_torch.library()
        assert mod is not None, host_torch.status()["why"]
        assert len(children) == 1 and children[0][0][1] == "-c" and children[0][2] == path
        ninja = pytest.importorskip("ninja")
        assert children[0][1].startswith(ninja.BIN_DIR + os.pathsep)
        assert os.environ.get("PATH", "") == path and host_torch.status()["path"].startswith(str(tmp_path))
        host_torch._reset()
        assert host_torch.library() is not None and len(children) == 1          # loaded, not built again
        # other flags: another build, and one that fails says why and leaves the Python path
        monkeypatch.setattr(host_torch, "CFLAGS", ["-O3", "-fno-such-flag-attnplan"])
        host_torch._reset()
        assert host_torch.library() is None and "building host_torch.cpp failed" in host_torch.status()["why"]
        assert os.environ.get("PATH", "") == path
    finally:
        host_torch._reset()
