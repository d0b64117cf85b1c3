"""Issue 22, fifth session: the sweep's four fa3 sink findings (findings.jsonl: s0032 wrong,
s0055 error, s0058 and s0765 hang), each re-run in a fresh process, with variants that keep or
change one factor, to find what the rule must say. One subprocess per variant (a hang or a CUDA
error ends it only); the modules build first, in parallel, then the variants run.

usage: python diagnose.py findings.jsonl OUT.jsonl [--jobs N] [--timeout S]
Each line of OUT: the variant's name, what it changed, and the probe's result; for non-finite
output, which (request, head) rows were left unwritten (the output starts as NaN: calls._poisoned).
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time


def variants(base: dict) -> list[tuple[str, dict]]:
    s = base["spec"]
    pid = base["id"].split("-")[0]
    out = [(f"{pid} repro", {}), (f"{pid} seed+1", {"seed": s["seed"] + 1})]
    if pid == "s0032":   # bf16 256 window 63, page 128, 4/2 heads, q [7,33,64,1] over kv [45,160,301,90]
        out += [
            ("s0032 seed+2", {"seed": s["seed"] + 2}),
            ("s0032 page 16", {"page_size": 16}),
            ("s0032 page 1", {"page_size": 1}),
            ("s0032 heads 4/4", {"num_kv_heads": 4}),
            ("s0032 heads 4/1", {"num_kv_heads": 1}),
            ("s0032 heads 8/2", {"num_qo_heads": 8}),
            ("s0032 window 999", {"window_left": 999}),
            ("s0032 window 127", {"window_left": 127}),
            ("s0032 window 31", {"window_left": 31}),
            ("s0032 no sinks", {"sinks": False}),
            ("s0032 only r0 7/45", {"q_lens": [7], "kv_lens": [45]}),
            ("s0032 only r1 33/160", {"q_lens": [33], "kv_lens": [160]}),
            ("s0032 only r2 64/301", {"q_lens": [64], "kv_lens": [301]}),
            ("s0032 only r3 1/90", {"q_lens": [1], "kv_lens": [90]}),
            ("s0032 no history", {"kv_lens": [7, 33, 64, 1]}),
            ("s0032 r0+r3", {"q_lens": [7, 1], "kv_lens": [45, 90]}),
            ("s0032 fp16", {"query_dtype": "float16", "kv_view_dtype": "float16", "output_dtype": "float16"}),
            ("s0032 head 128", {"head_dim_qk": 128, "head_dim_vo": 128, "sm_scale": 128 ** -0.5}),
        ]
    if pid == "s0055":   # bf16 64 no window, page 1, 24/1 heads, q 1500 over 1500
        out += [
            ("s0055 page 16", {"page_size": 16}),
            ("s0055 heads 8/2", {"num_qo_heads": 8, "num_kv_heads": 2}),
            ("s0055 q 37/37", {"q_lens": [37], "kv_lens": [37]}),
            ("s0055 fp16", {"query_dtype": "float16", "kv_view_dtype": "float16", "output_dtype": "float16"}),
            ("s0055 window 999", {"window_left": 999}),
            ("s0055 no sinks", {"sinks": False}),
        ]
    if pid in ("s0058", "s0765"):
        out += [
            (f"{pid} fp16", {"query_dtype": "float16", "kv_view_dtype": "float16", "output_dtype": "float16"}),
            (f"{pid} window 999", {"window_left": 999}),
        ]
    return [(n, {**s, **ch, "_changed": ch}) for n, ch in out]


def module_of(spec: dict) -> tuple:
    return (spec["query_dtype"], spec["kv_view_dtype"], spec["head_dim_qk"], spec["window_left"] >= 0)


CHILD = r"""
import json, sys, torch
from attnplan.verify import child, calls
spec = json.loads(sys.stdin.read())
res = child.run_probe(spec)
if res.get("outcome") == "wrong":
    torch.manual_seed(int(spec["seed"]))
    dev = torch.device("cuda")
    inp = calls.make_inputs(spec, torch, dev)
    ws = torch.zeros(calls.WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    calls.execute(calls.CALLS[spec["call"]](spec, inp, torch, ws)); torch.cuda.synchronize()
    bad = ~torch.isfinite(inp.out.float())          # (tokens, heads, dim)
    rows, start = [], 0
    for r, n in enumerate(inp.q_lens):
        b = bad[start:start + n]
        heads = sorted({int(h) for h in b.any(-1).nonzero()[:, 1].tolist()})
        toks = b.any(-1).any(-1).nonzero().flatten().tolist()
        rows.append({"request": r, "q_len": n, "bad_tokens": len(toks), "first_bad": toks[:1], "last_bad": toks[-1:], "bad_heads": heads,
                     "bad_dims_per_bad_row": int(b.sum().item() // max(1, b.any(-1).sum().item()))})
        start += n
    res["rerun_nonfinite"] = int(bad.sum()); res["where"] = rows
print(json.dumps(res), flush=True)
"""


def run(name: str, spec: dict, timeout: float) -> dict:
    t0 = time.time()
    changed = spec.pop("_changed")
    try:
        p = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(spec), capture_output=True, text=True, timeout=timeout)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        res = json.loads(line[-1]) if line else {"outcome": "crash", "rc": p.returncode, "stderr": p.stderr[-800:]}
    except subprocess.TimeoutExpired:
        res = {"outcome": "hang", "error": f"no answer within {timeout:g}s (killed)"}
    return {"variant": name, "changed": changed, "module": module_of(spec), **res, "wall": round(time.time() - t0, 1)}


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 6
    timeout = float(sys.argv[sys.argv.index("--timeout") + 1]) if "--timeout" in sys.argv else 90
    bases = [json.loads(ln) for ln in open(src) if ln.strip()]
    todo = [v for b in bases for v in variants(b)]
    first: dict[tuple, tuple] = {}
    for name, spec in todo:
        first.setdefault(module_of(spec), (name, spec))
    os.environ.setdefault("MAX_JOBS", str(max(2, 16 // len(first))))
    out = open(dst, "a")

    def emit(r: dict) -> None:
        out.write(json.dumps(r) + "\n"); out.flush()
        print(f"{r['wall']:7.1f}s {r['outcome']:6} {r.get('rel_err')} {r.get('error', '')[:120]}  {r['variant']}", flush=True)

    # builds: one variant per module, in parallel, with the build's own limit
    with cf.ThreadPoolExecutor(len(first)) as ex:
        for r in ex.map(lambda nv: run(nv[0], dict(nv[1]), 1500), first.values()):
            emit(r)
    done = {nv[0] for nv in first.values()}
    with cf.ThreadPoolExecutor(jobs) as ex:
        for r in ex.map(lambda nv: run(nv[0], dict(nv[1]), timeout), [nv for nv in todo if nv[0] not in done]):
            emit(r)


if __name__ == "__main__":
    main()
