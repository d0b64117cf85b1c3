"""``python -m attnplan.verify.child [--batch]``: run one probe (a JSON spec on stdin), or one JIT
module's probes (JSON lines), printing one JSON line per probe.

Runs in its own process so that a crash, a CUDA error that poisons the context, or a hang
(killed by the parent's time limit) ends that process only (runner.py runs the rest anew).
"""

from __future__ import annotations

import json
import math
import re
import resource
import sys
import time
from typing import Any


def cpu_seconds() -> float:
    """User + system CPU of this process and of every descendant it has reaped: a JIT build's
    ninja and nvcc processes (FlashInfer waits for ninja, ninja for each nvcc), so the first probe
    of a module carries what its build cost, whatever else runs beside it on the machine."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_probe(spec: dict[str, Any], device: str = "cuda", execute: Any = None) -> dict[str, Any]:
    """Inputs, the FlashInfer call (``execute`` runs its steps: ``calls.execute``), the reference;
    ``cpu_s``: what it all cost in CPU, a JIT build included."""
    c0 = cpu_seconds()
    res = _run(spec, device, execute)
    res["cpu_s"] = round(cpu_seconds() - c0, 3)
    return res


def _run(spec: dict[str, Any], device: str, execute: Any) -> dict[str, Any]:
    import torch

    from . import calls

    t0 = time.perf_counter()
    torch.manual_seed(int(spec.get("seed", 0)))
    dev = torch.device(device)
    try:
        inp = calls.make_inputs(spec, torch, dev)
        ws = torch.zeros(calls.WORKSPACE_BYTES if dev.type == "cuda" else 16, dtype=torch.uint8, device=dev)
        result = (execute or calls.execute)(calls.CALLS[spec["call"]](spec, inp, torch, ws))
        if dev.type == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - every failure of the kernel call is the probe's result
        return {"outcome": "error", "error": error_text(exc), "seconds": time.perf_counter() - t0}
    out = inp.out if result is None or isinstance(result, tuple) else result
    ref = calls.reference(spec, inp)
    return compare(out.float(), ref, float(spec["tolerance"]), time.perf_counter() - t0)


def error_text(exc: BaseException, head: int = 300, limit: int = 1500) -> str:
    """The exception's first words and, for a failed JIT build, the compiler's own diagnostics:
    FlashInfer's "Ninja build failed" message starts with the nvcc command line, so its first 600
    characters never reached the error that made the build fail (the XQA builds of the 2026-11-25
    sweep are recorded without their cause)."""
    text = str(exc)
    flat = " ".join(text.split())
    msg = f"{type(exc).__name__}: {flat[:head]}"
    diags = [" ".join(ln.split()) for ln in text.splitlines()
             if re.search(r"\berror\b|static assertion|static_assert|FAILED:", ln) and "nvcc " not in ln and not ln.lstrip().startswith("[")]
    if len(flat) > head and diags:
        msg += " ... " + " | ".join(dict.fromkeys(diags))
    return msg[:limit]


def compare(out: Any, ref: Any, tol: float, seconds: float = 0.0) -> dict[str, Any]:
    """ok when finite everywhere and max |out - ref| / max |ref| <= tol, else wrong."""
    import torch

    if out.shape != ref.shape:
        return {"outcome": "wrong", "error": f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}",
                "seconds": seconds}
    nan = int((~torch.isfinite(out)).sum())
    ref = ref.to(out.device)
    err = float(((out - ref).abs().nan_to_num(float("inf"))).max() / ref.abs().max().clamp(min=1e-6))
    ok = nan == 0 and err <= tol
    res = {"outcome": "ok" if ok else "wrong", "rel_err": err if math.isfinite(err) else None,  # JSON has no inf
           "nonfinite": nan, "tolerance": tol, "seconds": seconds}
    if not ok:
        res["error"] = f"{nan} non-finite outputs" if nan else f"relative error {err:.3g} > {tol:g}"
    return res


def main(argv: list[str] | None = None) -> int:
    """One spec on stdin; or with ``--batch``, one spec per line (one JIT module's probes), each
    answered by a line as it finishes. A batch stops after a probe that errors: a CUDA error
    leaves the context unusable, so the parent runs the rest in a fresh process."""
    if "--batch" in (sys.argv[1:] if argv is None else argv):
        for line in sys.stdin.read().splitlines():
            if not line.strip():
                continue
            res = run_probe(json.loads(line))
            print(json.dumps(res), flush=True)
            if res["outcome"] == "error":
                break
        return 0
    spec = json.loads(sys.stdin.read())
    print(json.dumps(run_probe(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
