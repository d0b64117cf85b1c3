"""How warm-up should compile a plan's FlashInfer JIT modules: a benchmark of build strategies,
each from an empty JIT cache in a fresh process (needs a GPU machine with nvcc).

    python3 bench/jit_prebuild.py --model mla --strategies warmup,combined --out DIR

Strategies:
  warmup    kernels_adapter.warmup.prebuild: one ninja over every module, -j MAX_JOBS, in a
            private directory whose ninja records are then handed to each module's directory
  combined  flashinfer.jit.build_jit_specs: one ninja over every module, run from the JIT root
  serial    each module's FlashInfer getter in turn (what the first request does without warm-up)

For each: wall seconds, every compile edge's duration from the ninja logs (CPU-seconds of work
and the longest edge, the critical path no strategy can beat), and what the getter's own ninja
would still rebuild at the first request (``ninja -n`` in the module's directory): a strategy
that leaves work there only moves the compile to the first request.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = {
    "mla": [dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
            dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                 attention_backend="fa2")],
    "llama": [dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)],
}


def plan_specs(model: str) -> tuple[list, list]:
    from attnplan import AttentionConfig, require_plan

    from attnplan.adapter.warmup import _module_spec, plan_modules

    mods = {m.name: m for cfg in MODELS[model] for m in plan_modules(require_plan(AttentionConfig(**cfg)).plan)}
    mods = [m for m in mods.values() if m.kind == "jit"]
    return mods, [_module_spec(m) for m in mods]


def ninja_edges(log: Path, outputs: set[str] | None = None) -> list[tuple[str, float]]:
    """(output, seconds) of every edge in a ninja log, the last run of each output."""
    if not log.exists():
        return []
    last = {}
    for line in log.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _mtime, out, _hash = line.split("\t")[:5]
        if outputs is None or out in outputs:
            last[out] = (int(end) - int(start)) / 1e3
    return sorted(last.items(), key=lambda kv: -kv[1])


def child(model: str, strategy: str, out: Path) -> None:
    from flashinfer.jit import env

    from attnplan.adapter.ninja_builds import NinjaBuild, pending_edges
    from attnplan.adapter.warmup import _module_loader, prebuild

    mods, specs = plan_specs(model)
    t0 = time.perf_counter()
    if strategy == "warmup":
        prebuild(mods)
    elif strategy == "combined":
        from flashinfer.jit import build_jit_specs

        build_jit_specs(specs)
    else:
        for m in mods:
            _module_loader(m)()
    wall = time.perf_counter() - t0
    root = Path(env.FLASHINFER_JIT_DIR)
    edges = []
    for spec in specs:
        log = (root if strategy == "combined" else spec.build_dir) / ".ninja_log"
        outs = {str(p) for p in _outputs(spec)}      # a handed-over log holds every module's records
        edges += [(f"{spec.name}/{Path(o).name}", s) for o, s in ninja_edges(log, outs)]
    edges.sort(key=lambda e: -e[1])
    res = dict(model=model, strategy=strategy, wall_s=round(wall, 1), modules=[s.name for s in specs],
               sources=[len(s.sources) for s in specs], edges=len(edges),
               cpu_s=round(sum(s for _, s in edges), 1), longest=edges[:3],
               left_for_first_request={s.name: pending_edges(NinjaBuild(s.build_dir, s.ninja_path)) for s in specs},
               max_jobs=os.environ.get("MAX_JOBS"), cpus=os.cpu_count())
    out.write_text(json.dumps(res, indent=1))


def _outputs(spec) -> list[Path]:
    """Absolute outputs named in the module's ninja file (FlashInfer writes them absolute)."""
    outs = []
    for line in spec.ninja_path.read_text().splitlines():
        if line.startswith("build ") and ":" in line:
            outs += [Path(p) for p in line[6:].split(":")[0].split()]
    return outs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="mla")
    ap.add_argument("--strategies", default="warmup,combined", help="comma list of warmup, combined, serial")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--limit", type=float, default=280.0, help="seconds per strategy before it is killed")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    out = Path(a.out)
    if a.child:
        child(a.model, a.child, out)
        return
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for strategy in a.strategies.split(","):
        ws = Path(tempfile.mkdtemp(prefix=f"fi-{strategy}-"))
        report = out / f"jit-{a.model}-{strategy}.json"
        env = dict(os.environ, FLASHINFER_WORKSPACE_BASE=str(ws))
        try:
            subprocess.run([sys.executable, __file__, "--model", a.model, "--child", strategy, "--out", str(report)],
                           env=env, timeout=a.limit, check=True)
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as e:
            print(f"{strategy}: {e}")
            continue
        finally:
            shutil.rmtree(ws, ignore_errors=True)
        r = json.loads(report.read_text())
        results.append(r)
        print(f"{a.model} {strategy}: {r['wall_s']}s wall, {r['edges']} edges, {r['cpu_s']} CPU-s, "
              f"longest {r['longest'][0] if r['longest'] else '-'}, left for first request {r['left_for_first_request']}",
              flush=True)
    (out / f"jit-{a.model}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
