"""Build every JIT module the GPU test files need in one parallel ninja before pytest runs them,
so one short GPU session compiles once with all cores (each file's fixture then finds them built).

    python3 tests/gpu/prebuild_all.py [new_paths adapter mla variants graphs general]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def modules(which: list[str]) -> dict:
    from attnplan.adapter.warmup import plan_modules

    mods: dict = {}

    def add(a, phases=None):
        mods.update({m.name: m for m in plan_modules(a.plan) if phases is None or m.phase in phases})

    if "new_paths" in which:
        import test_adapter_kernel_paths_gpu as t

        for c in t.XQA_CASES:
            add(t._xqa_from_case(c), ("decode",))
        for a in (t.xqa_sinks_plan(), t.sink_plan("fa2"), t.sink_plan("fa3"), t.nvfp4_plan(), t.hd512_plan(),
                  t.page_plan(1), t.page_plan(128), t.fixed_split_plan(), t.xqa_plan(spec=2)):
            add(a)
    if "adapter" in which:
        import test_adapter_gpu as t
        from gpu_common import answer

        for c in (t.LLAMA, t.G8, t.MHA, t.FP8, t.E5M2, *t.SPEC):
            add(answer(**c))
    if "mla" in which:
        import test_adapter_mla_gpu as t
        from gpu_common import answer

        for c in (t.AUTO, t.FA2, t.MTP):
            add(answer(**c))
    if "variants" in which:
        import test_adapter_variants_gpu as t
        from gpu_common import answer

        for c in (t.SWCAP, *t.HEADS.values()):
            add(answer(**c))
    if "graphs" in which:
        import test_decode_graphs_gpu as t

        for make in (*t.PLANS.values(), *t.MLA_PLANS.values()):
            add(make(), ("decode",))
    if "general" in which:
        import test_general_replay_gpu as t
        from gpu_common import answer

        for c in t.CONFIGS.values():
            add(answer(**c))
    return mods


if __name__ == "__main__":
    from attnplan.adapter.warmup import prebuild

    mods = modules(sys.argv[1:] or ["new_paths", "adapter", "mla"])
    t0 = time.perf_counter()
    prebuild(list(mods.values()), progress=lambda e: print(e, flush=True))
    print(f"prebuilt {len(mods)} modules in {time.perf_counter() - t0:.1f}s", flush=True)
