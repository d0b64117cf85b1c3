"""``labels``: this node's attention capabilities as Kubernetes labels (NFD local feature file)."""

from __future__ import annotations

import argparse

from .options import add_node_args, add_rules_arg, node_from_args, ruleset_from_args
from .plan import add_engine_arg
from .preflight import check_engine

NFD_FILE = "/etc/kubernetes/node-feature-discovery/features.d/attnplan"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "labels", help="this node's capabilities as Kubernetes node labels (NFD feature file)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Write attnplan.io/* node labels derived from the rules (trtllm-gen, fa3, nvfp4-kv,\n"
            "max-head-dim, capability-major/minor, ...) in Node Feature Discovery's local feature-file\n"
            f"format. With --output the file is written atomically (dotfile, then rename), e.g.\n"
            f"  attnplan labels --output {NFD_FILE}\n"
            "deploy/daemonset-labels.yaml runs exactly that on every GPU node."),
    )
    p.add_argument("--output", "-o", metavar="FILE", help="write the feature file here (default: stdout)")
    m = p.add_argument_group("models this node may serve: one label attnplan.io/model-<name> each, value ok or the "
                             "first failing layer group's rule id")
    m.add_argument("--model", dest="models", action="append", default=[], metavar="MODEL",
                   help="a model directory, config.json, preset or cached repo id (repeatable)")
    m.add_argument("--serve", dest="serve_lines", action="append", default=[], metavar="LINE",
                   help='a "vllm serve MODEL [flags]" line (repeatable)')
    m.add_argument("--configs", metavar="FILE", help="a preflight configs file (YAML): one label per entry")
    p.add_argument("--json", action="store_true", help="print the labels as a JSON object instead")
    add_node_args(p)
    add_rules_arg(p)
    add_engine_arg(p, "engine layer the labels describe: vllm (default: the vllm installed here, else the newest "
                      "modelled), vllm==0.33.0, or flashinfer (kernel rules alone)")
    p.set_defaults(run=run)


def _models(args: argparse.Namespace) -> list:
    """The configured models: --model, --serve and --configs entries, named as preflight names them."""
    from attnplan.preflight.configs import inline_model, load_configs, model_name, model_request, unique_names
    from attnplan.preflight.model import NamedConfig

    from .preflight import check_models, parse_engines

    out = []
    for ref in args.models:
        req = model_request(ref, None, {}, args.engine)
        out.append(NamedConfig(model_name(req) or "model", None, req.engine, inline_model(req)))
    for line in args.serve_lines:
        req = model_request(None, line, {}, args.engine)
        out.append(NamedConfig(model_name(req) or "model", None, req.engine, inline_model(req)))
    if args.configs:
        out += load_configs(args.configs, engine=args.engine)
    rs = ruleset_from_args(args)
    out = parse_engines(unique_names(out), rs)
    check_models(out, rs)
    return out


def run(args: argparse.Namespace) -> int:
    from attnplan.node import local_node
    from attnplan.preflight.labels import node_labels, render_feature_file, write_atomic

    if args.output is not None:
        from attnplan.safeio import check_replaceable

        # A link, device or FIFO at --output is refused (exit 2) before anything is probed or planned:
        # the file is written by rename, which would replace it (issue 40 #7).
        check_replaceable(args.output, what="output")
    rs = ruleset_from_args(args)  # a pack that fails to load: exit 2 before probing anything
    node = node_from_args(args) or local_node()
    engine = check_engine(args.engine, node, rs)  # exit 2, one printable line
    labels = node_labels(node, rs, engine=engine)
    configs = _models(args)
    if configs:
        from attnplan.preflight.labels import model_labels

        labels.update(model_labels(node, configs, rs))
    if args.json:
        from .main import emit_json

        emit_json(labels)
        return 0
    text = render_feature_file(labels, node, rs)
    if args.output is not None:
        write_atomic(args.output, text)
    else:
        print(text, end="")
    return 0
