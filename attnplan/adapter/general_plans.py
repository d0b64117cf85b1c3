"""Prefill and mixed steps planned with FlashInfer's scheduler call alone, learned from the wrapper's own
whole plans and checked on it (issue 41).

A prefill or mixed step has a new shape almost every step, so neither a captured layout nor a CUDA-graph
wrapper (fixed batch size, fixed buffers) can hold it: the backend's wrapper plans it whole. FlashInfer's
Python ``plan`` (flashinfer/prefill.py ``BatchPrefillWithPagedKVCacheWrapper.plan``; decode.py
``BatchDecodeWithPagedKVCacheWrapper.plan`` for a mixed step's decode part) re-derives on the host what the
step metadata already holds, copies the host indptrs the metadata already sent to the device once more
(three ``.to(device)`` and one ``copy_`` a plan), and around that makes one call into the JIT module - the
scheduler. On the H100 machine's hosts a 1 x 1k prefill plan costs 57-177 µs of which the scheduler is 21-28
(bench/RESULTS.md rounds eight and twelve).

What a whole plan leaves on the wrapper is learned here from the wrapper itself, not transcribed:

1. observe: a whole plan of a step, with the scheduler call recorded (plan_replay.record) and the wrapper's
   attributes before and after it (and, for a tensor it keeps, its contents);
2. bind: from two observed steps whose request count, token count and longest KV length all differ, every
   scheduler argument and every attribute the plan writes gets a *binding*: a constant (the same in both),
   the scheduler's result (plan info), or one of the step's own values - a host or device tensor of the
   ``PhaseBatch`` by identity or by value, an int among its counts, or a kept tensor whose leading entries
   are filled from one of its device tensors. An argument or attribute with no binding refuses the
   replay (``refused`` says which);
3. check: at a later step of other lengths the replay runs first (its scheduler call twice, over the
   scheduler's own pinned scratch filled 0x00 and 0xFF, as plan_replay.SchedulerReplay does), then the whole
   plan, and every attribute, the plan info and the written bytes of the int workspace must be equal;
4. replay: from then on a step's plan is the scheduler call over its own host arrays and ints, and the
   bound attributes set to its own tensors (which the metadata already put on the device: no copies). A
   1-D kept tensor the plan refills (its KV-length buffer) is set to the step's tensor too, not refilled:
   its leading entries are what the plan copies, and the copy's launch was the replay's largest host cost
   after the scheduler (10-14 µs a wrapper on the H200 and H100 hosts, bench/logs/h100-2026-11-27x); the
   wrapper's own buffer, whose length FlashInfer's plan grows it by, is put back before any whole plan.

An int binding can hold more than one candidate (a constant and a count, or two counts that were equal in
both steps); a step where the candidates disagree plans whole, and that plan's values narrow them. A
step whose replay raises plans whole and ends the replay for that wrapper.
``ATTNPLAN_GENERAL_SCHEDULER_REPLAY=0`` keeps every step on FlashInfer's whole plan.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from .plan_replay import PinnedGuard, pinned_host, plain, record_one, sync_device

INTS = ("num_reqs", "num_tokens", "max_q_len", "max_kv_len")
MUST_DIFFER = ("num_reqs", "num_tokens", "max_kv_len")      # between the two steps a binding is read from
TENSORS = ("qo_indptr_cpu", "kv_page_indptr_cpu", "last_page_len_cpu", "seq_lens_cpu",
           "qo_indptr", "kv_page_indptr", "kv_indices", "last_page_len", "seq_lens")
_MISSING = object()
KEPT_BYTES = 1 << 20     # a kept tensor up to this size is compared before and after a learning plan
LEARN_STEPS = 16        # whole-planned steps a wrapper may take to find a pair to bind from and a step to check


def _values(batch: Any) -> dict[str, Any]:
    v = {n: getattr(batch, n) for n in INTS}
    for n in TENSORS:
        t = getattr(batch, n)
        if t is not None:
            v[n] = t
    return v


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _same(a: Any, b: Any) -> bool:
    """Equal values: tensors by dtype, shape and elements (on their devices), the rest as plain Python."""
    import torch

    if a is b:
        return True
    if _is_tensor(a) or _is_tensor(b):
        if not (_is_tensor(a) and _is_tensor(b)) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.device != b.device:
            b = b.to(a.device)
        return bool(torch.equal(a, b))
    try:
        return bool(plain(a) == plain(b))
    except Exception:  # noqa: BLE001 - values that do not compare are not equal
        return False


class _Seen:
    """One argument or attribute as a whole plan left it: the object, the step value it is (identity, at
    the plan), and its contents then (a small tensor cloned: a step's host arrays are views of a staging
    ring that later steps rewrite)."""

    __slots__ = ("obj", "name", "snap")

    def __init__(self, obj: Any, idents: dict[int, str]):
        self.obj = obj
        self.name = idents.get(id(obj)) if _is_tensor(obj) else None
        self.snap = obj.clone() if _small(obj) else obj


class _Observed:
    """One whole plan: the scheduler call and the attributes before and after it, each as ``_Seen``; the
    kept tensors it refilled (their contents after); the step's values (tensors cloned)."""

    __slots__ = ("scheduler", "args", "kwargs", "result", "before", "after", "filled", "values", "live")

    def __init__(self, scheduler: Any, call: tuple, before: dict, after: dict, filled: dict, live: dict):
        idents = {id(t): n for n, t in live.items() if _is_tensor(t)}
        args, kwargs, result = call
        self.scheduler, self.result = scheduler, result
        self.args = [_Seen(x, idents) for x in args]
        self.kwargs = {k: _Seen(x, idents) for k, x in kwargs.items()}
        self.before, self.after = before, {k: _Seen(v, idents) for k, v in after.items()}
        self.filled = filled
        self.live = live                         # keeps the step's tensors alive: their ids stay theirs
        self.values = {n: (t.clone() if _is_tensor(t) else t) for n, t in live.items()}


class Refused(Exception):
    pass


class Ambiguous(Refused):
    """Two steps that cannot tell two step values apart (equal in both): learn from another pair."""


def _tensor_candidates(v: Any, values: dict[str, Any]) -> list[tuple]:
    """Step tensors ``v`` equals (same device, dtype, shape, elements): a device copy of a host array
    is named by the device tensor the metadata sent, which the replay hands over instead."""
    c = [("name", n) for n in TENSORS if n in values and values[n].device == v.device and _same(v, values[n])]
    if len({n.removesuffix("_cpu") for _, n in c}) == 1:
        c = c[:1]          # one field's host and device views alike (an executor on the CPU): the same data
    return c


def _int_candidates(a: Any, b: Any, va: dict, vb: dict) -> list[tuple]:
    out = [("const", b)] if _same(a, b) else []
    if isinstance(b, int) and not isinstance(b, bool):
        out += [("name", n) for n in INTS if va[n] == a and vb[n] == b]
    return out


class StepReplay:
    """One wrapper's learned plan: ``plan(batch)`` plans it (whole while learning, by replay once checked)."""

    def __init__(self, call: Any, ctx: Any, wrapper: Any, phase: str, device: Any):
        self.call, self.ctx, self.wrapper, self.phase = call, ctx, wrapper, phase
        # Its pinned buffer, one step in flight: the scheduler rewrites it each plan and enqueues a copy
        # out of it; one guard per wrapper (a guard shared by a step's two wrappers would wait for the
        # other one's copy, just enqueued: a device sync every step).
        self.guard = PinnedGuard(device)
        self.first: Optional[_Observed] = None
        self.binding: Optional[dict] = None     # args / kwargs / attrs / fills / result attribute
        self.ready = False
        self.refused: Optional[str] = None
        self.whole_steps = 0
        self.replays = 0
        self.narrowed = 0
        self._bound_values: Optional[dict] = None
        self._prog: Optional[tuple] = None      # _program(): the binding compiled for the replay
        # attribute -> the wrapper's own 1-D kept tensor, which a replay sets to the step's own (put back by _whole)
        self._kept: dict[str, Any] = {}

    # -- whole plans ------------------------------------------------------------------------------
    def _restore_kept(self) -> None:
        """The wrapper's own kept tensors back where a replay set a step's: a whole plan refills them (and
        FlashInfer's grows its own where a batch outgrows it, as it does without the replay)."""
        w = self.wrapper
        for k, buf in self._kept.items():
            if getattr(w, k) is not buf:
                setattr(w, k, buf)

    def _whole(self, batch: Any) -> None:
        self._restore_kept()
        self.guard.before()
        self.call.plan(self.ctx, self.wrapper, batch, self.phase)
        self.guard.after()
        for k in self._kept:                      # a plan that outgrew its buffer made a new one: that one now
            self._kept[k] = getattr(self.wrapper, k)

    def _scheduler(self) -> Any:
        return self.call.graph_scheduler(self.wrapper)

    def _observe(self, batch: Any) -> _Observed:
        import torch

        w = self.wrapper
        self._restore_kept()
        before = dict(vars(w))
        # The small tensors it keeps, whose contents a plan may refill (its KV-length buffer); not the
        # workspaces (what the scheduler writes is checked as the schedule; the float one no plan writes).
        kept = {k: v.clone() for k, v in before.items() if _small(v)}
        s = self._scheduler()
        if s is None:
            raise Refused("the wrapper's plan calls no scheduler attnplan can replay")
        call, n = record_one(s, lambda: self._whole(batch))
        if call is None:
            raise Refused(f"the wrapper's plan called its scheduler {n} times")
        after = dict(vars(w))
        filled = {}
        for k, old in kept.items():
            now = after.get(k)
            if now is before[k] and not torch.equal(now, old):
                filled[k] = now.clone()
        return _Observed(s, call, before, after, filled, _values(batch))

    # -- binding ----------------------------------------------------------------------------------
    def _bind(self, a: _Observed, b: _Observed) -> dict:
        s, s2 = a.scheduler, b.scheduler
        if s.owner is not s2.owner or s.attr != s2.attr:
            raise Refused("the two plans called different schedulers")
        if len(a.args) != len(b.args) or set(a.kwargs) != set(b.kwargs):
            raise Refused("the scheduler's arguments changed shape between plans")

        def slot(x: _Seen, y: _Seen, where: str) -> list[tuple]:
            if _is_tensor(y.obj):
                if x.obj is y.obj:
                    return [("const", y.obj)]            # a workspace, a buffer kept across plans
                if y.name is not None:                    # the step's own tensor, handed through
                    if x.name != y.name:
                        raise Refused(f"{where}: another step value in each plan ({x.name}, {y.name})")
                    return [("name", y.name)]
                if not _is_tensor(x.obj):
                    raise Refused(f"{where}: a tensor in one plan only")
                c = [k for k in _tensor_candidates(y.snap, b.values)
                     if _same(x.snap, a.values.get(k[1]))]
                if len(c) == 1:
                    return c
                if not c and _same(x.snap, y.snap):
                    return [("const", y.obj)]        # a fresh tensor of the same value each plan (an empty dtype tag)
                if c:
                    raise Ambiguous(f"{where}: a tensor more than one step value names")
                raise Refused(f"{where}: a tensor no step value names")
            c = _int_candidates(x.snap, y.snap, a.values, b.values)
            if not c:
                raise Refused(f"{where} changes with the batch in a way no step value names ({x.snap!r}, {y.snap!r})")
            return c

        args = [slot(x, y, f"scheduler argument {i}") for i, (x, y) in enumerate(zip(a.args, b.args))]
        kwargs = {k: slot(a.kwargs[k], y, f"scheduler argument {k}") for k, y in b.kwargs.items()}
        # What the scheduler itself writes (its workspaces: the tensors it is handed every plan) the
        # replayed call writes again.
        own = [y.obj for y, c in zip((*b.args, *b.kwargs.values()), (*args, *kwargs.values()))
               if _is_tensor(y.obj) and c == [("const", y.obj)]]
        bind: dict[str, Any] = {
            "fn": getattr(s2.owner, s2.attr), "schedule": s2.schedule, "args": args, "kwargs": kwargs,
            # The check's scratch: the scheduler's own pinned buffers (handed every plan), never a step's host
            # arrays - on CUDA those are pinned too, views of the staging ring (host_metadata.HostStaging), which
            # by the check may hold a later step's layout: filled, they were that step's arrays overwritten
            # (MLA's context indptr on the H200: bench/logs/h100-2026-11-27x/call1).
            "scratch": [t for t in own if pinned_host(t)],
            "own": {id(t) for t in own},
            "attrs": {}, "fills": {}, "kept": {}, "result": [],
        }
        written_by_scheduler = bind["own"]
        for k, yb in b.after.items():
            vb, before = yb.obj, b.before.get(k, _MISSING)
            xa = a.after.get(k)
            if vb is b.result:
                bind["result"].append(k)
            elif id(vb) in written_by_scheduler:
                continue
            elif vb is before and (k in b.filled or k in a.filled):
                c = [n for n in TENSORS if n in b.values and b.values[n].device == vb.device
                     and _prefix_is(b.filled.get(k, vb), b.values[n])
                     and (k not in a.filled or _prefix_is(a.filled[k], a.values[n]))]
                if not c:
                    raise Refused(f"attribute {k}: a kept tensor the plan refills from no step value")
                # the step's device tensor where a host one holds the same (an executor on the CPU): a replay
                # sets it in the kept tensor's place, and the host arrays are the staging ring's
                bind["fills"][k] = min(c, key=lambda n: n.endswith("_cpu"))
                bind["kept"][k] = vb
            elif vb is before:
                continue                          # not written by the plan, or written with itself
            elif xa is None:
                raise Refused(f"attribute {k}: set by one plan, not by the other")
            elif _is_tensor(vb):
                if xa.obj is vb:
                    continue
                bind["attrs"][k] = slot(xa, yb, f"attribute {k}")
            else:
                c = slot(xa, yb, f"attribute {k}")
                if c != [("const", yb.snap)] or before is _MISSING or not _same(before, vb):
                    bind["attrs"][k] = c
        if not bind["result"]:
            raise Refused("no attribute holds the scheduler's plan info")
        return bind

    # -- replay -----------------------------------------------------------------------------------
    @staticmethod
    def _pick(cands: list[tuple], v: dict) -> Any:
        """The value of a binding for a step, or _MISSING where its candidates disagree."""
        kind, x = cands[0]
        got = x if kind == "const" else v[x]
        for kind, x in cands[1:]:
            other = x if kind == "const" else v[x]
            if other is not got and other != got:
                return _MISSING
        return got

    def _program(self) -> tuple:
        """The binding as the replay reads it: per scheduler argument, keyword and attribute (0, the
        constant), (1, the step value's name) or (2, candidates to pick among); the names the step must
        hold; the bindings with candidates; the fills; every name the replay reads (those and the
        candidates'). Made once per binding: ``_narrow`` replaces a binding's lists and drops it (the
        replay's Python is host time a whole plan does not spend beside the scheduler call: issue 41)."""
        prog = self._prog
        if prog is not None:
            return prog
        bind = self.binding
        assert bind is not None

        def op(cands: list[tuple]) -> tuple:
            if len(cands) == 1:
                return (0, cands[0][1]) if cands[0][0] == "const" else (1, cands[0][1])
            return 2, cands
        ops = ([op(c) for c in bind["args"]], [(k, op(c)) for k, c in bind["kwargs"].items()],
               [(k, op(c)) for k, c in bind["attrs"].items()])
        every = [*ops[0], *(o for _, o in ops[1]), *(o for _, o in ops[2])]
        names = tuple(sorted({x for kind, x in every if kind == 1}))
        picks = tuple(x for kind, x in every if kind == 2)
        reads = tuple(sorted({*names, *(n for cands in picks for kind, n in cands if kind == "name")}))
        # a fill of a 1-D kept tensor: the step's tensor set in its place (alias True); else its entries copied
        fills = tuple((k, n, k in self._kept) for k, n in bind["fills"].items())
        self._prog = (*ops, names, picks, fills, reads)
        return self._prog

    def _disagree(self, v: dict) -> bool:
        """Whether an int binding's candidates disagree for the step of values ``v`` (``_values``)."""
        return any(self._pick(x, v) is _MISSING for x in self._program()[4])

    def _replay(self, batch: Any) -> bool:
        """This step's plan by the scheduler call alone; False (nothing done) where an int binding's
        candidates disagree for this step."""
        bind = self.binding
        assert bind is not None
        args_ops, kwargs_ops, attrs_ops, names, picks, fills, reads = self._program()
        # The step's own values, those the binding reads (a field the binding names but this step lacks:
        # KeyError, and the wrapper plans whole from then on, as before).
        v = {n: getattr(batch, n) for n in reads}
        missing = [n for n in names if v[n] is None]
        if missing:
            raise KeyError(f"the step has no {missing}")
        if picks and self._disagree(v):
            return False
        pick = self._pick
        args = [x if k == 0 else v[x] if k == 1 else pick(x, v) for k, x in args_ops]
        kwargs = {name: x if k == 0 else v[x] if k == 1 else pick(x, v) for name, (k, x) in kwargs_ops}
        self.guard.before()
        info = bind["fn"](*args, **kwargs)
        self.guard.after()
        w = self.wrapper
        for k in bind["result"]:
            setattr(w, k, info)
        for name, (k, x) in attrs_ops:
            setattr(w, name, x if k == 0 else v[x] if k == 1 else pick(x, v))
        for k, n, alias in fills:
            t = v[n] if n in v else getattr(batch, n)
            if t.dim() != 1:
                t = t.reshape(-1)
            if alias:
                setattr(w, k, t)                  # the step's tensor: its entries are those the plan copies
            else:                                 # the kept tensor's leading entries from the step's tensor
                getattr(w, k).view(-1)[: t.numel()].copy_(t, non_blocking=True)
        return True

    def _narrow(self, batch: Any) -> None:
        """A whole plan for a step whose int candidates disagreed: keep those that hold for it."""
        o = self._observe(batch)
        args, kwargs = [x.obj for x in o.args], {k: x.obj for k, x in o.kwargs.items()}
        bind, v = self.binding, o.values
        assert bind is not None

        def keep(cands: list[tuple], actual: Any, where: str) -> list[tuple]:
            left = [c for c in cands if _same(c[1] if c[0] == "const" else v[c[1]], actual)]
            if not left:
                raise Refused(f"{where}: no candidate held for a later step")
            return left
        bind["args"] = [keep(c, args[i], f"scheduler argument {i}") for i, c in enumerate(bind["args"])]
        bind["kwargs"] = {k: keep(c, kwargs[k], f"scheduler argument {k}") for k, c in bind["kwargs"].items()}
        bind["attrs"] = {k: keep(c, o.after[k].obj if k in o.after else _MISSING, f"attribute {k}")
                         for k, c in bind["attrs"].items()}
        self._prog = None
        self.narrowed += 1

    def _check(self, batch: Any) -> None:
        """The replay against a whole plan on the same step: every attribute, the plan info and the
        written bytes of the int workspace equal, or Refused."""
        import torch

        bind = self.binding
        assert bind is not None
        ws = bind["schedule"]
        sync_device(ws)              # the scratch is refilled below: no copy out of it may still be queued
        got = []
        for fill in (0x00, 0xFF):
            for t in bind["scratch"]:
                t.view(torch.uint8).fill_(fill)
            if not self._replay(batch):
                raise Refused("a check step whose counts the binding could not tell apart")
            sync_device(ws)
            got.append((ws.clone(), {k: v.clone() if _small(v) else v for k, v in vars(self.wrapper).items()}))
        (ws0, mine), (ws1, _) = got
        o = self._observe(batch)                # the whole plan last: the wrapper's state is its own
        sync_device(ws)
        written = ws0 == ws1
        if not torch.equal(ws0[written], ws[written]):
            raise Refused("the replayed scheduler call left another schedule than the whole plan")
        for k in set(mine) | set(o.after):
            x, y = mine.get(k, _MISSING), (o.after[k].obj if k in o.after else _MISSING)
            if id(vars(self.wrapper).get(k)) in bind["own"]:
                continue                        # the scheduler's workspaces: compared as the schedule above
            if k in self._kept and _is_tensor(x) and _is_tensor(y):
                y = y.reshape(-1)[: x.numel()]  # the replay's step tensor against the plan's refilled entries
            if x is _MISSING or y is _MISSING or not _same(x, y):
                raise Refused(f"attribute {k}: the replay left another value than the whole plan")

    # -- the step ---------------------------------------------------------------------------------
    def plan(self, batch: Any) -> None:
        if self.ready:
            try:
                if self._replay(batch):
                    self.replays += 1
                    return
                self._narrow(batch)              # whole, and the binding narrowed by it
            except Exception as exc:  # noqa: BLE001 - an optimisation: what it trips on plans whole
                self._refuse(f"{type(exc).__name__}: {exc}")
                self._whole(batch)
            return
        if self.refused is not None:
            self._whole(batch)
            return
        try:
            self._learn(batch)
        except Refused as exc:                   # the check refuses; the step is planned whole
            self._refuse(str(exc))
            self._whole(batch)
        except Exception as exc:  # noqa: BLE001 - what the check trips on refuses too
            self._refuse(f"the check raised {type(exc).__name__}: {exc}")
            self._whole(batch)

    def _learn(self, batch: Any) -> None:
        self.whole_steps += 1
        if self.whole_steps > LEARN_STEPS:
            raise Refused(f"{LEARN_STEPS} steps gave no pair of steps to learn from and one to check")
        if self.first is None and self._scheduler() is None:
            self._whole(batch)                   # the first plan makes the wrapper's module and buffers
            return
        if self.binding is None:
            o = self._observe(batch)
            if self.first is None:
                self.first = o
            elif all(self.first.values[n] != o.values[n] for n in MUST_DIFFER):
                try:
                    self.binding, self._prog = self._bind(self.first, o), None
                    # the 1-D kept tensors a replay sets to the step's own (_replay); _whole keeps this current
                    self._kept = {k: t for k, t in self.binding["kept"].items() if t.dim() == 1}
                except Ambiguous:
                    self.first = o           # e.g. last-page lengths equal to the lengths: another pair
                    return
                self._bound_values = {n: o.values[n] for n in INTS}
            return
        v = _values(batch)
        if all(v[n] == self._bound_values[n] for n in MUST_DIFFER):    # type: ignore[index]
            self._whole(batch)                   # the check needs other lengths than the binding's
            return
        if self._disagree(v):
            # Two candidates of an int binding part at this step (e.g. the longest query and the longest
            # KV length, equal in both learning steps of prefills without context): its whole plan
            # narrows them, and a later step is the check (a refusal here cost MHA's fa2 prefill its
            # replay on the H100: bench/logs/h100-2026-11-26s/README.md).
            self._narrow(batch)
            return
        self._check(batch)
        self.ready, self.first = True, None

    def _refuse(self, why: str) -> None:
        self.ready, self.refused, self.binding, self.first, self._prog = False, why, None, None, None


def _small(v: Any) -> bool:
    """A tensor attribute whose contents a learning plan compares (its size: not a workspace)."""
    return _is_tensor(v) and v.numel() * v.element_size() <= KEPT_BYTES


def _prefix_is(kept: Any, t: Any) -> bool:
    """``kept``'s leading entries are ``t`` (same dtype)."""
    import torch

    flat = kept.reshape(-1)
    if flat.dtype != t.dtype or flat.numel() < t.numel():
        return False
    src = t.reshape(-1).to(flat.device)
    return bool(torch.equal(flat[: src.numel()], src))


class GeneralPlans:
    """One per backend: ``plan(ctx, phase, wrapper, batch)`` plans a prefill or mixed step's phase on the
    context's wrapper - by its ``StepReplay`` where the call has a scheduler to replay, whole otherwise."""

    def __init__(self, device: Any):
        self.enabled = os.environ.get("ATTNPLAN_GENERAL_SCHEDULER_REPLAY") != "0"
        self.device = device
        self.by_wrapper: dict[int, StepReplay] = {}
        self._whole_only: dict[int, Any] = {}     # wrappers whose call has no checked replay: planned whole

    def replays(self, ctx: Any, call: Any, phase: str) -> bool:
        """Whether ``call``'s wrappers may plan ``phase`` with the scheduler call alone once learned."""
        return self.enabled and call.general_replay(getattr(ctx.plan, phase))

    def _replay_for(self, ctx: Any, call: Any, phase: str, wrapper: Any, as_call: Any) -> Optional[StepReplay]:
        """``wrapper``'s StepReplay (made on its first plan where ``call`` may replay for the phase's plan), or
        None: the wrapper plans whole. ``as_call``: what the StepReplay plans and finds the scheduler through."""
        r = self.by_wrapper.get(id(wrapper)) if self.enabled else None
        if r is None and self.enabled and id(wrapper) not in self._whole_only:
            if self.replays(ctx, call, phase):
                r = self.by_wrapper[id(wrapper)] = StepReplay(as_call, ctx, wrapper, phase, self.device)
            else:
                self._whole_only[id(wrapper)] = wrapper      # kept: its id stays its own
        return r

    def plan(self, ctx: Any, phase: str, wrapper: Any, batch: Any) -> None:
        call = ctx.calls[phase]
        r = self._replay_for(ctx, call, phase, wrapper, call)
        if r is None:
            call.plan(ctx, wrapper, batch, phase)
            return
        r.plan(batch)

    def plan_part(self, ctx: Any, part: Any) -> None:
        """An MLA prefill step's ragged part (``step.RaggedPart``) on the context's wrapper of its key: whole
        until learned, as a phase's (the wrapper is made by its first plan)."""
        call = ctx.calls["prefill"]
        as_call = _PartCall(call)
        wrapper = ctx.parts.get(part.key)
        r = None if wrapper is None else self._replay_for(ctx, call, "prefill", wrapper, as_call)
        if r is None:
            as_call.plan(ctx, wrapper, part, "prefill")
            return
        r.plan(part)


class _PartCall:
    """A ragged part's plan as StepReplay calls a phase's: ``plan`` and ``graph_scheduler``."""

    def __init__(self, call: Any):
        self.call = call

    def plan(self, ctx: Any, wrapper: Any, part: Any, phase: str) -> None:
        self.call.plan_part(ctx, part.step, part.key, part.qo_indptr_cpu, part.kv_indptr_cpu, part.causal)

    def graph_scheduler(self, wrapper: Any) -> Any:
        return self.call.graph_scheduler(wrapper)


def replay_of(backend: Any, wrapper: Any) -> Optional[StepReplay]:
    """The ``StepReplay`` of ``wrapper`` in ``backend`` (tests, benchmarks)."""
    return backend.general.by_wrapper.get(id(wrapper))


__all__ = ["GeneralPlans", "StepReplay", "replay_of", "Refused"]
