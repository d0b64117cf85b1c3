"""This tree's adapter against another tree's, in one process, call by call (issue 41).

    python3 bench/adapter_ab.py --base DIR [--steps 300] [--rounds 4] [--suites fa2,mla-fa2,mla-fa3] [--json OUT]

Across processes the H100 machines' hosts differ by up to 3x from one process to the next (bench/logs/
h100-2026-11-27v/README.md), more than two trees' host costs do. Here the other tree's ``attnplan/adapter``
(``DIR/attnplan/adapter``, e.g. ``git archive REV attnplan | tar -x -C DIR``) is loaded beside this one as
``attnplan_base.adapter`` - its relative imports stay inside it, its absolute ones (``attnplan.policy``, the
rules) are this tree's, so the comparison holds only where the two trees differ under ``attnplan/adapter``
alone (the script checks nothing else differs). Both executors plan the same steps on one plan; per step
shape, timed in turn call by call (``xqa_vs_fa2.host_only_each``: medians, synchronized before each call),
after 3 learning passes: this tree's ``plan_step``, the base's, and FlashInfer's whole plans with the
arguments this tree gives them, on a third executor's wrappers (this tree's, the replay off: a whole plan on
either tree's wrappers left tensors that tree's next step paid to free). The timer takes the three through every
rotation of their order and then the same reversed: a call's place in the order moved its median by ~8 % on the
H100 hosts (bench/logs/h100-2026-11-27w/README.md), and which call came right before it 2-5 % (with rotations
alone: bench/logs/h100-2026-11-27y/README.md). ``--base .`` times this tree against itself: the control, whose
difference is the comparison's own bias. Shapes: bench/general_step_host.py's six general steps (fa2 plan) and
bench/mla_prefill_host.py's four MLA prefill steps (fa2 and fa3 ragged prefill).
"""

from __future__ import annotations

import argparse
import filecmp
import importlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "gpu"), str(ROOT / "bench"), str(ROOT)]


def load_base(base: Path):
    """``base``'s adapter as the package ``attnplan_base.adapter``; SystemExit where the trees differ beyond it."""
    mine, theirs = ROOT / "attnplan", base / "attnplan"
    if not (theirs / "adapter").is_dir():
        raise SystemExit(f"adapter_ab: {theirs / 'adapter'} is not a directory")

    def differ(cmp: filecmp.dircmp, rel: str = "") -> list[str]:
        out = [f"{rel}{n}" for n in cmp.diff_files + cmp.left_only + cmp.right_only
               if not n.endswith((".pyc", "__pycache__"))]
        for name, sub in cmp.subdirs.items():
            if name != "__pycache__" and not (rel == "" and name == "adapter"):
                out += differ(sub, f"{rel}{name}/")
        return out
    other = differ(filecmp.dircmp(mine, theirs))
    if other:
        raise SystemExit(f"adapter_ab: the trees differ outside attnplan/adapter ({', '.join(other[:5])}): "
                         "this A/B would mix them")
    pkg = Path(tempfile.mkdtemp(prefix="adapter-ab-")) / "attnplan_base"
    shutil.copytree(theirs / "adapter", pkg / "adapter", ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "__init__.py").write_text('"""Another tree\'s attnplan/adapter (bench/adapter_ab.py)."""\n')
    sys.path.insert(0, str(pkg.parent))
    return importlib.import_module("attnplan_base.adapter")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, type=Path, help="a tree whose attnplan/adapter is the base")
    ap.add_argument("--steps", type=int, default=300, help="timed calls of each arm per shape and round")
    ap.add_argument("--rounds", type=int, default=4, help="passes over every shape (medians per pass)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--suites", default="fa2,mla-fa2,mla-fa3",
                    help="which of fa2 (the general steps), mla-fa2, mla-fa3 to time (comma-separated; each builds its "
                         "modules first where the JIT cache lacks them)")
    a = ap.parse_args()
    wanted = a.suites.split(",")
    unknown = set(wanted) - {"fa2", "mla-fa2", "mla-fa3"}
    if unknown:
        raise SystemExit(f"adapter_ab: no suite {', '.join(sorted(unknown))} (fa2, mla-fa2, mla-fa3)")
    base = load_base(a.base.resolve())
    import torch

    from decode_steps import PLANS, recorded_plan
    from general_step_host import SHAPES as GENERAL
    from gpu_common import answer, plan_or_raise, probed_node
    from mla_prefill_host import MLA, SHAPES as MLA_SHAPES
    from xqa_vs_fa2 import host_only_each

    from attnplan.adapter import AttentionExecutor, StepInput
    from attnplan.adapter.warmup import plan_modules, prebuild

    def inputs_for(page: int, shapes: list) -> list:
        out = []
        for what, q, seq, nd in shapes:
            width = max((s + page - 1) // page for s in seq)
            table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
            seq_cpu = torch.tensor(seq, dtype=torch.int32)
            out.append((what, StepInput(q, seq_cpu.cuda(), table, nd, seq_lens_cpu=seq_cpu)))
        return out

    general = [(w, [1] * len(d) + p, d + p, len(d)) for w, d, p in GENERAL]
    mla = [(w, [n for n, _ in r], [n + c for n, c in r], 0) for w, r in MLA_SHAPES]
    suites = [("fa2", lambda: plan_or_raise(*PLANS["fa2"]), general)]
    suites += [(f"mla-{b}", lambda b=b: answer(**MLA, attention_backend=b), mla) for b in ("fa2", "fa3")]
    suites = [(name, make(), shapes) for name, make, shapes in suites if name in wanted]
    rows = []
    print(f"base: {a.base}\n| plan | step | round | this tree: plan_step − plans | base: plan_step − plans | "
          "FlashInfer plans | this / base plan_step |\n|---|---|---|---|---|---|---|", flush=True)
    for name, ans, shapes in suites:
        prebuild([m for m in plan_modules(ans.plan) if name == "fa2" or m.phase == "prefill"])
        new = AttentionExecutor(ans, device="cuda", node=probed_node())
        old = base.AttentionExecutor(ans, device="cuda", node=probed_node())
        # FlashInfer's arm plans on wrappers of its own: on ``new``'s, each of its whole plans left tensors there
        # that ``new``'s next replay freed (its attributes set back to the step's), a cost ``old`` never paid. (The
        # 2-10 µs against this tree that runs of one tree's code on both sides showed came from the timer's order,
        # fixed in xqa_vs_fa2.host_only_each: bench/logs/h100-2026-11-27y/README.md.)
        ref = AttentionExecutor(ans, device="cuda", node=probed_node())
        ref.backend.general.enabled = False
        steps = inputs_for(new.plan.kv_cache.page_size, shapes)
        for _ in range(3):                   # learning: every shape thrice, as an engine's first steps
            for _, inp in steps:
                new.plan_step(inp)
                old.plan_step(inp)
                ref.plan_step(inp)
        for r in range(a.rounds):
            for what, inp in steps:
                plans = _fi_plans(ref, inp, recorded_plan)

                def fi(plans=plans):
                    for w, args, kw in plans:
                        w.plan(*args, **kw)
                # the two trees in turn, call by call; the timer rotates their order (no place bias)
                mine, theirs, fi_us = host_only_each([lambda: new.plan_step(inp), lambda: old.plan_step(inp), fi],
                                                     a.steps)
                rows.append(dict(plan=name, step=what, round=r + 1, plan_step_us=mine, base_plan_step_us=theirs,
                                 fi_plans_us=fi_us, fi_plans=len(plans)))
                print(f"| {name} | {what} | {r + 1} | {mine - fi_us:.0f} | {theirs - fi_us:.0f} | {fi_us:.0f} "
                      f"({len(plans)}) | {mine / theirs:.2f} |", flush=True)
        del new, old, ref
        torch.cuda.synchronize()
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


def _fi_plans(ex, inp, recorded_plan) -> list:
    """(wrapper, args, kwargs) of every FlashInfer plan this step makes, recorded with the replay off: the
    phases' wrappers of a general step, the ragged parts' of an MLA prefill step."""
    from decode_steps import swapped

    g = ex.backend.general
    wrappers = [ex.backend._wrappers[p] for p in ("decode", "prefill")] + list(ex.backend.parts.values())
    step = ex.plan_step(inp)
    ex._staging.release(step.extra.get("staging_slot", -1))
    out = []
    for w in wrappers:
        if w is None or any(w is x for x, _, _ in out):
            continue
        try:
            args, kw = recorded_plan(w, swapped(g, "enabled", False, lambda: ex.plan_step(inp)))
        except KeyError:                     # this step plans nothing on that wrapper
            continue
        out.append((w, args, kw))
    return out


if __name__ == "__main__":
    main()
