"""``attnplan compare MODEL --device H100,B200,"RTX PRO 6000"``: what vLLM 0.33 and SGLang 0.5.23 each run, per GPU.

One row per GPU and engine (and attention layer group for layered models), for one tensor-parallel rank:
each engine's backend per phase (SGLang's own name, and the FlashInfer backend it runs or that it runs
none), the page size given and run, the query dtype per phase, silent coercions and refusals with the
phase at which the engine fails. Each row's status is the verdict of that engine's command (runs,
fails-at-startup / -graph-capture / -first-request, wrong-output), by one standard for both engines.
Exit 0 when every row runs, 1 otherwise, 2 bad input.
"""

from __future__ import annotations

import argparse

from .main import emit_json
from .options import add_rules_arg, ruleset_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="vLLM 0.33 vs SGLang 0.5.23 per GPU for one model (backends, pages, coercions, refusals)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="a config.json, a model directory or a cached repo id")
    p.add_argument("--device", required=True, help='comma-separated GPUs from the device catalog, e.g. H100,B200,"RTX PRO 6000"')
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (each row is one rank)")
    p.add_argument("--kv-cache-dtype", default="auto", help="auto, fp8, fp8_e4m3, fp8_e5m2, bf16 or nvfp4 (both engines)")
    p.add_argument("--page-size", type=int, default=None, help="the block/page size given to both engines (default: theirs)")
    p.add_argument("--json", action="store_true", help="the rows as JSON (as POST /v1/compare returns them)")
    add_rules_arg(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from attnplan.compare import compare, render_compare

    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    rep = compare(args.model, devices, tp=args.tp, kv_cache_dtype=args.kv_cache_dtype, page_size=args.page_size,
                  ruleset=ruleset_from_args(args))
    if args.json:
        emit_json(rep)
    else:
        print(render_compare(rep))
    # 0 when every engine's command runs on every GPU (each row's verdict), 1 otherwise
    # the verdict of each engine command, as `vllm serve` / `sglang launch_server` give it (a split the engine
    # refuses is its startup failure: exit 1)
    return 0 if all((c["verdict"] or {}).get("outcome") == "runs" for c in rep["commands"]) else 1
