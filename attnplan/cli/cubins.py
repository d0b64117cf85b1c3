"""``attnplan cubins MODEL|--model-config ... [--device|--capability] [--json]``: the trtllm-gen cubins a
deployment loads, with their sha256, and which of them are missing on this node.

For each attention layer group and each trtllm-gen phase of its plan (trtllm-gen, trtllm-gen-mla,
trtllm-ragged), the kernels FlashInfer selects at every serving shape (attnplan.kernels.trtllm_gen.phase),
named by FlashInfer's own kernel table: the node's (where FlashInfer looks: FLASHINFER_CUBIN_DIR, a
flashinfer-cubin of flashinfer's version, the cache) when probing this machine and it is on disk, else the
table attnplan ships. On this machine each cubin is checked on disk; an air-gapped fleet pre-stages the
listed files (``flashinfer download-cubin``, or ``pip install flashinfer-cubin==<flashinfer's version>``).

Exit 0: every cubin is known (and, on this machine, on disk); 1: a phase has no kernel, or cubins are
missing here; 2: bad input, or a corrupt / truncated / foreign table on the node (the error names it).
"""

from __future__ import annotations

import argparse
from typing import Any, Optional

from attnplan.errors import InvalidInputError

from .main import emit_json
from .options import add_config_args, add_node_args, add_rules_arg, config_from_args, node_from_args, ruleset_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cubins", help="the trtllm-gen cubins a deployment loads (sha256) and what is missing here",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__)
    add_config_args(p)
    add_node_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--engine", metavar="ENGINE", default=None,
                   help="engine layer: vllm (default), vllm==0.33.0, or flashinfer (kernel rules alone)")
    add_rules_arg(p)
    p.set_defaults(run=run)


def _phases(args: argparse.Namespace, rs: Any, node: Any) -> list[tuple[str, Any, str, str, Any]]:
    """(group label, config, phase, backend, page, phase plan) for every phase the plan runs through a
    trtllm-gen FMHA entry point of FlashInfer."""
    from attnplan.kernels.trtllm_gen.phase import ENTRY_POINTS
    from attnplan.policy import parse_engine, plan_for

    out = []
    if getattr(args, "model_config", None):
        # the one request a model's flags make (attnplan/request.py: as plan, explain, preflight and labels
        # parse them), through the one pipeline; a split the engine refuses at startup plans no phase
        from attnplan.request import plan_request

        from .plan import model_request

        req, _, _ = model_request(args, rs)
        model = plan_request(req, node, rs, allow_paths=True, model_field="model_config").model
        groups = [] if model is None else [
            (f"layers {g.layers[0]}-{g.layers[-1]}" if getattr(g, "layers", None) else "group", g.config,
             g.prefill, g.decode, g.kv_cache) for g in model.attention_groups if g.config is not None]
    else:
        engine = parse_engine(args.engine, rs)
        answer = plan_for(config_from_args(args), node, ruleset=rs, engine=engine)
        p = answer.plan
        groups = [("model", answer.config, p.prefill if p else None, p.decode if p else None, p.kv_cache if p else None)]
    for label, config, prefill, decode, kv in groups:
        for phase, pp in (("prefill", prefill), ("decode", decode)):
            if pp is not None and pp.entry_point.rsplit(".", 1)[-1] in ENTRY_POINTS:
                out.append((label, config, phase, pp.backend, kv.page_size if kv is not None else None, pp))
    return out


def run(args: argparse.Namespace) -> int:
    from attnplan.kernels.trtllm_gen import phase as tg
    from attnplan.kernels.trtllm_gen.table import TableError
    from attnplan.node import local_node
    from attnplan.node.probe import probe_trtllm_table

    rs = ruleset_from_args(args)
    declared = node_from_args(args)
    node = declared if declared is not None else local_node()
    fi = node.flashinfer_version.value
    node_table = None
    if declared is None:
        try:
            node_table = probe_trtllm_table(flashinfer_version=None)
        except TableError as exc:
            raise InvalidInputError("cubins", f"{exc}; this node is not ready") from None
    table = node_table.table if node_table is not None and node_table.table is not None else None
    cap = node.capability.value
    rows: list[dict[str, Any]] = []
    failed = False
    for label, config, phase, backend, page, pp in _phases(args, rs, node):
        call = tg.phase_call(
            pp.entry_point, query_dtype=pp.query_dtype, kv_dtype=config.kv_dtype, out_dtype=pp.output_dtype,
            head_dim_qk=config.qk_head_dim, head_dim_vo=config.vo_head_dim, num_qo_heads=config.num_qo_heads,
            num_kv_heads=config.kv_heads, num_speculative_tokens=config.num_speculative_tokens,
            sliding_window=config.sliding_window, kv_lora_rank=config.kv_lora_rank,
            qk_rope_head_dim=config.qk_rope_head_dim)
        d = tg.decide(call, cap, page, str(fi), table) if call is not None and isinstance(cap, int) else None
        entry: dict[str, Any] = {"group": label, "phase": phase, "backend": backend, "page_size": page}
        if d is None:
            entry["decided"] = False
            entry["why"] = f"flashinfer {fi} on capability {cap}: no known kernel table and selection code"
        else:
            t = table if table is not None else None
            sha = _sha_map(t if t is not None else _shipped_for(fi))
            entry.update(decided=True, decided_by=d.provenance(), missing_kernel=d.missing,
                         cubins=[{"file": c, "sha256": sha.get(c[:-len(".cubin")]),
                                  "on_disk": node_table.on_disk(c) if node_table is not None else None}
                                 for c in d.cubins])
            failed |= d.missing is not None or any(c["on_disk"] is False for c in entry["cubins"])
        rows.append(entry)
    doc = {"flashinfer_version": fi, "capability": cap,
           "table": (node_table.why if node_table is not None else "the shipped table (declared node)"),
           "notes": list(node_table.location.notes) if node_table is not None else [],
           "phases": rows,
           "prestage": sorted({c["file"] for r in rows for c in r.get("cubins", [])}),
           "how": "flashinfer download-cubin (or pip install flashinfer-cubin==<flashinfer's version>), then "
                  "FLASHINFER_CUBIN_DIR=<that directory>"}
    if args.json:
        emit_json(doc)
    else:
        print(_text(doc))
    return 1 if failed else 0


def _shipped_for(fi: Optional[str]):
    from attnplan.kernels.trtllm_gen.table import shipped
    return shipped()


def _sha_map(table) -> dict[str, str]:
    return {r["mFuncName"]: r["sha256"] for r in table.rows}


def _text(doc: dict[str, Any]) -> str:
    lines = [f"flashinfer {doc['flashinfer_version']} on capability {doc['capability']}; table: {doc['table']}"]
    lines += [f"note: {n}" for n in doc["notes"]]
    if not doc["phases"]:
        lines.append("no phase runs trtllm-gen: no cubins needed")
    for r in doc["phases"]:
        head = f"{r['group']} {r['phase']} ({r['backend']}, page {r['page_size']})"
        if not r.get("decided"):
            lines.append(f"{head}: not decided ({r['why']})")
            continue
        if r["missing_kernel"]:
            lines.append(f"{head}: MISSING KERNEL: {r['missing_kernel']}")
        lines.append(f"{head}: {len(r['cubins'])} cubin(s), decided by {r['decided_by']}")
        for c in r["cubins"]:
            where = "" if c["on_disk"] is None else ("  on disk" if c["on_disk"] else "  NOT ON DISK")
            lines.append(f"  {c['sha256']}  {c['file']}{where}")
    if doc["prestage"]:
        lines.append(f"pre-stage for an air-gapped fleet: {len(doc['prestage'])} file(s) ({doc['how']})")
    return "\n".join(lines)
