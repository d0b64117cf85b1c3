"""Host cost of an MLA prefill step (issue 41): ``plan_step`` against FlashInfer's own ragged plans.

    python3 bench/mla_prefill_host.py [--backends fa2,fa3] [--steps 200] [--json OUT]

DeepSeek-style attention (16 heads here, latent 512 + rope 64, prefill (qk, vo) = (192, 128)) on the rules'
plan with the prefill backend forced; chunked-prefill steps of new tokens over cached context (and one
without context). Per step shape, timed in turn call by call after 3 learning passes
(``xqa_vs_fa2.host_only_each``, medians, synchronized before each call): the executor's ``plan_step`` with
the ragged parts' scheduler replay (general_plans.py ``plan_part``), the same with the replay off, the
metadata alone (``build_step``), and FlashInfer's whole ``plan`` of each part's wrapper with the arguments
the executor gave it (recorded with the replay off). ``plan_step - plans``: what the adapter costs beyond
FlashInfer's plans an engine would call anyway.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
# (new tokens, cached context) per request
SHAPES = [("1 x 1024 new, no context", [(1024, 0)]), ("1 x 512 new over 2048", [(512, 2048)]),
          ("4 x 256 new over 1024", [(256, 1024)] * 4), ("8 x 128 new over 0-4096", [(128, 512 * i) for i in range(8)])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="fa2,fa3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch
    from gpu_common import answer
    from decode_steps import recorded_plan, swapped
    from xqa_vs_fa2 import host_only_each

    from attnplan.adapter import AttentionExecutor, StepInput
    from attnplan.adapter.general_plans import replay_of
    from attnplan.adapter.metadata import build_step
    from attnplan.adapter.warmup import plan_modules, prebuild

    rows = []
    print("| backend | step | parts replaying | metadata | plan_step | FlashInfer plans | plan_step − plans | "
          "replay off: plan_step − plans |\n|---|---|---|---|---|---|---|---|", flush=True)
    for backend in a.backends.split(","):
        ans = answer(**MLA, attention_backend=backend)
        prebuild([m for m in plan_modules(ans.plan) if m.phase == "prefill"])
        ex = AttentionExecutor(ans, device="cuda")
        page = ex.plan.kv_cache.page_size
        g = ex.backend.general
        inputs = []
        for what, reqs in SHAPES:
            seq = [n + c for n, c in reqs]
            width = max((s + page - 1) // page for s in seq)
            table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
            seq_cpu = torch.tensor(seq, dtype=torch.int32)
            inputs.append((what, StepInput([n for n, _ in reqs], seq_cpu.cuda(), table, 0, seq_lens_cpu=seq_cpu)))
        for _ in range(3):                      # learning: every shape thrice, as an engine's first steps
            for _, inp in inputs:
                ex.plan_step(inp)

        def off(fn):
            return swapped(g, "enabled", False, fn)

        def metadata(inp):
            step = build_step(ex.plan, inp, ex._staging, ex._layouts)
            ex._staging.release(step.extra.get("staging_slot", -1))
        for what, inp in inputs:
            plans = []
            for key in ("new", "context"):
                w = ex.backend.parts.get(key)
                if w is None:
                    continue
                try:
                    args, kw = recorded_plan(w, off(lambda: ex.plan_step(inp)))
                except KeyError:                # no context this step: that part's wrapper plans nothing
                    continue
                plans.append((w, args, kw))
            on = [k for k in ("new", "context") if k in ex.backend.parts
                  and (r := replay_of(ex.backend, ex.backend.parts[k])) is not None and r.ready]

            def fi_plans():
                for w, args, kw in plans:
                    w.plan(*args, **kw)
            meta, step_us, step_off, fi = host_only_each(
                [lambda: metadata(inp), lambda: ex.plan_step(inp), off(lambda: ex.plan_step(inp)), fi_plans], a.steps)
            row = dict(backend=backend, step=what, replaying=on, metadata_us=meta, plan_step_us=step_us,
                       plan_step_replay_off_us=step_off, fi_plans_us=fi, fi_parts=len(plans))
            rows.append(row)
            print(f"| {backend} | {what} | {', '.join(on) or 'none'} | {meta:.0f} | {step_us:.0f} | {fi:.0f} "
                  f"({len(plans)}) | {step_us - fi:.0f} | {step_off - fi:.0f} |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
