"""Prefill and mixed steps plan with FlashInfer's scheduler call alone once that was learned from the
wrapper's own whole plans and checked on it (issue 41; attnplan/adapter/general_plans.py).

Held on the CPU with the real executor (``plan_step``: the step metadata, the backend's plan of each
phase), with FlashInfer's eager wrappers replaced by stand-ins shaped as flashinfer/prefill.py and
decode.py ``plan`` (their Python part - host copies, counts, a kept KV-length buffer, device copies of
the indptrs - around one scheduler call whose schedule and plan info depend on every count it is
handed). After every step the wrapper the step runs on must hold exactly what a fresh wrapper planned
whole with the same arguments holds: every attribute's value, the plan info and the schedule. On the
H100 the same path runs against the float32 reference in tests/gpu/test_adapter_gpu.py.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flashinfer")

from attnplan.adapter import StepInput  # noqa: E402
from attnplan.adapter.general_plans import LEARN_STEPS, replay_of  # noqa: E402
from graph_stand_ins import executor  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)


def _schedule(qo, kv_indptr, kv_lens, rows, batch, *consts):
    """The stand-in scheduler's schedule: a function of every host array and count it is handed."""
    out = [int(x) * 5 + 1 for x in qo] + [int(x) * 3 for x in kv_indptr] + [int(x) % 11 for x in kv_lens]
    return out + [rows, batch, sum(int(c) for c in consts if isinstance(c, (int, bool)))]


def _scheduler(calls):
    def plan(float_ws, int_ws, pinned, qo, kv_indptr, kv_lens, rows, batch, *consts):
        calls.append(1)
        sched = _schedule(qo, kv_indptr, kv_lens, rows, batch, *consts)
        pinned[: len(sched)] = torch.tensor(sched, dtype=torch.int32)
        int_ws[: len(sched)].copy_(pinned[: len(sched)])     # FlashInfer: cudaMemcpyAsync from the pinned buffer
        return [rows > 64, batch % 3, 7]                      # a plan info that changes with the counts
    return plan


class EagerWrapper:
    """flashinfer's BatchPrefillWithPagedKVCacheWrapper / BatchDecodeWithPagedKVCacheWrapper ``plan`` in
    eager mode, reduced to its kinds of state: counts, a refilled KV-length buffer, device copies of the
    host indptrs, the page indices as given, the host lengths kept, one scheduler call."""

    def __init__(self, *, odd=None, raise_at=None):
        self.device = torch.device("cpu")
        self._float_workspace_buffer = torch.zeros(64, dtype=torch.uint8)
        self._int_workspace_buffer = torch.zeros(4096, dtype=torch.int32)
        self._pin_memory_int_workspace_buffer = torch.zeros(4096, dtype=torch.int32)
        self._kv_lens_buffer = torch.zeros(64, dtype=torch.int32)
        self.calls: list[int] = []
        self._module = SimpleNamespace(plan=_scheduler(self.calls))
        self._odd = odd                    # a test's attribute no step value names
        self._raise_at = raise_at
        self.stats = SimpleNamespace(whole=0)     # not the wrapper's state: one object throughout

    def plan(self, *args, seq_lens=None, max_token_per_sequence=None, window_left=-1, **kwargs):
        self.stats.whole += 1
        if max_token_per_sequence is None:                   # decode.py: (indptr, indices, last_page_len, ...)
            kv_indptr, indices, last, heads, kv_heads, head_dim, page = args[:7]
            batch = len(last)
            qo = torch.arange(batch + 1, dtype=torch.int32)  # _get_range_buf: a new host tensor
            max_q = 1
        else:                                                # prefill.py: (qo_indptr, indptr, indices, last, ...)
            qo, kv_indptr, indices, last, heads, kv_heads, head_dim, page = args[:8]
            batch = len(qo) - 1
            max_q = max_token_per_sequence
        qo_host, kv_host = qo.to("cpu"), kv_indptr.to("cpu")
        self._batch_size = batch
        self._qo_indptr_last = int(qo_host[-1])
        self._max_q_len = max_q
        kv_lens = seq_lens.cpu().flatten().to(torch.int32)
        self._kv_lens_buffer[: len(kv_lens)].copy_(kv_lens)
        self._max_kv_len = int(kv_lens.max())
        self._qo_indptr_buf = qo.clone()                     # .to(device): a device copy
        self._paged_kv_indptr_buf = kv_indptr.clone()
        self._paged_kv_indices_buf = indices                 # already on the device: itself
        self._paged_kv_last_page_len_buf = last.clone()
        self._seq_lens_kv = seq_lens
        self._window_left = window_left
        self._cached_module = self._module
        if self._odd is not None:
            self._odd_state = self._odd(kv_host)
        if self._raise_at is not None and int(kv_lens.max()) >= self._raise_at:
            self._module.plan = _raising
        self._plan_info = self._cached_module.plan(
            self._float_workspace_buffer, self._int_workspace_buffer, self._pin_memory_int_workspace_buffer, qo_host,
            kv_host, kv_lens, self._qo_indptr_last, batch, heads, kv_heads, page, False, head_dim, head_dim, True,
            window_left)

    def run(self, *args, **kwargs):
        self.runs = getattr(self, "runs", 0) + 1


def _raising(*args):
    raise RuntimeError("a scheduler that raises at this length")


def _state(w, batch, sched):
    """What a wrapper holds after a plan of ``batch``, as comparable values: every attribute, the plan
    info, the schedule's ``sched`` entries and the refilled lengths (past them: earlier plans' leftovers,
    which no kernel reads, in FlashInfer's buffers too)."""
    skip = {"calls", "stats", "_module", "_odd", "_raise_at", "runs", "_pin_memory_int_workspace_buffer",
            "_cached_module"}
    out = {}
    for k, v in vars(w).items():
        if k in skip:
            continue
        out[k] = v.tolist() if isinstance(v, torch.Tensor) else v
    out["_int_workspace_buffer"] = out["_int_workspace_buffer"][:sched]
    if "_kv_lens_buffer" in out:                           # the paged wrappers' (the ragged one keeps none)
        out["_kv_lens_buffer"] = out["_kv_lens_buffer"][: batch.num_reqs]
    return out


def _whole_reference(ex, phase, batch, **kw):
    """(the state of a fresh wrapper planned whole with the step's arguments, its schedule's length)"""
    ref = EagerWrapper(**kw)
    seen = []
    inner = ref._module.plan
    ref._module.plan = lambda *a: seen.append(len(_schedule(*a[3:]))) or inner(*a)
    ex.backend.calls[phase].plan(ex.backend, ref, batch, phase)
    return _state(ref, batch, seen[0]), seen[0]


SHAPES = [  # (decode KV lengths, prefill (query, KV) lengths): every count changes from step to step
    ([], [(100, 100)]), ([], [(40, 40), (70, 70)]), ([], [(9, 9), (30, 50), (61, 80)]),
    ([], [(200, 260)]), ([], [(17, 17), (33, 90)]), ([], [(5, 5), (6, 6), (7, 7), (120, 300)]),
    ([], [(64, 64)]), ([], [(3, 40), (90, 90)]),
]
MIXED = [([30, 50], [(20, 20)]), ([10, 11, 90], [(40, 60), (7, 7)]), ([200], [(3, 3)]),
         ([31, 32, 33, 34], [(50, 50)]), ([8], [(16, 40), (5, 9)]), ([17, 60], [(2, 2)])]


def _input(dec, pre, page, width=64, q_dec=1):
    q = [q_dec] * len(dec) + [p[0] for p in pre]
    seq = list(dec) + [p[1] for p in pre]
    b = len(seq)
    table = torch.arange(b * width, dtype=torch.int32).view(b, width).flip(1).contiguous()
    t = torch.tensor(seq, dtype=torch.int32)
    return StepInput(q, t.clone(), table, len(dec), seq_lens_cpu=t)


def _run(ex, page, shapes, scribble=False, q_dec=1, **kw):
    """Plan every step; after each, every planned wrapper holds what a whole plan of the step holds.
    ``scribble``: then overwrite the step's host arrays, as the pinned staging ring does once it hands
    their buffer to a later step (host_metadata.HostStaging)."""
    for dec, pre in shapes:
        step = ex.plan_step(_input(dec, pre, page, q_dec=q_dec))
        for phase in ("decode", "prefill"):
            batch = getattr(step, phase)
            if batch is None:
                continue
            w = ex.backend._wrappers[phase]
            want, n = _whole_reference(ex, phase, batch, **kw)
            assert _state(w, batch, n) == want, (phase, dec, pre)
            if scribble:
                for name in ("qo_indptr_cpu", "kv_page_indptr_cpu", "last_page_len_cpu", "seq_lens_cpu"):
                    getattr(batch, name).fill_(-1)


def test_prefill_steps_learn_then_plan_with_the_scheduler_call_alone(monkeypatch):
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    _run(ex, page, SHAPES * 2)
    w = ex.backend._prefill
    r = replay_of(ex.backend, w)
    assert r is not None and r.ready, r and r.refused
    # learning: the first plan, two observed (the second a pair with every count other), the check's
    # whole plan; then every step the scheduler call alone
    assert w.stats.whole == 4
    assert r.replays == len(SHAPES) * 2 - 4
    # the check's two replays called the scheduler too: every step called it, the check's thrice
    assert len(w.calls) == len(SHAPES) * 2 + 2


class PropertyWrapper(EagerWrapper):
    """A wrapper whose class holds one of the attributes a plan sets as a property that keeps its value in the
    instance's ``__dict__`` under its own name (what the learning sees in ``vars``): the replay must set it
    through the property (``setattr``), not into the ``__dict__`` past it."""

    @property
    def _max_q_len(self):
        return self.__dict__["_max_q_len"]

    @_max_q_len.setter
    def _max_q_len(self, x):
        self.__dict__["_max_q_len"] = x
        self.stats.through_setter = getattr(self.stats, "through_setter", 0) + 1


@pytest.mark.parametrize("cls", [EagerWrapper, PropertyWrapper], ids=["plain", "property"])
def test_the_replay_sets_the_attributes_as_the_whole_plan_does(monkeypatch, cls):
    # The replay sets each attribute as the whole plan does (general_plans.py StepReplay._replay, setattr; a
    # __dict__ update measured slower, 2.2 against 1.3 us for ten attributes): the wrapper holds what a whole
    # plan leaves (_run), and a property sees every step's value.
    plain = cls is EagerWrapper
    ex, page = executor(monkeypatch, cls, LLAMA, "fa2")
    monkeypatch.setattr(sys.modules[__name__], "EagerWrapper", cls)        # _whole_reference's fresh wrapper too
    _run(ex, page, SHAPES * 2)
    w = ex.backend._prefill
    r = replay_of(ex.backend, w)
    assert r is not None and r.ready and r.replays == len(SHAPES) * 2 - 4, r and r.refused
    if not plain:
        # every plan - whole or replayed, the check's two replays too - went through the setter
        assert w.stats.through_setter == len(SHAPES) * 2 + 2


def test_mixed_steps_replay_both_wrappers(monkeypatch):
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    _run(ex, page, MIXED * 3)
    for phase in ("decode", "prefill"):
        r = replay_of(ex.backend, ex.backend._wrappers[phase])
        assert r is not None and r.ready and r.replays > 0, (phase, r and r.refused)


def test_host_arrays_rewritten_after_their_step_do_not_stop_the_learning(monkeypatch):
    # The learning compares the first observed step with a later one: it keeps what that step's host
    # arrays held at its plan, not views the staging ring has handed to other steps since (on the H100
    # the mixed steps' decode wrapper was refused that way: "scheduler argument 3: a tensor no step
    # value names" - FlashInfer's decode plan hands its scheduler a range equal to the query indptr).
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    _run(ex, page, MIXED * 3, scribble=True)
    for phase in ("decode", "prefill"):
        r = replay_of(ex.backend, ex.backend._wrappers[phase])
        assert r.ready and r.replays > 0, (phase, r.refused)


HOST_ARRAYS = ("qo_indptr_cpu", "kv_page_indptr_cpu", "last_page_len_cpu", "seq_lens_cpu")


def test_the_check_never_writes_a_steps_host_arrays_through_the_staging_ring(monkeypatch):
    # On CUDA a step's host arrays are views of a pinned staging buffer that the ring hands out again to later
    # steps (host_metadata.HostStaging), and the check fills the scheduler's pinned scratch 0x00 and 0xFF. The
    # scratch was every pinned tensor the scheduler was handed, the learning step's host arrays too: by the check
    # their buffer held the check step's layout, and its context indptr was overwritten (MLA prefill on the H200,
    # "kv_indptr[2]0 - kv_indptr[1]869 should be non-negative": bench/logs/h100-2026-11-27x/call1). Here the ring
    # is one buffer every step reuses, and its views and the wrapper's staging buffer count as pinned.
    import attnplan.adapter.general_plans as gp
    from attnplan.adapter.host_metadata import HostStaging

    ring = torch.zeros(1 << 16, dtype=torch.int32)
    monkeypatch.setattr(HostStaging, "take", lambda self, n: (ring, -1) if n <= ring.numel() else
                        (torch.empty(n, dtype=torch.int32), -1))
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    pinned = {ring.untyped_storage().data_ptr(), ex.backend._prefill._pin_memory_int_workspace_buffer.data_ptr()}
    monkeypatch.setattr(gp, "pinned_host", lambda t: t.device.type == "cpu" and t.untyped_storage().data_ptr() in pinned)
    inner = ex.backend.plan_step

    def plan_step(step):
        b = step.prefill
        before = {n: getattr(b, n).clone() for n in HOST_ARRAYS}
        inner(step)
        for n in HOST_ARRAYS:
            assert torch.equal(getattr(b, n), before[n]), f"{n} rewritten by the plan"
    monkeypatch.setattr(ex.backend, "plan_step", plan_step)
    # The first plan makes the module, the next two are learned from, the fourth is the check: its query indptr
    # lies where the third step's lay in the one buffer (both after 2 x 110 tokens' parts and 7-8 pages' entries).
    overlap = [([], [(64, 64)]), ([], [(100, 100)]), ([], [(40, 40), (70, 70)]), ([], [(30, 30), (80, 80)])]
    _run(ex, page, overlap + SHAPES)
    r = replay_of(ex.backend, ex.backend._prefill)
    assert r.ready and r.replays + r.narrowed == len(SHAPES) and r.replays > 0, r.refused   # narrowed: context


def test_a_binding_with_two_candidates_plans_whole_where_they_part_and_narrows(monkeypatch):
    # Prefill without context: the longest query is the longest KV length in every learning step, so an
    # attribute holding either is bound to both until a step with context tells them apart.
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    no_context = [([], [(100, 100)]), ([], [(40, 40), (70, 70)]), ([], [(9, 9), (30, 30), (61, 61)]),
                  ([], [(200, 200)]), ([], [(5, 5), (150, 150)])]
    _run(ex, page, no_context)
    r = replay_of(ex.backend, ex.backend._prefill)
    assert r.ready and r.narrowed == 0
    cands = r.binding["attrs"]["_max_kv_len"]
    assert ("name", "max_q_len") in cands and ("name", "max_kv_len") in cands
    whole = ex.backend._prefill.stats.whole
    _run(ex, page, [([], [(30, 90)]), ([], [(12, 70), (8, 8)])])
    assert r.narrowed == 1 and r.binding["attrs"]["_max_kv_len"] == [("name", "max_kv_len")]
    assert ex.backend._prefill.stats.whole == whole + 1 and r.ready


def test_a_replay_hands_the_wrapper_the_steps_lengths_and_a_whole_plan_gets_its_own_buffer_back(monkeypatch):
    # The plan refills its kept KV-length buffer from the step's lengths; the replay sets the step's own device
    # tensor in its place (no copy launched), and puts the wrapper's buffer back before any whole plan - here a
    # narrowing plan of more requests than the replayed step had, which the stand-in copies into its buffer's
    # leading entries without growing it: the step's tensor would be too short.
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    w = ex.backend._prefill
    own = w._kv_lens_buffer
    no_context = [([], [(100, 100)]), ([], [(40, 40), (70, 70)]), ([], [(9, 9), (30, 30), (61, 61)]),
                  ([], [(200, 200)]), ([], [(150, 150)])]
    _run(ex, page, no_context)
    r = replay_of(ex.backend, w)
    assert r.ready and r.replays == 1 and r.binding["fills"] == {"_kv_lens_buffer": "seq_lens"}
    step = ex.plan_step(_input([], [(50, 50)], page))
    assert r.replays == 2 and w._kv_lens_buffer is step.prefill.seq_lens      # the step's tensor, no copy
    _run(ex, page, [([], [(5, 9), (6, 60), (7, 7), (8, 8), (9, 90)])])     # candidates part: a whole plan
    assert r.narrowed == 1 and w._kv_lens_buffer is own
    _run(ex, page, [([], [(12, 70), (8, 8)]), ([], [(20, 200)])])
    assert r.ready and r.replays == 4


def test_candidates_that_part_at_the_check_step_narrow_and_a_later_step_checks(monkeypatch):
    # Both learning steps prefill without context (longest query = longest KV length); the step meant to check
    # has context, so the binding of _max_kv_len cannot tell which value to replay: that step plans whole and
    # narrows it, and the next step is the check (before: the replay was refused - MHA fa2 on the H100).
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    _run(ex, page, [([], [(100, 100)]), ([], [(40, 40), (70, 70)]), ([], [(9, 9), (30, 30), (61, 61)])])
    r = replay_of(ex.backend, ex.backend._prefill)
    assert not r.ready and r.refused is None and len(r.binding["attrs"]["_max_kv_len"]) == 2
    _run(ex, page, [([], [(30, 90)])])
    assert not r.ready and r.refused is None and r.narrowed == 1
    assert r.binding["attrs"]["_max_kv_len"] == [("name", "max_kv_len")]
    _run(ex, page, [([], [(12, 70), (8, 8)]), ([], [(5, 5), (6, 60)]), ([], [(20, 200)])])
    assert r.ready and r.refused is None and r.replays == 2


def test_an_attribute_no_step_value_names_refuses_and_every_step_plans_whole(monkeypatch):
    # e.g. a plan that keeps a number it works out from the indptr (the total pages + 1)
    odd = (lambda kv: int(kv[-1]) + 1)
    ex, page = executor(monkeypatch, lambda: EagerWrapper(odd=odd), LLAMA, "fa2")
    _run(ex, page, SHAPES, odd=odd)
    r = replay_of(ex.backend, ex.backend._prefill)
    assert not r.ready and "_odd_state" in r.refused
    assert ex.backend._prefill.stats.whole >= len(SHAPES) and r.replays == 0


def test_a_replay_that_raises_ends_the_replay_and_the_step_plans_whole(monkeypatch):
    # the stand-in's scheduler starts raising once a step reaches 250 tokens; the step's whole plan
    # raises too then - the executor's error - so the test stops the shapes right before it
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    _run(ex, page, SHAPES)
    r = replay_of(ex.backend, ex.backend._prefill)
    assert r.ready
    r.binding["fn"] = _raising
    _run(ex, page, [([], [(60, 60)]), ([], [(20, 20), (9, 30)])])
    assert not r.ready and "RuntimeError" in r.refused and r.replays > 0


def test_steps_that_never_change_every_count_plan_whole_and_stop_learning(monkeypatch):
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    same_batch = [([], [(10 + i, 10 + i)]) for i in range(LEARN_STEPS + 3)]      # one request each step
    _run(ex, page, same_batch)
    r = replay_of(ex.backend, ex.backend._prefill)
    assert not r.ready and r.binding is None and str(LEARN_STEPS) in r.refused


def test_the_switch_keeps_every_step_on_the_whole_plan(monkeypatch):
    monkeypatch.setenv("ATTNPLAN_GENERAL_SCHEDULER_REPLAY", "0")
    ex, page = executor(monkeypatch, EagerWrapper, LLAMA, "fa2")
    _run(ex, page, SHAPES)
    assert replay_of(ex.backend, ex.backend._prefill) is None
    assert ex.backend._prefill.stats.whole == len(SHAPES)


@pytest.mark.parametrize("config,backend,decode_says", [
    (dict(head_dim=128, num_qo_heads=8, num_kv_heads=8), "fa2", True),                 # CUDA-core decode
    (dict(head_dim=64, num_qo_heads=64, num_kv_heads=8, sinks=True), "fa2", True),     # the sink wrapper
    (dict(LLAMA, num_speculative_tokens=2), "fa3", True),       # fa3's speculative decode on its prefill kernel
    (dict(head_dim=128, num_qo_heads=8, num_kv_heads=8), "fa2", False),                # a decode call that says no
], ids=["cuda-core-decode", "sink", "fa3-spec-decode", "decode-says-no"])
def test_only_calls_that_say_so_replay(monkeypatch, config, backend, decode_says):
    # KernelCall.general_replay: only the calls whose replay was held to the float32 reference on the H100
    # (tests/gpu/test_general_replay_gpu.py) say yes; a call that says no keeps FlashInfer's whole plan.
    ex, page = executor(monkeypatch, EagerWrapper, config, backend)
    call = ex.backend.calls["decode"]
    if not decode_says:
        monkeypatch.setattr(type(call), "general_replay", lambda self, pp: False)
    assert call.general_replay(ex.plan.decode) is decode_says
    qd = ex.plan.decode.q_len_per_req
    shapes = [([d for d in dec if d >= qd], pre) for dec, pre in MIXED]
    _run(ex, page, shapes * 2, q_dec=qd)
    got = {ph for ph in ("decode", "prefill") if replay_of(ex.backend, ex.backend._wrappers[ph]) is not None}
    assert got == ({"decode", "prefill"} if decode_says else {"prefill"})
    for ph in got:
        assert replay_of(ex.backend, ex.backend._wrappers[ph]).ready
    if not decode_says:
        assert ex.backend._decode.stats.whole == sum(1 for dec, _ in shapes * 2 if dec)


class RaggedWrapper:
    """flashinfer/prefill.py BatchPrefillWithRaggedKVCacheWrapper ``plan`` in eager mode, reduced to its kinds
    of state: host copies of the indptrs, device copies kept (the output's and V's the same objects), the KV
    lengths as a new host tensor, the query's last offset, one scheduler call (MLA prefill's ragged parts)."""

    made: list = []

    def __init__(self, workspace, layout, backend=None):
        self.device = torch.device("cpu")
        self._float_workspace_buffer = torch.zeros(64, dtype=torch.uint8)
        self._int_workspace_buffer = torch.zeros(4096, dtype=torch.int32)
        self._pin_memory_int_workspace_buffer = torch.zeros(4096, dtype=torch.int32)
        self.calls: list[int] = []
        self._module = SimpleNamespace(plan=_scheduler(self.calls))
        self._plan_info = None
        self.stats = SimpleNamespace(whole=0)
        RaggedWrapper.made.append(self)

    def plan(self, qo_indptr, kv_indptr, heads, kv_heads, head_dim_qk, head_dim_vo=None, causal=False, **kw):
        self.stats.whole += 1
        qo_host, kv_host = qo_indptr.to("cpu"), kv_indptr.to("cpu")
        self._qo_indptr_last = int(qo_host[-1])
        self._qo_indptr_buf = qo_indptr.clone()                # .to(device): a device copy
        self._kv_indptr_buf = kv_indptr.clone()
        self._o_indptr_buf, self._v_indptr_buf = self._qo_indptr_buf, self._kv_indptr_buf
        kv_len = kv_host[1:] - kv_host[:-1]
        self._cached_module = self._module
        self._causal = causal
        self._plan_info = self._cached_module.plan(
            self._float_workspace_buffer, self._int_workspace_buffer, self._pin_memory_int_workspace_buffer, qo_host,
            kv_host, kv_len, self._qo_indptr_last, len(qo_host) - 1, heads, kv_heads, 1, False, head_dim_qk,
            head_dim_vo, causal, -1)


MLA_CFG = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


@pytest.mark.parametrize("gate", ["open", "closed"])
@pytest.mark.parametrize("backend", ["fa2", "fa3"])
def test_mla_prefill_parts_learn_then_plan_with_the_scheduler_call_alone(monkeypatch, backend, gate):
    # MLA prefill plans two ragged parts a step (new tokens causal, the cached context not), each on a wrapper
    # of its own: with the call's gate open each learns and replays as a phase's wrapper does, closed (as it
    # ships for a backend the H100 has not held: RaggedPrefill.general_replay) every part plans whole; either way after
    # every step the part's wrapper holds what a fresh wrapper planned whole with the step's arguments holds
    from attnplan.adapter.calls import registry

    call = registry()["ragged_prefill"]
    monkeypatch.setattr(call, "_resolved", RaggedWrapper)
    monkeypatch.setattr(call, "general_replay", lambda pp: gate == "open")
    RaggedWrapper.made = []
    ex, page = executor(monkeypatch, EagerWrapper, dict(MLA_CFG, attention_backend=backend))
    assert ex.plan.prefill.call == "ragged_prefill" and ex.plan.prefill.flashinfer_backend == backend
    shapes = [[(100, 130)], [(40, 40), (70, 200)], [(9, 50), (30, 30), (61, 61)], [(200, 260)], [(17, 80), (33, 90)],
              [(5, 5), (6, 40), (7, 7), (120, 300)], [(64, 64), (3, 9)], [(3, 40), (90, 95)]] * 2
    planned = {"new": 0, "context": 0}
    for pre in shapes:
        step = ex.plan_step(_input([], pre, page))
        for key, causal in (("new", True), ("context", False)):
            w = ex.backend.parts.get(key)
            if key == "context" and not step.extra["any_context"]:
                continue
            planned[key] += 1
            ref = RaggedWrapper(None, "NHD")
            seen = []
            inner = ref._module.plan
            ref._module.plan = lambda *a: seen.append(len(_schedule(*a[3:]))) or inner(*a)
            qo = step.prefill.qo_indptr_cpu
            kv = qo if key == "new" else step.extra["context_indptr_cpu"]
            ref.plan(qo, kv, 16, 16, 192, head_dim_vo=128, causal=causal)
            assert _state(w, step.prefill, seen[0]) == _state(ref, step.prefill, seen[0]), (key, pre)
    for key in ("new", "context"):
        r = replay_of(ex.backend, ex.backend.parts[key])
        if gate == "closed":
            assert r is None and ex.backend.parts[key].stats.whole == planned[key]
            continue
        assert r is not None and r.ready and r.replays > 0, (key, r and r.refused)


def test_event_calls_skip_the_python_subclass_where_the_base_is_c(monkeypatch):
    # plan_replay.event_methods: torch.cuda.Event's query / record through its C base (one frame less a call, a
    # few a step on the H100 hosts), the Event's own where the base's are Python functions (another torch).
    from attnplan.adapter.plan_replay import event_methods

    class CBase:                               # method descriptors, as a C extension type's methods are
        query, record = dict.get, dict.setdefault

    class PyBase:
        def query(self):
            return True

        def record(self, stream):
            pass

    for base, want in ((CBase, (dict.get, dict.setdefault)), (PyBase, None)):
        event = type("Event", (base,), {"query": lambda self: True, "record": lambda self, stream=None: None})
        monkeypatch.setattr(torch.cuda, "Event", event)
        got = event_methods()
        assert got == (want or (event.query, event.record))
