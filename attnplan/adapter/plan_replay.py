"""A CUDA-graph step's host plan reduced to FlashInfer's scheduler call, learned and checked (issue 41).

A FlashInfer wrapper in CUDA-graph mode plans in two parts. The Python part checks and
canonicalises its arguments and copies the page indptr, last-page lengths (MLA: query and KV
indptr, indices, lengths) into its graph buffers; FlashInfer's MLA wrapper also builds a new
backend object with a new 8 MiB pinned buffer, clones five buffers and validates their storage
intervals (300-1,200 us a call on the H100, bench/RESULTS.md round eight). The other part is one
call into the JIT module (``plan``; MLA: ``plan_with_staged_workspace_bytes``): the scheduler,
which reads host arrays and leaves the schedule in the int workspace the kernels read. In a
``DecodeGraph`` the graph recomputes every buffer the Python part writes, and the host arrays the
scheduler reads are the graph's own (``HostDecodeArrays``, rewritten in place), so a step needs
the scheduler call alone, replayed with the arguments the wrapper gave it.

That is checked on the real wrapper, not assumed (``SchedulerReplay.learn``): the scheduler call
is recorded under one whole plan; then over other lengths (every request's page count halved or
doubled; failing that, every request's table full) the whole plan runs again, and the recorded call
alone must leave the same bytes in the int workspace - those it writes: two replays over pinned
scratch filled 0x00 and 0xFF tell them from alignment gaps copied as found - and return the same
plan info, which must also equal the first plan's (the captured graph holds that one); and replayed
over this step's lengths it must leave another schedule, or the check could not tell a stale
argument from a live one. Any difference, and the graph replays the wrapper's whole plan as before,
with the reason kept (``refused``). On the H100 (bench/logs/h100-2026-11-26o) the first version of
this check - whole-workspace bytes, no scratch fill - learned fa2, fa3, spec-decode, sink and fa2-MLA
graphs and refused fa3-MLA (its plan stages through fresh scratch per call) and fa2 below 8 pages a
request (one schedule for every page count); the version here learned every one of them, fa3-MLA and fa2
over 17-494 tokens included, and the eager steps' (eager_plans.py: fa2, spec decode, fa3, sink, both MLA
paths), every step exact (bench/logs/h100-2026-11-26q). Eager callers pass ``strict=False``: a later plan
info of another value is their cue to plan whole, not an error.

Both ways share one hazard FlashInfer's own graph path has too: the scheduler writes a pinned
host buffer and enqueues its copy to the device; a host more than one step ahead would rewrite
the buffer before the previous copy ran. ``PinnedGuard`` waits, before a plan, for the previous
plan's copy (one CUDA event; at most one step in flight, as a serving loop runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from attnplan.errors import AdapterCallError


def _whole(result: Any) -> Any:
    return result


@dataclass(frozen=True)
class Scheduler:
    """Where a wrapper's plan calls its scheduler: ``getattr(owner, attr)``; the int workspace it
    leaves the schedule in (the tensor the captured kernels read); and which part of its result is
    the plan info the captured kernels were launched with (``info``; MLA's scheduler also returns
    the bytes it staged, which only its own copy reads). ``KernelCall.graph_scheduler``."""

    owner: Any
    attr: str
    schedule: Any
    info: Callable[[Any], Any] = _whole


def plain(x: Any) -> Any:
    """A scheduler's result as plain Python (FlashInfer returns its plan info as an FFI array, MLA
    a (plan info, staged bytes) pair): comparable with ``==``."""
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    try:
        return tuple(plain(e) for e in x)
    except TypeError:
        return x


def record(s: Scheduler, plan: Callable[[], Any]) -> list[tuple[tuple, dict, Any]]:
    """Every call ``plan()`` makes to the scheduler, with its arguments and result (forwarded)."""
    inner = getattr(s.owner, s.attr)
    own = s.attr in vars(s.owner)          # an instance attribute (a namespace) or a method of its class
    calls: list[tuple[tuple, dict, Any]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = inner(*args, **kwargs)
        calls.append((args, kwargs, out))
        return out

    setattr(s.owner, s.attr, spy)
    try:
        plan()
    finally:
        if own:
            setattr(s.owner, s.attr, inner)
        else:
            delattr(s.owner, s.attr)
    return calls


def record_one(s: Scheduler, plan: Callable[[], Any]) -> tuple[Optional[tuple[tuple, dict, Any]], int]:
    """``record`` where the plan must call its scheduler once: (that call or None, how many calls)."""
    calls = record(s, plan)
    return (calls[0] if len(calls) == 1 else None), len(calls)


_STREAMS: dict[tuple, Any] = {}


def current_stream(index: int) -> Any:
    """Device ``index``'s current CUDA stream, one ``Stream`` object kept per stream: torch.cuda.current_stream
    resolves the device and builds a new one each call (7-13 us of host a call on the H100 machines' hosts:
    bench/logs/h100-2026-11-26s/call2/prof_native.log), and an event is recorded on it every step."""
    import torch

    data = torch._C._cuda_getCurrentStream(index)         # (stream id, device index, device type)
    s = _STREAMS.get(data)
    if s is None:
        if len(_STREAMS) >= 256:                          # an engine that makes streams without end
            _STREAMS.clear()
        s = _STREAMS[data] = torch.cuda.Stream(stream_id=data[0], device_index=data[1], device_type=data[2])
    return s


def cuda_index(device: Any) -> Optional[int]:
    """The CUDA device index ``device`` names (the current device where it names none); None off CUDA."""
    import torch

    d = torch.device(device)                              # "cuda:1" as a string too
    if d.type != "cuda":
        return None
    return torch.cuda.current_device() if d.index is None else d.index


def event_methods() -> tuple[Any, Any]:
    """(query, record) of ``torch.cuda.Event`` as its C base class defines them, called as ``query(event)``,
    ``record(event, stream)``: the Python subclass's own add a frame each, ~1 us of host a call on the H100
    machines' hosts, and a prefill step makes four to six (issue 41). The subclass's own where its base is not
    a C class (another torch)."""
    import inspect

    import torch

    ev = torch.cuda.Event
    base = ev.__bases__[0] if ev.__bases__ else ev
    q, r = getattr(base, "query", None), getattr(base, "record", None)
    if inspect.ismethoddescriptor(q) and inspect.ismethoddescriptor(r):
        return q, r
    return ev.query, ev.record


class PinnedGuard:
    """One step in flight for a scheduler's pinned staging buffer: ``before()`` waits for the copy
    the previous plan enqueued, ``after()`` marks this plan's. Nothing on a CPU device."""

    __slots__ = ("_event", "_index", "_query", "_record")

    def __init__(self, device: Any):
        import torch

        self._index = cuda_index(device)
        self._event = torch.cuda.Event() if self._index is not None else None
        self._query, self._record = event_methods() if self._index is not None else (None, None)

    def before(self) -> None:
        # A query first: no wait, and none that torch's sync-debug mode sees, where the copy ran.
        if self._event is not None and not self._query(self._event):
            self._event.synchronize()

    def after(self) -> None:
        if self._event is not None:
            self._record(self._event, current_stream(self._index))


def pinned_host(t: Any) -> bool:
    """A pinned host tensor: a scheduler's staging buffer, which a check fills 0x00 and 0xFF."""
    return t.device.type == "cpu" and t.is_pinned()


def sync_device(t: Any) -> None:
    """Wait for ``t``'s device (a CUDA tensor; nothing on the CPU)."""
    if t.device.type == "cuda":
        import torch

        torch.cuda.synchronize(t.device)


class SchedulerReplay:
    """``learn`` once; then ``__call__`` plans a step with the recorded scheduler call alone."""

    __slots__ = ("fn", "args", "kwargs", "plan_info", "_info", "_part", "refused", "replays", "strict", "changed")

    def __init__(self, strict: bool = True) -> None:
        self.fn: Any = None
        self.args: tuple = ()
        self.kwargs: dict = {}
        self.plan_info: Any = None               # the first plan's, as plain Python
        self._info: Any = None                   # the same as the scheduler returned it
        self._part: Callable[[Any], Any] = _whole
        self.refused: Optional[str] = None      # why the whole plan is replayed instead
        self.replays = 0
        self.strict = strict                    # another plan info is an error (a captured graph holds the first)
        self.changed = 0                        # replays that returned another plan info (not strict)

    @property
    def ready(self) -> bool:
        return self.fn is not None

    def learn(self, scheduler: Callable[[], Optional[Scheduler]], full_plan: Callable[[], Any],
              perturb: Callable[[int], bool], restore: Callable[[], Any]) -> bool:
        """``scheduler()``: where the wrapper's last plan called its scheduler (None: not known for
        this call); ``full_plan()``: the wrapper's whole plan over the graph's host arrays;
        ``perturb(attempt)``: rewrite those arrays with other valid lengths, attempt 0 and 1 each
        another set (False where that changes no page count); ``restore()``: this step's lengths
        back. Leaves the wrapper planned whole for this step."""
        moved = []

        def other(attempt: int) -> bool:
            moved.append(perturb(attempt))
            return moved[-1]
        try:
            return self._learn(scheduler, full_plan, other, restore)
        except Exception as exc:    # an optimisation's check: what it trips on keeps the whole plan
            return self._refuse(f"the check raised {type(exc).__name__}: {exc}")
        finally:
            if not self.ready and any(moved):
                restore()
                full_plan()

    def _learn(self, scheduler: Callable[[], Optional[Scheduler]], full_plan: Callable[[], Any],
               perturb: Callable[[int], bool], restore: Callable[[], Any]) -> bool:
        import torch

        s = scheduler()
        if s is None:
            return self._refuse("this call's wrapper names no scheduler to replay")
        call, n = record_one(s, full_plan)
        if call is None:
            return self._refuse(f"the wrapper's plan called its scheduler {n} times")
        fn = getattr(s.owner, s.attr)
        args, kwargs, first = call
        ws = s.schedule
        # The scheduler's pinned scratch: what it leaves unwritten (alignment gaps) is copied to the
        # workspace as it was, so two replays over scratch filled 0x00 and 0xFF tell the bytes it
        # wrote (equal in both) from garbage no kernel reads (FlashInfer's MLA plan stages through
        # a fresh scratch per plan: its gaps differ from plan to plan).
        scratch = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and pinned_host(a)]

        def replay(fill: int) -> tuple[Any, Any]:
            for t in scratch:
                t.view(torch.uint8).fill_(fill)
            out = fn(*args, **kwargs)
            sync_device(ws)
            return s.info(out), ws.clone()

        tried = False
        for attempt in (0, 1):
            if not perturb(attempt):
                continue
            tried = True
            s2 = scheduler()
            if s2 is None or s2.schedule.data_ptr() != ws.data_ptr():
                return self._refuse("the wrapper's next plan left its schedule in another workspace")
            whole_plan, n = record_one(s2, full_plan)
            if whole_plan is None:
                return self._refuse(f"the wrapper's plan called its scheduler {n} times")
            sync_device(ws)
            whole, there = ws.clone(), s.info(whole_plan[2])
            info0, got0 = replay(0x00)
            _, got1 = replay(0xFF)
            written = got0 == got1
            if plain(info0) != plain(there) or not torch.equal(got0[written], whole[written]):
                return self._refuse("the recorded scheduler call alone did not reproduce the wrapper's whole plan")
            if plain(there) != plain(s.info(first)):
                return self._refuse("the scheduler's plan info changed with the lengths: the captured graph "
                                    "holds the first plan's")
            # And the replay follows the lengths: this step's lengths give another schedule.
            restore()
            _, here = replay(0x00)
            if not torch.equal(here, got0):
                break
        else:
            return self._refuse("every other page-count set tried gave the same schedule: the check could not tell"
                                if tried else "no request's page count can change within the graph's table")
        # This step's lengths, planned whole: the wrapper's own state (what a graph captured after
        # this update reads at run) is this step's, as without the check.
        restore()
        full_plan()
        info = s.info(first)
        self.fn, self.args, self.kwargs, self.plan_info, self._info, self._part = fn, args, kwargs, plain(info), info, s.info
        return True

    def _refuse(self, why: str) -> bool:
        self.refused = why
        return False

    def __call__(self) -> bool:
        """Replay; False where the scheduler returned another plan info than the first plan's (an
        eager caller then plans whole, which leaves the wrapper's state this plan's); raises where
        ``strict`` (a CUDA graph captured the first one: no plan can change it)."""
        info = self._part(self.fn(*self.args, **self.kwargs))
        # FFI arrays compare by value (0.4 us; as plain tuples 7 us).
        if info != self._info and plain(info) != self.plan_info:
            if self.strict:
                raise AdapterCallError("FlashInfer's scheduler returned a plan info other than the one the CUDA "
                                       f"graph was captured with ({plain(info)} vs {self.plan_info}): this batch "
                                       "needs a graph of its own")
            self.changed += 1
            return False
        self.replays += 1
        return True
