"""``plan``, ``explain``, ``node``, ``rules``, ``matrix``: the engine from the command line."""

from __future__ import annotations

import argparse

from attnplan.policy import EngineSpec, Explanation, RuleSet, explain, parse_engine, plan_for, resolve_engine
from attnplan.model import explain_groups
from attnplan.policy import NodeFacts
from attnplan.policy.answer import node_json
from attnplan.render.verdict import finish
from attnplan.render import (entry_inputs, render_answer, render_explain, render_groups, render_groups_explain, render_node,
                             render_rules, render_verdict, rules_json)

from attnplan.engine_request import with_backend
# plan_json (render/answer.py) is imported by --json alone: the tables' path does not load it (issue 36 item 6)

from .main import emit_json
from .options import (add_config_args, add_node_args, add_rules_arg, config_fields_from_args, config_from_args,
                      tensor_parallel_from_args,
                      node_from_args, ruleset_from_args)


def add_engine_arg(p: argparse.ArgumentParser, help_: str = "") -> None:
    p.add_argument("--engine", metavar="ENGINE", default=None,
                   help=help_ or "engine layer: vllm (default: the vllm installed here, else the newest modelled), "
                                 "vllm==0.33.0, or flashinfer (kernel rules alone)")


def add_require_flashinfer_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--require-flashinfer", action="store_true",
                   help="exit 1 also when the engine runs a backend that is not FlashInfer's (fleets that mandate it)")


def verdict_exit(answer, args: argparse.Namespace) -> int:
    """The exit code of an answer (PlanAnswer, ModelPlanAnswer): its verdict's (0 runs, 1 otherwise)."""
    v = getattr(answer, "verdict", None)
    if v is None:
        return 0 if answer.ok else 1
    return v.exit_code(require_flashinfer=bool(getattr(args, "require_flashinfer", False)))


def add_parser(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("plan", help="the backend plan for an attention config on a node",
                       formatter_class=fmt, description=(
                           "Evaluate every rule for this config on this node (or a declared one) and print the\n"
                           "backend plan, or the rejection with every violated rule and verified suggestions.\n"
                           "With --model-config, every attention layer group of the model is planned (sliding/\n"
                           "global, chunked local; non-attention layers are noted); explicit flags override.\n"
                           "The answer leads with the verdict of the command as given: the engine's own backend\n"
                           "and what happens (runs, fails at startup / graph capture / first request, wrong output);\n"
                           "the FlashInfer plan follows, for the command itself or 'if forced'.\n"
                           "Exit 0: the command runs, 1: any other outcome, 2: bad input."))
    add_config_args(p)
    add_node_args(p)
    add_require_flashinfer_arg(p)
    p.add_argument("--json", action="store_true", help="print the JSON contract (docs/contract.md) instead of tables")
    p.add_argument("--no-trace", action="store_true", help="leave the per-rule trace out of --json")
    add_engine_arg(p)
    add_rules_arg(p)
    p.set_defaults(run=run_plan)

    p = sub.add_parser("explain", help="backend x rule grid: why each backend passes or fails",
                       formatter_class=fmt, description=(
                           "Every backend of the model's kind, in each phase, against every rule, with the\n"
                           "facts each rule read. Exit codes as for plan."))
    add_config_args(p)
    add_node_args(p)
    p.add_argument("--json", action="store_true", help="print the grid as JSON")
    add_engine_arg(p)
    add_rules_arg(p)
    p.set_defaults(run=run_explain)

    p = sub.add_parser("node", help="this machine's facts (NVML, packages, cubins, artifactory)")
    add_node_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run_node)

    p = sub.add_parser("rules", help="every rule: id, layer, versions, title, backends, source, provenance")
    p.add_argument("--json", action="store_true", help="print JSON, with each rule's conditions")
    add_engine_arg(p, "show only the rules of this engine layer (vllm, vllm==X, flashinfer); default: all")
    add_rules_arg(p)
    p.set_defaults(run=run_rules)

    p = sub.add_parser("matrix", help="capability matrix derived from the rules")
    p.add_argument("--format", choices=["markdown", "json"], default="markdown")
    p.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    add_engine_arg(p, "one engine layer (vllm or flashinfer); default: every engine layer in turn")
    add_rules_arg(p)
    p.set_defaults(run=run_matrix)


def _node(args: argparse.Namespace):
    n = node_from_args(args)
    if n is not None:
        return n
    from attnplan.node import local_node   # probing: only when no node is declared

    return local_node()


def _engine(args: argparse.Namespace, rs: RuleSet) -> EngineSpec:
    """``--engine``, parsed once for the command (an engine the rules do not model: exit 2), with the parts of
    the request that are the engine's own (under SGLang: its --attention-backend, taken out of the attention
    config: attnplan/engine_request.py)."""
    spec = parse_engine(args.engine, rs)
    # (the model's architecture, which SGLang's overrides key on, joins in plan_model: policy/engines.py
    # engine_request_for_model)
    spec, backend = with_backend(spec, getattr(args, "attention_backend", None))
    args.attention_backend = backend
    return spec


def model_request(args: argparse.Namespace, rs: RuleSet) -> "tuple[ModelRequest, EngineSpec, NodeFacts]":
    """``--model-config X [flags]`` as the one request every entry point builds (attnplan/request.py ModelRequest: a
    serve line, a launch line and a REST body are the same object), parsed by the one parse of a model's flags
    (``request_from_fields``, as ``preflight --model-config`` and ``labels`` parse theirs): the engine command's
    flags (``--kv-cache-dtype`` in the engine's own spelling, ``--block-size``, ``--tensor-parallel-size``, ...) on
    the request's fields, the attention fields in attnplan's vocabulary (``--head-dim``, ``--sliding-window``, ...)
    as ``overrides`` laid over every layer group; under SGLang its own --attention-backend name
    (attnplan/engine_request.py). Returns the engine (``explain`` grids each group under it) and the node too."""
    from attnplan.request import request_from_fields   # the model path's own import: plan --head-dim skips it

    raw_backend = getattr(args, "attention_backend", None)
    engine = _engine(args, rs)   # an engine the rules do not model: exit 2, before anything is read
    node = _node(args)
    fields = config_fields_from_args(args)
    fields["tensor_parallel_size"] = tensor_parallel_from_args(args)   # malformed (0, -1, "x"): exit 2
    if engine.name == "sglang":   # SGLang's own backend name rides in the request, as a launch line sets it
        fields["attention_backend"] = raw_backend
    req = request_from_fields(args.model_config, fields, engine=args.engine)
    return req, engine, node


def _model(args: argparse.Namespace, rs: RuleSet) -> "tuple[ServeAnswer, EngineSpec]":
    """--model-config: every layer group of the model, through the one pipeline of model requests
    (attnplan/request.py plan_request), as ``vllm serve``, ``sglang launch_server``, REST and preflight plan it."""
    from attnplan.request import plan_request

    req, engine, node = model_request(args, rs)
    return plan_request(req, node, rs, allow_paths=True, model_field="model_config"), engine


def _refused_at_startup(sa, args: argparse.Namespace) -> int:
    """A split the engine refuses at startup (tensor parallelism that does not divide the heads, DCP limits): its
    ``fails-at-startup`` verdict in the engine's own words, exit 1, as ``vllm serve`` / ``sglang launch_server`` say
    for the same command (issue 36 item 1: one input, one answer on every surface). A malformed split (0, -1, not
    an integer) never gets here: bad input, exit 2 (cli/options.py tensor_parallel_from_args)."""
    v = sa.verdict
    if args.json:
        emit_json({"verdict": v.model_dump(mode="json") if v is not None else None, "status": "startup_error",
                   "startup_error": sa.startup_error, "notes": list(sa.notes)})
    else:
        print("\n".join(render_verdict(v)))
    return verdict_exit(sa, args)


def run_plan(args: argparse.Namespace) -> int:
    if getattr(args, "model_config", None):
        rs = ruleset_from_args(args)
        sa, _engine_spec = _model(args, rs)
        if sa.model is None:
            return _refused_at_startup(sa, args)
        model = sa.model
        one = model.answer()
        if args.json:
            from attnplan.render.answer import plan_json

            emit_json(plan_json(model, trace=not args.no_trace))
        else:
            print(render_answer(one.model_copy(update={"verdict": model.verdict})) if one is not None
                  else render_groups(model))
        return verdict_exit(model, args)
    rs = ruleset_from_args(args)
    engine = _engine(args, rs)
    config = config_from_args(args)
    node = _node(args)
    answer = plan_for(config, node, ruleset=rs, engine=engine)
    if args.json:
        from attnplan.render.answer import plan_json

        emit_json(plan_json(answer, trace=not args.no_trace))
    else:
        print(render_answer(answer))
    return verdict_exit(answer, args)


def _grid_json(e: Explanation) -> dict:
    return {
        "status": e.answer.status,
        "engine": e.answer.engine.model_dump(),
        "selected": dict(zip(("prefill", "decode"), e.answer.backends())),
        "columns": [f"{ph}/{b}" if ph != "both" else "pair" for ph, b in e.columns],
        "cells": [{"rule": r, "layer": t.layer, "phase": ph, "backend": None if b == "-" else b, "verdict": t.verdict,
                   "inputs": entry_inputs(t), "required": t.required} for (r, ph, b), t in e.cells.items()],
    }


def _explain_model(args: argparse.Namespace) -> int:
    rs = ruleset_from_args(args)
    sa, engine = _model(args, rs)
    if sa.model is None:
        return _refused_at_startup(sa, args)
    model = sa.model
    exps = explain_groups(model, rs, engine=engine)
    one = model.answer()
    if args.json:
        groups = [{"layers": list(g.layers), "kind": g.kind, "status": g.status,
                   **({"grid": _grid_json(e)} if e is not None else {})} for g, e in zip(model.layer_groups, exps)]
        data = {"verdict": finish(model.verdict).model_dump(mode="json") if model.verdict else None,
                "status": model.status, "engine": model.engine.model_dump(), "notes": list(model.notes), "layer_groups": groups}
        if one is not None:  # one attention group: today's grid at the top level too
            data.update(_grid_json(next(e for e in exps if e is not None)), status=model.status)
        emit_json(data)
    elif one is not None:
        e = next(x for x in exps if x is not None)
        out = (render_verdict(model.verdict) + [""] if model.verdict else []) + [render_explain(e)]
        extra = [v for v in one.violations if v not in e.answer.violations]  # the model's own (KV block size)
        if extra:
            out += ["", "rejected for the model:"] + [f"  - [{v.rule}] {v.message}" for v in extra]
        if model.notes:
            out += ["", "notes:"] + [f"  - {n}" for n in model.notes]
        print("\n".join(out))
    else:
        print("\n".join(render_verdict(model.verdict) + [""]) if model.verdict else "", end="")
        print(render_groups_explain(model, exps))
    return verdict_exit(model, args)


def run_explain(args: argparse.Namespace) -> int:
    if getattr(args, "model_config", None):
        return _explain_model(args)
    rs = ruleset_from_args(args)
    engine = _engine(args, rs)
    config = config_from_args(args)
    node = _node(args)
    e = explain(config, node, rs, engine=engine)
    answer = plan_for(config, node, ruleset=rs, engine=engine)  # memoised: the verdict of the same command
    if args.json:
        emit_json({"verdict": finish(answer.verdict).model_dump(mode="json") if answer.verdict else None, **_grid_json(e)})
    else:
        print("\n".join((render_verdict(answer.verdict) + [""] if answer.verdict else []) + [render_explain(e)]))
    return verdict_exit(answer, args)


def run_node(args: argparse.Namespace) -> int:
    node = _node(args)
    if args.json:
        emit_json({"node": node_json(node), "fingerprint": node.fingerprint()})
    else:
        print(render_node(node))
    return 0


def run_rules(args: argparse.Namespace) -> int:
    rs = ruleset_from_args(args)
    only = None
    if args.engine:
        ref = resolve_engine(_engine(args, rs), None, rs)  # no node: vllm alone is the newest modelled
        only = {r.id for r in rs.rules if r.applies(ref.name, ref.version if ref.name == "vllm" else None, None)}
    if args.json:
        emit_json(rules_json(rs, only=only))
    else:
        print(rules_text(rs, only, terminal_width()))
    return 0


def terminal_width() -> int:
    """$COLUMNS, else the terminal's width, else 100 (a pipe, a file)."""
    import shutil

    return max(40, shutil.get_terminal_size((100, 24)).columns)


def rules_text(rs, only, width: int) -> str:
    """The rules table when it fits ``width``; otherwise one wrapped block per rule (the table's
    widest line is 500+ characters: source citations and provenance are long)."""
    import textwrap

    from attnplan.render.tables import _versions

    table = render_rules(rs, only=only)
    if max(len(ln) for ln in table.splitlines()) <= width:
        return table + model_rules_text(rs, only, width)
    out: list[str] = []
    shown = [r for r in rs.rules if only is None or r.id in only]
    for r in shown:
        backends = sorted({b for c in r.checks for b in (c.backends or ())}) or \
            ["(pair)" if any(c.scope == "pair" for c in r.checks) else "all"]
        out += textwrap.wrap(f"{r.id}  [{r.layer}]  {r.title}", width, subsequent_indent="    ")
        out += _field_lines((("versions", _versions(r)), ("backends", ",".join(backends)),
                             ("source", r.source), ("verified", r.provenance())), width)
    out += ["", f"rules revision {rs.revision}; {len(shown)} rules"]
    return "\n".join(out) + model_rules_text(rs, only, width)


def model_rules_text(rs, only, width: int) -> str:
    """The rules checked over a whole model's layer groups (backends.yaml calls.<c>.jit_name):
    not pack rules, since no per-config condition can see two groups."""
    import textwrap

    from attnplan.render.tables import model_rules

    if only is not None:
        return ""
    out = ["", "", *textwrap.wrap("checked across a model's layer groups (backends.yaml calls.<call>.jit_name):", width)]
    for m in model_rules(rs):
        out += textwrap.wrap(f"{m['id']}  [{m['layer']}]  {m['title']}: FlashInfer names the module by "
                             f"{', '.join(m['named_by'])} and the backend, and compiles {', '.join(m['compiled'])} "
                             f"into it", width, subsequent_indent="    ")
        v = m["verified"]
        if isinstance(v, dict):                 # SourceOnly: {"source_only": why}
            verified = f"source only: {v['source_only']}"
        else:
            verified = "; ".join(f"{r['device']} {r['flashinfer']} {r['date']} {r['verdict']}" for r in v or []) or "source only"
        out += _field_lines((("source", m["source"]), ("verified", verified)), width)
    return "\n".join(out)


def _field_lines(fields, width: int) -> list[str]:
    """``label: value`` lines under a rule's title, wrapped to ``width`` (citations are long)."""
    import textwrap

    return [ln for label, value in fields
            for ln in textwrap.wrap(f"{label}: {value}", width, initial_indent="  ", subsequent_indent="    ",
                                    break_on_hyphens=False)]


def run_matrix(args: argparse.Namespace) -> int:
    from attnplan.policy.matrix import capability_matrix, matrix_markdown

    rs = ruleset_from_args(args)
    if args.format == "json":
        import json

        asked = _engine(args, rs) if args.engine else None
        engines = [asked] if asked is not None else [parse_engine(name, rs) for name in rs.engines]
        text = json.dumps({"rules_revision": rs.revision,
                           "engines": {str(e): capability_matrix(rs, engine=e) for e in engines},
                           "rows": capability_matrix(rs, engine=asked)}, indent=2) + "\n"
    else:
        text = matrix_markdown(rs, engine=_engine(args, rs) if args.engine else None)
    if args.output is not None:
        from .output import write_output

        write_output(args.output, text)
    else:
        print(text, end="")
    return 0
