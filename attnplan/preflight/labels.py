"""Kubernetes node labels for this node's attention capabilities, in Node Feature Discovery's
local feature-file format (``/etc/kubernetes/node-feature-discovery/features.d/``, one
``name=value`` a line, ``#`` comments).

Every capability label is DERIVED from the rule engine, never hard-coded: ``trtllm-gen=true``
means ``plan_for`` accepts a representative config with ``attention_backend=trtllm-gen`` on
this node; ``max-head-dim`` is the largest head size any backend accepts here; ``nvfp4-kv``
that an nvfp4 KV cache plans ok, all for one engine layer (default: the node's vllm, else the
newest modelled; ``engine``/``engine-version`` say which). So a rule change (or a node without cubins, or with
``VLLM_BATCH_INVARIANT=1``) changes the labels with it.

docs/contract.md, Errors and exit codes: names are ``attnplan.io/<name>`` with ``<name>`` at most 63 characters of
``[A-Za-z0-9._-]`` starting and ending alphanumeric; values likewise (``2.9.0+cu128`` becomes
``2.9.0-cu128``; what cannot be made valid is left out); NFD compares integers only, so the
capability is published as two integer labels, major and minor. NFD ignores dotfiles and
files over 64 KiB: the file is written as a dotfile, then renamed atomically.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from attnplan.embedded import plan_for   # finished, as plan_model_locally's model answers are
from attnplan.policy import (AttnplanError, EngineSpec, NodeFacts, RuleSet, default_ruleset, parse_engine,
                             resolve_engine)
from attnplan.policy.engines import EngineLike
from attnplan.policy import representative as rep

from .files import replace_atomically

PREFIX = "attnplan.io/"
MAX_FILE_BYTES = 64 * 1024
NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# The capability labels are evaluated with the capability matrix's representative configs
# (policy/representative.py); max-head-dim scans every multiple of 16 up to 1024.
SCANNED_HEAD_SIZES = tuple(range(16, 1025, 16))


def valid_label(name: str, value: str) -> bool:
    """A full ``prefix/name`` and its value are valid Kubernetes label syntax."""
    prefix, sep, short = name.rpartition("/")
    if sep and (len(prefix) > 253 or not PREFIX_RE.match(prefix)):
        return False
    return bool(NAME_RE.match(short)) and len(value) <= 63 and bool(VALUE_RE.match(value))


def sanitize_value(value: Any) -> Optional[str]:
    """A valid label value for ``value``, or None when nothing valid is left."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", str(value).strip())
    text = text[:63]
    text = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text)
    return text if text and VALUE_RE.match(text) else None


def _ok(fields: dict[str, Any], node: NodeFacts, rs: RuleSet, engine: EngineSpec) -> bool:
    """Whether the rules accept ``fields`` here: the evaluation alone (a capability label needs no
    suggestions, verdict or fixes, which would re-evaluate every rejected representative config)."""
    from attnplan.policy import evaluate, make_config

    try:
        return evaluate(make_config(fields), node, rs, trace=False, engine=engine).status == "ok"
    except AttnplanError:
        return False


def node_labels(node: NodeFacts, ruleset: Optional[RuleSet] = None, *, engine: EngineLike = None) -> dict[str, str]:
    """``{"attnplan.io/trtllm-gen": "true", ...}`` for ``node``, every capability from the rules
    (``ruleset``: the shipped rules by default) of the engine layer ``engine`` (vllm, vllm==X,
    flashinfer; None: the node's vllm, else the newest modelled). An engine the rules do not
    cover is InvalidInputError here, never a file of "false" labels."""
    rs = ruleset if ruleset is not None else default_ruleset()
    engine = parse_engine(engine, rs)
    ref = resolve_engine(engine, node, rs)
    labels: dict[str, Any] = {"engine": ref.name, "engine-version": ref.version}
    cap = node.capability.value
    labels["cuda"] = isinstance(cap, int)
    if isinstance(cap, int):
        labels["capability-major"] = cap // 10
        labels["capability-minor"] = cap % 10
    labels["gpu"] = node.gpu_name.value if isinstance(node.gpu_name.value, str) else None
    count = node.gpu_count.value
    labels["gpu-count"] = count if isinstance(count, int) and not isinstance(count, bool) else None

    # One label per backend of the catalog: the backend forced in both phases plans ok.
    for name, spec in rs.backends.items():
        base = rep.MLA if spec.kind == "mla" else rep.STANDARD
        labels[name] = _ok(dict(base, attention_backend=name), node, rs, engine)
    labels["mla"] = _ok(rep.MLA, node, rs, engine)
    labels["fp8-kv"] = _ok(dict(rep.STANDARD, kv_cache_dtype="fp8"), node, rs, engine)
    labels["nvfp4-kv"] = _ok(dict(rep.STANDARD, kv_cache_dtype="nvfp4"), node, rs, engine)
    labels["sinks"] = _ok(dict(rep.STANDARD, sinks=True), node, rs, engine)
    labels["soft-cap"] = _ok(dict(rep.STANDARD, logits_soft_cap=rep.LOGITS_SOFT_CAP), node, rs, engine)
    labels["sliding-window"] = _ok(dict(rep.STANDARD, sliding_window=rep.SLIDING_WINDOW), node, rs, engine)
    heads = [h for h in SCANNED_HEAD_SIZES if _ok(dict(rep.STANDARD, head_dim=h), node, rs, engine)]
    labels["max-head-dim"] = max(heads) if heads else 0
    for h in rep.HEAD_SIZES:
        labels[f"head-dim-{h}"] = h in heads

    labels["flashinfer-version"] = node.flashinfer_version.value
    # whether `import flashinfer` works beside the installed kernel wheels (node/flashinfer_packages.py)
    imp = node.flashinfer_import_error
    labels["flashinfer-imports"] = None if imp.source.value == "unknown" else imp.value is None
    labels["trtllm-cubins"] = trtllm_cubins_state(node)
    if labels["trtllm-cubins"] is not None:
        own = node.trtllm_kernel_table.value
        labels["trtllm-kernel-table"] = str(own.get("pin"))[:8] if isinstance(own, dict) else "none"
    labels["driver-version"] = node.driver_version.value
    labels["torch-version"] = node.torch_version.value
    labels["torch-cuda-version"] = node.torch_cuda_version.value
    labels["batch-invariant"] = node.batch_invariant_env.value if isinstance(node.batch_invariant_env.value, bool) else None
    labels["rules-revision"] = rs.revision

    out: dict[str, str] = {}
    for short, raw in labels.items():
        value = sanitize_value(raw)
        if value is None:
            continue  # unknown or not expressible as a label value: leave it out
        name = PREFIX + short
        if valid_label(name, value):
            out[name] = value
    return out


def trtllm_cubins_state(node: NodeFacts) -> Optional[str]:
    """Where trtllm-gen's cubins would come from on this node, now (issue 37: "cubins ready"): ``on-disk``
    (FLASHINFER_CUBIN_DIR holds them, or a flashinfer-cubin wheel at flashinfer's version: FlashInfer ignores
    another - flashinfer/jit/env.py _get_cubin_dir), ``download`` (not on disk, the artifactory answers: the
    first request downloads them), ``missing`` (neither), None when not probed."""
    from attnplan.kernels.trtllm_gen.phase import FAMILY_MAJORS
    from attnplan.policy.capability import capability_major

    cap = node.capability.value
    if not isinstance(cap, int) or capability_major(cap) not in FAMILY_MAJORS:
        return None   # no GPU trtllm-gen's kernels are built for: nothing to be ready
    fi, wheel = node.flashinfer_version.value, node.flashinfer_cubin_version.value
    if node.cubin_dir_has_cubins.value is True or (wheel is not None and wheel == fi):
        return "on-disk"
    reach = node.artifactory_reachable.value
    if reach is True:
        return "download"
    if reach is False:
        return "missing"
    return None


MODEL_PREFIX = "model-"


def label_name(name: str) -> Optional[str]:
    """``attnplan.io/model-<name>`` for a configured model (name sanitised, at most 63 characters)."""
    short = sanitize_value(MODEL_PREFIX + name)
    return PREFIX + short if short and NAME_RE.match(short) else None


BACKEND_SUFFIX = "-backend"


def backend_label_name(name: str) -> Optional[str]:
    """``attnplan.io/model-<name>-backend``: the model's name shortened so that the suffix always fits (a long
    name must never make its backend label the model label itself)."""
    short = sanitize_value(MODEL_PREFIX + name)
    if not short:
        return None
    short = re.sub(r"[^A-Za-z0-9]+$", "", short[:63 - len(BACKEND_SUFFIX)]) + BACKEND_SUFFIX
    return PREFIX + short if NAME_RE.match(short) else None


def model_labels(node: NodeFacts, configs: Any, ruleset: Optional[RuleSet] = None) -> dict[str, str]:
    """Two labels per configured model (or config) of ``configs`` (``preflight.model.NamedConfig``), from the
    command's verdict (policy/verdict.py): ``model-<name>`` is ``runs`` wherever the engine runs it - on
    FlashInfer or on a backend of its own - else the rule that decides the other outcome (``vllm.startup``
    when vLLM itself refuses the parallel layout); ``model-<name>-backend`` is the backend the engine itself
    selects (FLASHINFER, FLASH_ATTN_MLA, ...). A label never names a rule where the model runs. A scheduler
    pins a model's pods with node affinity on ``attnplan.io/model-<name> In (runs)``. Two names that
    sanitise to one label are bad input."""
    from attnplan.policy import InvalidInputError

    from .simulate import plan_model_locally

    rs = ruleset if ruleset is not None else default_ruleset()
    out: dict[str, str] = {}
    for nc in configs:
        name = label_name(nc.name)
        if name is None:
            raise InvalidInputError("model", f"{nc.name!r} cannot be a label name; give the entry a name of "
                                             "letters, digits, '-', '_' or '.'")
        if name in out:
            raise InvalidInputError("model", f"two models are labelled {name}: give them distinct names")
        if nc.request is not None:
            a: Any = plan_model_locally(nc, node, rs)
        else:
            a = plan_for(nc.config, node, ruleset=rs, engine=nc.engine)
        verdict = a.verdict
        if verdict is None:  # an answer without a verdict (an older node's): judged by its FlashInfer plan
            first = a.first_failure() if hasattr(a, "first_failure") else (
                ("", a.violations[0].rule) if a.violations else None)
            value, backend = ("runs" if a.ok else (first[1] if first else "rejected")), None
        else:
            value = "runs" if verdict.runs else (verdict.rules[0] if verdict.rules else verdict.outcome)
            backend = verdict.selected.decode
        v = sanitize_value(value) or "rejected"
        if valid_label(name, v):
            out[name] = v
        b = sanitize_value(backend) if backend else None
        bname = backend_label_name(nc.name)
        if bname in out:
            raise InvalidInputError("model", f"{nc.name!r} labels its backend as another model's label {bname}: "
                                             "give the models distinct names")
        if b and bname and valid_label(bname, b):
            out[bname] = b
    return out


def render_feature_file(labels: dict[str, str], node: NodeFacts, ruleset: Optional[RuleSet] = None) -> str:
    host = sanitize_value(node.hostname.value) or "unknown"
    revision = (ruleset if ruleset is not None else default_ruleset()).revision
    lines = [f"# attnplan node capability labels for {host} (rules revision {revision}).",
             "# Generated by `attnplan labels`; do not edit: the next run replaces this file."]
    lines += [f"{k}={v}" for k, v in labels.items()]
    text = "\n".join(lines) + "\n"
    if len(text.encode()) >= MAX_FILE_BYTES:  # NFD ignores larger files
        raise AttnplanError(f"label file would be {len(text.encode())} bytes; NFD ignores files over 64 KiB")
    return text


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a dotfile in the same directory, then rename: NFD
    never reads a half-written file (it ignores dotfiles)."""
    from attnplan.policy import InvalidInputError

    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if target.name.startswith("."):
        raise InvalidInputError("output", f"{target.name}: NFD ignores dotfiles; choose a name without a leading dot")
    if not directory.is_dir():
        raise InvalidInputError("output", f"{directory}: no such directory")
    from attnplan.safeio import check_replaceable

    check_replaceable(target, what="output")  # never a link, device or FIFO replaced (issue 40 #7)
    try:
        return replace_atomically(target, text)
    except OSError as exc:
        raise InvalidInputError("output", f"cannot write {target}: {(exc.strerror or str(exc)).lower()}") from None
