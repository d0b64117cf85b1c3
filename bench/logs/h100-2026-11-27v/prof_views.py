"""from_host's device half through host_torch.cpp against its Python twin, in one process on this machine (issue
41): from_host whole with each (medians of 2,000 calls, the two alternating in blocks of 100, synchronized every
100: no queue build-up), and step_views / _step_views alone on the same step's layout. The six general shapes
of bench/general_step_host.py, fa2 plan, page 16, the block table on the device. ``python prof_views.py``"""
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
import torch  # noqa: E402

from general_step_host import SHAPES, make_input  # noqa: E402
from attnplan.adapter import host_metadata as hm, host_native, host_torch  # noqa: E402
from attnplan.policy import AttentionConfig, plan_for, simulated_node  # noqa: E402

t0 = time.perf_counter()
lib = host_torch.library()
print(f"host_torch: {host_torch.status()} ({time.perf_counter() - t0:.1f} s), host_step.c "
      f"{'loaded' if host_native.library() else 'absent'}, torch {torch.__version__}", flush=True)
if lib is None:
    sys.exit(1)
plan = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="fa2"),
                simulated_node("H100"), engine="flashinfer").plan
page = plan.kv_cache.page_size
st = hm.HostStaging("cuda")


def alternate(fns, reps=2000, block=100):
    for f in fns:
        for _ in range(50):
            f()
    ts = [[] for _ in fns]
    for i in range(reps // block):
        for j, f in enumerate(fns):
            torch.cuda.synchronize()
            for _ in range(block):
                t = time.perf_counter_ns()
                f()
                ts[j].append(time.perf_counter_ns() - t)
    return [statistics.median(x) / 1000 for x in ts]


print("| shape | from_host: C++ views | Python views | step_views alone | _step_views alone |\n|---|---|---|---|---|")
for what, dec, pre in SHAPES:
    inp = make_input(dec, pre, page)
    inp.seq_lens, inp.block_table = inp.seq_lens.cuda(), inp.block_table.cuda()
    needs = plan.metadata.prefill_only if not dec else plan.metadata.mixed

    def fh(views):
        def run():
            st.views = views
            s = hm.from_host(plan, inp, needs, "x", st, 1)
            st.release(s.extra["staging_slot"])
        return run
    host, slot, total, info = hm._native_step(host_native.library(), inp.query_lens, inp.seq_lens_cpu, len(dec), 1,
                                              page, inp.block_table.shape[1], True, None, st)
    sizes, t_all, p_all = info[12:12 + info[11]], info[0], info[1]
    args = (host, sizes, inp.block_table, True, [t_all, info[6], p_all - info[6]] if dec else [t_all, p_all],
            [len(dec), len(pre)] if dec else [])
    a, b = alternate([fh(lib), fh(None)])
    c, d = alternate([lambda: lib.step_views(*args), lambda: hm._step_views(*args)])
    st.give_back(slot)
    print(f"| {what} | {a:.1f} | {b:.1f} | {c:.1f} | {d:.1f} |", flush=True)
