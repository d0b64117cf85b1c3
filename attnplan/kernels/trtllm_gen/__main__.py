"""``python -m attnplan.kernels.trtllm_gen [--json]``: what FlashInfer's trtllm-gen kernel table holds, for the
questions the seeds ask (which SMs, head 512 per dtype/page/kernel type, NVFP4 per SM and dtype), read from the
shipped table (pin 158f6fa1, flashinfer-cubin 0.6.13) and the runners' architecture checks."""

from __future__ import annotations

import sys

import argparse
import json
from collections import defaultdict
from typing import Any

from .table import KernelTable, shipped

_KT = {0: "context", 1: "generation", 2: "generation (swaps AB)", 3: "generation (keeps AB)", 4: "spec-decoding"}
_SM = {100: "sm_100a", 103: "sm_103a", 10100: "sm_100f (10.0, 10.3; 10.7 on 0.7.x)"}


def _pages(rows) -> str:
    ps = sorted({r["mNumTokensPerPage"] for r in rows if r["mQkvLayout"] == 2})
    return ",".join(str(p) for p in ps) or "-"


def summary(t: KernelTable) -> dict[str, Any]:
    by_sm = defaultdict(int)
    for r in t.rows:
        by_sm[_SM.get(r["mSM"], str(r["mSM"]))] += 1
    h512: dict[str, list] = defaultdict(list)
    nvfp4: dict[str, list] = defaultdict(list)
    for r in t.rows:
        key = f"Q {r['mDataTypeQ']} / KV {r['mDataTypeK']} / O {r['mDataTypeO']} {_KT[r['mKernelType']]}"
        if r["mHeadDimQk"] == 512 and r["mHeadDimV"] == 512:
            h512[key].append(r)
        if r["mDataTypeK"] == "E2M1":
            nvfp4[f"{_SM.get(r['mSM'], r['mSM'])} {key} H{r['mHeadDimQk']}"].append(r)
    return {
        "table": t.pin, "kernels": len(t.rows), "kernels_per_sm": dict(by_sm),
        "runners": {"flashinfer 0.6.13": "SM 10.0, 10.3 (fmhaRunner.cuh)",
                    "flashinfer 0.7.2.post1": "SM 10.0, 10.3, 10.7 (fmhaRunner.cuh; sm_100f kernels serve 10.7)"},
        "head_512": {k: {"kernels": len(v), "pages": _pages(v)} for k, v in sorted(h512.items())},
        "nvfp4_kv": {k: {"kernels": len(v), "pages": _pages(v)} for k, v in sorted(nvfp4.items())},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    s = summary(shipped())
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    print(f"table {s['table'][:8]}: {s['kernels']} kernels; per SM: {s['kernels_per_sm']}")
    for k, v in s["runners"].items():
        print(f"  {k} runs trtllm-gen on {v}")
    print("head 512 (qk = vo = 512):")
    for k, v in s["head_512"].items():
        print(f"  {k}: {v['kernels']} kernels, pages {v['pages']}")
    print("NVFP4 KV (E2M1):")
    for k, v in s["nvfp4_kv"].items():
        print(f"  {k}: {v['kernels']} kernels, pages {v['pages']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
