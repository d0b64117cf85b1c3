"""Host cost of from_host's parts on this machine (issue 41): each torch call it makes, alone, on CUDA tensors
of a step's size, the C step, and from_host whole - medians of 2,000 calls, synchronized every 100 (no queue
build-up). Informs which calls a faster step has to drop. ``python prof_from_host.py [cuda|cpu]``;
``ATTNPLAN_ROOT=DIR``: the attnplan package of another tree (a base commit's), this tree's bench helpers."""
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [os.environ.get("ATTNPLAN_ROOT", str(ROOT)), str(ROOT / "bench"), str(ROOT)]
import attnplan  # noqa: E402 - first: general_step_host puts this tree's root first on the path
import torch  # noqa: E402

from general_step_host import SHAPES, make_input  # noqa: E402
from attnplan.adapter import build_step, host_metadata as hm, host_native  # noqa: E402
from attnplan.policy import AttentionConfig, plan_for, simulated_node  # noqa: E402

dev = sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu")
ans = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="fa2"),
               simulated_node("H100"), engine="flashinfer")
plan = ans.plan
page = plan.kv_cache.page_size
st = hm.HostStaging(dev)


def med(fn, reps=2000):
    for _ in range(50):
        fn()
    ts = []
    for i in range(reps):
        if i % 100 == 0 and dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts) / 1000


def on(inp):
    f = (lambda t: t.to(dev)) if dev != "cpu" else (lambda t: t)
    inp.seq_lens, inp.block_table = f(inp.seq_lens), f(inp.block_table)
    return inp


lib = host_native.library()
print(f"attnplan from {Path(attnplan.__file__).parent}")
print(f"device {dev}, host_step.c {'loaded' if lib else 'absent'}, torch {torch.__version__}")
for what, dec, pre in (SHAPES[0], SHAPES[3]):
    inp = on(make_input(dec, pre, page))
    inp_h = on(make_input(dec, pre, page, host_table=True))
    needs = plan.metadata.prefill_only if not dec else plan.metadata.mixed

    def fh(i):
        s = hm.from_host(plan, i, needs, "x", st, 1)
        st.release(s.extra["staging_slot"])
    rows = {"build_step": lambda: st.release(build_step(plan, inp, st).extra["staging_slot"]),
            "from_host": lambda: fh(inp), "from_host, host block table": lambda: fh(inp_h),
            "_native_step": lambda: st.give_back(hm._native_step(lib, inp.query_lens, inp.seq_lens_cpu, inp.num_decodes,
                                                                  1, page, inp.block_table.shape[1], True, None, st)[1])}
    h = torch.zeros(1 << 14, dtype=torch.int32).pin_memory() if dev == "cuda" else torch.zeros(1 << 14, dtype=torch.int32)
    sizes = [1024, 1024, 1024, 2, 2, 1, 1]
    hh = h[:sum(sizes)]
    d = hh.to(dev)
    t = inp.block_table
    idx = d[:1024]
    e = torch.empty(1024, dtype=torch.int64, device=dev)
    rows.update({
        "host[:n]": lambda: h[:3000], "host.narrow": lambda: h.narrow(0, 0, 3000),
        "host.to(dev, non_blocking)": lambda: hh.to(dev, non_blocking=True),
        "empty(dev) + copy_": lambda: torch.empty(hh.numel(), dtype=torch.int32, device=dev).copy_(hh, non_blocking=True),
        "split_with_sizes (7 parts)": lambda: hh.split_with_sizes(sizes),
        "index_select": lambda: t.view(-1).index_select(0, idx),
        "empty(1024, int64, dev)": lambda: torch.empty(1024, dtype=torch.int64, device=dev),
        "add(alpha, out=)": lambda: torch.add(idx, idx, alpha=16, out=e),
        "view(int64)": lambda: d.view(torch.int64),
        "table.split_with_sizes": lambda: t.split_with_sizes([1, t.shape[0] - 1]),
        "Event.query": (lambda ev=torch.cuda.Event(): ev.query()) if dev == "cuda" else (lambda: None),
        "staging take + give_back": lambda: st.give_back(st.take(100)[1]),
    })
    print(f"| {what} | median µs |\n|---|---|")
    for k, fn in rows.items():
        print(f"| {k} | {med(fn):.1f} |", flush=True)
