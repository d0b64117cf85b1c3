"""``python -m attnplan.verify.child``: run one probe (a JSON spec on stdin), print one JSON line.

Runs in its own process so that a crash, a CUDA error that poisons the context, or a hang
(killed by the parent's time limit) ends this probe only.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any


def run_probe(spec: dict[str, Any], device: str = "cuda", execute: Any = None) -> dict[str, Any]:
    """Inputs, the FlashInfer call (``execute`` runs its steps: ``calls.execute``), the reference."""
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
        msg = " ".join(str(exc).split())[:600]
        return {"outcome": "error", "error": f"{type(exc).__name__}: {msg}", "seconds": time.perf_counter() - t0}
    out = inp.out if result is None or isinstance(result, tuple) else result
    ref = calls.reference(spec, inp)
    return compare(out.float(), ref, float(spec["tolerance"]), time.perf_counter() - t0)


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


def main() -> int:
    spec = json.loads(sys.stdin.read())
    print(json.dumps(run_probe(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
