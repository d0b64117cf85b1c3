"""The differential oracle for the SGLang layer (issue 26, docs/contract.md, Engines and versions): SGLang 0.5.23's own selection
functions, run on the CPU with a patched device capability and CUDA version, against ``resolve``.

SGLang 0.5.23 does not import on a CPU machine (orjson, triton, sgl_kernel...), so the oracle takes its
functions out of the source files unchanged (their ``def`` text, compiled from the AST) and runs them
in a namespace that supplies what the pipeline would: ``get_platform()`` built from SGLang's own
``_check_cuda_device_version`` partials and runtime_context.py's name map, the config view as a plain
record, ``run_post_process_pass``/``declare_resolution`` applying declarations to it. The functions run,
in pipeline.py's order: the GPT-OSS model override, ``handle_deterministic_inference``,
``handle_nvfp4_prefill_kv_dequant_dtype``, ``handle_attention_backend_compatibility`` (which itself runs
``_attention_backend_default`` -> ``get_default_attn_backend``, the page constraints, the trtllm checks,
the fa3 fallback and the fa4 page), ``handle_kv4_compatibility``, ``_page_size_default``, then the backend
factories of layers/attention/attention_registry.py (fa3, trtllm_mha, trtllm_mla) as the model runner builds them.

Also run: the model override functions (GPT-OSS, DeepSeek family, Qwen3-Next/Qwen3.5 hybrids, Falcon-H1/Jet,
Llama-4) for the architectures their ``@_register_for`` names, model_hook.py's per-architecture if/elif chain
(the GPT-OSS and Llama-4 asserts), speculative_hook.py ``_handle_eagle_family`` (top-k refusals, the automatic
top-k) and attention_registry.py ``attn_backend_wrapper``'s hybrid-GDN branch - each taken out of the source
unchanged (a branch as written, run as a function body).

Real models (issue 39 item 2, ``--models``): ``model_cases()`` crosses the flags with real config.json files
(DeepSeek-V3, Kimi-K2, GPT-OSS 20b/120b, Qwen3-Next, Falcon-H1, Llama-4 Scout, Gemma-2, Gemma-3 1b/27b, Llama-3.1),
made into hf_config and ModelConfig by SGLang's own code (attnplan/oracle/sglang_models.py); attnplan reads the
same files through model/hfconfig.py and hands ``ModelFacts.from_config`` to the resolver as engine_resolution does.

Compared per field: prefill backend, decode backend, page size, whether SGLang refuses and where (``refused_at``:
startup in a hook, or backend-build in a factory), and the flags it silently replaces (``coerced``, against
attnplan's Coercions). Named exceptions: ``EXCEPTIONS`` below. (The four classes of coercion notes this oracle
first found wrong on attnplan's side - fa3's e5m2 fallback of a backend the user did not type, NVFP4's decode and
cutedsl_mla's prefill replacing a typed backend unnoted, a page that came back to the user's own - are fixed in the
rows of backends.yaml engines.sglang.native and resolve.py: 0 left.)

Per release (issue 42): ``--release X`` runs SGLang X's own functions (its sglang/srt: ``release_src``) against
attnplan asked for ``sglang==X`` (``attnplan_tables``; where attnplan does not model X yet, the newest modelled
release stands in and the report says so). A function an older release lacks is named in ``OPTIONAL`` and one
a newer release removed in ``REMOVED``; everything else must be found in every release, so a rename fails
loudly. ``--release-cases`` adds ``release_cases()``: the surfaces where 0.5.21-0.5.23 differ that ``cases()``
does not reach (DFLASH on SM100, tokenspeed_mla, Gemma4 / DiffusionGemma).

``python -m attnplan.oracle.sglang [--release X] [--release-cases] [--models | --models-only] [--sample N] [--seed S] [--src DIR]
[--json]`` (dev tooling: attnplan/oracle/ is left out of the wheel; ``python -m attnplan.sglang.oracle`` is the old name)
"""

from __future__ import annotations

import argparse
import ast
import functools
import itertools
import json
import os
import random
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from attnplan.errors import SourceNotFoundError

ROOT = Path(__file__).resolve().parents[2]
# sglang/srt of an extracted SGLang 0.5.23 wheel ($ATTNPLAN_SGLANG_SRC, else `make setup`'s .venv/sglang-src)
SRC = Path(os.environ.get("ATTNPLAN_SGLANG_SRC") or ROOT / ".venv/sglang-src/sglang/srt")
# The SGLang releases issue 42 asks the engine layer for, oldest first; the newest is the one SRC holds. The
# older ones' sglang/srt is unpacked by `make setup` under $ATTNPLAN_SGLANG_RELEASES (default .venv/releases):
# <dir>/sglang-X/sglang/srt.
RELEASES = ("0.5.21", "0.5.22", "0.5.23")
NEWEST = RELEASES[-1]
RELEASES_DIR = Path(os.environ.get("ATTNPLAN_SGLANG_RELEASES") or ROOT / ".venv/releases")


def release_src(release: str) -> Path:
    """Where a release's sglang/srt lies: SRC for the newest, else RELEASES_DIR/sglang-X/sglang/srt (which may
    be absent: the caller checks)."""
    if release not in RELEASES:
        raise SourceNotFoundError(f"SGLang {release} is not one the oracle knows (known: {', '.join(RELEASES)})")
    if release == NEWEST and (SRC / "arg_groups").is_dir():
        return SRC
    return RELEASES_DIR / f"sglang-{release}" / "sglang" / "srt"


def release_of(src: Path) -> str:
    """The release a source dir holds, read from its path (.../sglang-X/sglang/srt); SRC and any other: NEWEST."""
    for part in reversed(Path(src).parts):
        if part.startswith("sglang-") and part[len("sglang-"):] in RELEASES:
            return part[len("sglang-"):]
    return NEWEST
# refused_at: where SGLang refuses (startup: a hook of pipeline.py; backend-build: a factory of
# attention_registry.py or attn_backend_wrapper, as the model runner builds the backends) against attnplan's
# Refusal.outcome; coerced: the flags the user gave that SGLang silently replaced (a backend the user named for a
# phase - --attention-backend or --prefill/--decode-attention-backend - that the phase does not run; the KV dtype;
# a --page-size) against the fields of attnplan's Coercions on a flag the user gave (a value SGLang's own defaults
# chose and then replaced is no coercion of the user's line: user_gave).
FIELDS = ("prefill", "decode", "page_size", "refused", "refused_at", "coerced")
COERCIBLE = ("attention_backend", "kv_cache_dtype", "page_size")
# attnplan refusals by a rule whose SGLang code the oracle does not run: such cases are counted, not compared
EXCEPTED_RULES = frozenset({"sglang.trtllm-mha-page128"})
EXCEPTIONS = (
    "layers/attention/trtllm_mha_backend.py TRTLLMHAAttnBackend.__init__ (page >= 128 needs GQA and equal head dims): "
    "not exercised (the factories in attention_registry.py are)",
    "model_overrides/deepseek_v2.py _deepseek_family_overrides: the DSA branch (a config with index_topk) is not "
    "exercised - SGLang's own is_deepseek_dsa runs on the real configs (model_cases) and none of them has index_topk "
    "(DeepSeek-V3.2 / GLM-5 are not in sglang_models.MODELS); attnplan does not model SGLang's dsa backend",
    "model_cases: SGLang's ModelConfig is not constructed whole (its __init__ downloads and imports sglang.srt); its "
    "own _derive_model_shapes / _detect_attention_sinks / has_asymmetric_kv / KV-head getters and "
    "is_hybrid_swa_model run on transformers' config of the real file (oracle/sglang_models.py); --quantization, "
    "--tp-size and --dcp-size stay unset (1), so the TP-dependent checks (attention_hook.py's Intel XPU DCP "
    "checks) are not reached",
    "model_hook.py: the Mamba radix-cache strategy and the other per-architecture passes run with SGLang's defaults "
    "(radix cache on, overlap schedule on, --linear-attn-backend triton); only the per-architecture if/elif chain "
    "(the GPT-OSS and Llama-4 asserts) and the override functions run",
    "speculative_hook.py _handle_eagle_family: EAGLE cases give --speculative-num-steps 3 with a top-k, or neither "
    "(the automatic choice); a top-k without num-steps (an AssertionError in SGLang) is not generated",
    "speculative_hook.py _handle_dflash (release_cases' DFLASH cases): not run - its trtllm_mha fallback reads the "
    "draft model's config (sliding / causal layers), which a case does not have; get_default_attn_backend's "
    "DFLASH branch (model_override_base.py _forces_eagle_topk_one, 0.5.23) is what those cases hold",
)


# The functions the oracle takes that an older release lacks, and the release that added each: where one is
# absent, that release's callers do not call it (its test is inline, or the check does not exist yet).
OPTIONAL = {
    "is_sm110_supported": "0.5.22",            # utils/common.py; 0.5.21's runtime_context.py maps no is_sm110
    "HYBRID_GDN_SM100_BACKENDS": "0.5.22",     # attention_registry.py; 0.5.21 spells the same set inline
    "_dsa_dcp_overrides": "0.5.22",            # model_overrides/deepseek_v2.py (DSA with --dcp-size > 1)
    "_forces_eagle_topk_one": "0.5.23",        # model_override_base.py: DFLASH counts as a declared top-k
    "_check_oot_speculative_algorithm": "0.5.23",  # speculative_hook.py: out-of-tree platforms only
}
# ...and the ones a newer release removed: present in the releases up to the one named.
REMOVED = {
    "create_tokenspeed_mla_backend": "0.5.22",  # attention_registry.py; 0.5.23 renames tokenspeed_mla to cutedsl_mla
}


@dataclass(frozen=True)
class Case:
    capability: int
    cuda: str
    mla: bool
    sinks: bool
    asymmetric: bool
    arch: Optional[str]
    attention_backend: Optional[str]
    prefill: Optional[str]
    decode: Optional[str]
    kv: str
    page: Optional[int]
    deterministic: bool
    topk: Optional[int]
    group: int = 4
    # EAGLE with neither --speculative-eagle-topk nor --speculative-num-steps: _auto_choose_speculative_params picks
    spec_auto: bool = False
    # another --speculative-algorithm (release_cases: DFLASH), with no top-k and no num-steps
    algorithm: Optional[str] = None
    # a real config.json (attnplan/oracle/sglang_models.py MODELS): SGLang's side reads it through its own
    # ModelConfig code, attnplan's through model/hfconfig.py; arch / mla / sinks / asymmetric then come from it
    model: Optional[str] = None

    @property
    def speculative_algorithm(self) -> Optional[str]:
        return self.algorithm or ("EAGLE" if (self.topk or self.spec_auto) else None)


# -- SGLang's functions, out of its source --------------------------------------------------------
def _registered_for(path: Path, name: str) -> tuple[str, ...]:
    """The architectures a model override function registers for (its ``@_register_for(...)`` arguments)."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "_register_for":
                    return tuple(a.value for a in d.args if isinstance(a, ast.Constant))
    raise SourceNotFoundError(f"{path}: no @_register_for on {name}")


def _branch(path: Path, func: str, marker: str, new_name: str, params: list[str]) -> ast.FunctionDef:
    """One statement of SGLang's ``func`` (the first ``if``, at any depth, whose test reads ``marker``), unchanged,
    as the body of a function ``new_name(params)``: the part of a long hook the oracle can run."""
    tree = ast.parse(path.read_text(), str(path))
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func), None)
    if fn is None:
        raise SourceNotFoundError(f"{path}: no {func}")
    hit = None
    for n in ast.walk(fn):
        if isinstance(n, ast.If) and ast.unparse(n.test) == marker:
            hit = n
            break
    if hit is None:
        raise SourceNotFoundError(f"{path}: {func} has no branch on {marker!r}")
    args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in params], kwonlyargs=[], kw_defaults=[], defaults=[])
    out = ast.FunctionDef(name=new_name, args=args, body=[hit], decorator_list=[], returns=None, type_params=[])
    return ast.fix_missing_locations(ast.copy_location(out, fn))


def _slice(path: Path, func: str, first: str, last: str, new_name: str, params: list[str]) -> ast.FunctionDef:
    """The statements of SGLang's ``func`` from the assignment to ``first`` through the ``if {last}:`` that
    closes the block, unchanged, as the body of ``new_name(params)``; a release without that block gets
    ``pass`` (the behaviour it had: nothing renamed)."""
    tree = ast.parse(path.read_text(), str(path))
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func), None)
    if fn is None:
        raise SourceNotFoundError(f"{path}: no {func}")
    body: list[ast.stmt] = []
    start = next((i for i, n in enumerate(fn.body) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == first for t in n.targets)), None)
    if start is not None:
        end = next((i for i in range(start, len(fn.body)) if isinstance(fn.body[i], ast.If)
                    and ast.unparse(fn.body[i].test) == last), None)
        if end is None:
            raise SourceNotFoundError(f"{path}: {func} assigns {first} but has no 'if {last}:'")
        body = fn.body[start:end + 1]
    args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in params], kwonlyargs=[], kw_defaults=[], defaults=[])
    out = ast.FunctionDef(name=new_name, args=args, body=body or [ast.Pass()], decorator_list=[], returns=None,
                          type_params=[])
    return ast.fix_missing_locations(ast.copy_location(out, fn))


def _isinstance_names(path: Path, func: str) -> set[str]:
    """The class names ``func`` tests with isinstance (configs/hybrid_arch.py hybrid_gdn_config)."""
    tree = ast.parse(path.read_text(), str(path))
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func), None)
    if fn is None:
        raise SourceNotFoundError(f"{path}: no {func}")
    return {n.id for c in ast.walk(fn) if isinstance(c, ast.Call) and getattr(c.func, "id", None) == "isinstance"
            for n in ast.walk(c.args[1]) if isinstance(n, ast.Name)}


def _defs(path: Path, names: set[str], optional: frozenset[str] = frozenset()) -> list[ast.stmt]:
    """The top-level ``def``s and assignments of ``names`` in ``path``; a name in ``optional`` (one a release
    added after 0.5.21, OPTIONAL) may be absent - its callers in that release do not call it."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.decorator_list = []          # register_post_process / _register_for: registration only
            out.append(node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            out.append(node)
    missing = names - {getattr(n, "name", None) for n in out} - {t.id for n in out if isinstance(n, ast.Assign)
                                                                   for t in n.targets if isinstance(t, ast.Name)}
    missing -= optional
    if missing:
        raise SourceNotFoundError(f"{path}: not found: {sorted(missing)}")
    return out


def _platform_names(src: Path) -> dict[str, str]:
    """runtime_context.py's map from get_platform() attributes to utils/common.py predicates."""
    tree = ast.parse((src / "runtime_context.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            if "is_hopper_with_cuda_12_3" in keys:
                return {k.value: v.value for k, v in zip(node.keys, node.values)  # type: ignore[union-attr]
                        if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    raise SourceNotFoundError("runtime_context.py: the platform name map")


class _Envs:
    # environ.py defaults the functions read (SGLANG_SIMULATE_ACC_LEN: off)
    DEFAULTS = {"SGLANG_SIMULATE_ACC_LEN": -1.0}

    def __getattr__(self, name: str) -> Any:
        return types.SimpleNamespace(get=lambda: self.DEFAULTS.get(name), set=lambda v: None)


class _Log:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


@functools.lru_cache(maxsize=4)
def _sglang(src: str) -> dict[str, Any]:
    """One namespace holding SGLang's functions (compiled from its source) and the harness they call."""
    s = Path(src)
    ns: dict[str, Any] = {"__name__": "sglang_oracle", "Any": Any, "Optional": Optional, "logger": _Log(), "envs": _Envs(),
                          "lru_cache": lambda maxsize=None: (lambda f: f), "partial": functools.partial}
    choices: dict[str, Any] = {}
    exec(compile((s / "arg_groups/choices.py").read_text(), str(s / "arg_groups/choices.py"), "exec"), choices)
    ns["_choices"] = choices
    mods = [
        ("utils/common.py", {"_check_cuda_device_version", "is_hopper_with_cuda_12_3", "is_blackwell_supported",
                             "is_sm120_supported", "is_sm100_supported", "is_sm100_or_sm110_supported", "is_sm110_supported",
                             "is_sm90_supported", "is_sm80_supported", "is_no_spec_infer_or_topk_one"}),
        ("arg_groups/model_override_base.py", {"get_default_attn_backend", "attention_backends_of", "is_attention_backend_not_set",
                                               "_forces_eagle_topk_one", "mamba_extra_buffer_of"}),
        ("arg_groups/overrides.py", {"_deterministic_attention_backend", "_attention_backend_default", "_mla_backend_page_constraints",
                                     "_mla_kv_cache_dtype_checks", "_cutedsl_prefill_backend_fill", "_attention_backend_fa3_fp8_fallback",
                                     "_fa4_page_constraint", "_attention_backend_platform_fallbacks", "_intel_xpu_page_constraint",
                                     "_page_size_default", "_deterministic_is_deepseek_model",
                                     "_deterministic_allreduce_fusion_disable", "_deterministic_sampling_backend"}),
        ("arg_groups/attention_hook.py", {"handle_attention_backend_compatibility", "handle_deterministic_inference"}),
        ("arg_groups/kv_cache_hook.py", {"handle_nvfp4_prefill_kv_dequant_dtype", "handle_kv4_compatibility",
                                         "_NVFP4_PREFILL_BACKEND", "_NVFP4_PREFILL_DEQUANT_DTYPE"}),
        ("arg_groups/model_overrides/gpt_oss.py", {"_gpt_oss_overrides"}),
        ("arg_groups/model_overrides/qwen3_5.py", {"_qwen3_5_hybrid_overrides"}),
        ("arg_groups/model_overrides/falcon_h1.py", {"_falcon_h1_jet_overrides"}),
        ("arg_groups/model_overrides/llama4.py", {"_llama4_overrides"}),
        ("arg_groups/model_overrides/deepseek_v2.py", {"_deepseek_family_overrides", "_dsa_dcp_overrides"}),
        ("arg_groups/speculative_hook.py", {"_handle_eagle_family", "_auto_choose_speculative_params",
                                            "_should_auto_enable_hip_rejection_sampling", "_disable_overlap_schedule_for_cpu",
                                            "_check_oot_speculative_algorithm", "_handle_iquest_q1_mtp_draft"}),
        ("layers/attention/attention_registry.py", {"create_flashattention_v3_backend", "create_trtllm_mha_backend",
                                                    "create_trtllm_mla_backend", "HYBRID_GDN_SM100_BACKENDS",
                                                    "create_tokenspeed_mla_backend"}),
        ("arg_groups/model_overrides/gemma4.py", {"_gemma4_overrides"}),
    ]
    body: list[ast.stmt] = []
    for rel, names in mods:
        body += _defs(s / rel, names, frozenset(OPTIONAL) | frozenset(REMOVED))
    # handle_model_specific_adjustments' per-architecture if/elif chain (the GPT-OSS and Llama-4 asserts live
    # there), and attn_backend_wrapper's hybrid-GDN branch: run as SGLang wrote them.
    body.append(_branch(s / "arg_groups/model_hook.py", "handle_model_specific_adjustments", "model_arch in ['GptOssForCausalLM']",
                        "_model_branches", ["server_args", "model_arch", "cfg", "hf_config", "model_config"]))
    # serving_hook.py handle_deprecated_args: the attention-backend aliases (0.5.23: tokenspeed_mla -> cutedsl_mla),
    # the statements from ``aliases = ...`` to ``if renamed:``; a release without them gets an empty function.
    body.append(_slice(s / "arg_groups/serving_hook.py", "handle_deprecated_args", "aliases", "renamed",
                       "_backend_aliases", ["server_args", "cfg"]))
    body.append(_branch(s / "layers/attention/attention_registry.py", "attn_backend_wrapper",
                        "hybrid_gdn_config(runner.model_config) is not None", "_hybrid_gdn_branch", ["runner"]))
    exec(compile(ast.Module(body=body, type_ignores=[]), f"sglang-{release_of(s)}-functions", "exec"), ns)
    ns["_platform_names"] = _platform_names(s)
    over = {}
    for rel, fn in (("gpt_oss.py", "_gpt_oss_overrides"), ("qwen3_5.py", "_qwen3_5_hybrid_overrides"),
                    ("falcon_h1.py", "_falcon_h1_jet_overrides"), ("llama4.py", "_llama4_overrides"),
                    ("deepseek_v2.py", "_deepseek_family_overrides"), ("gemma4.py", "_gemma4_overrides")):
        for arch in _registered_for(s / "arg_groups/model_overrides" / rel, fn):
            over[arch] = ns[fn]
    ns["_overrides_by_arch"] = over
    ns["_hybrid_gdn_classes"] = _isinstance_names(s / "configs/hybrid_arch.py", "hybrid_gdn_config")
    ns["_src"] = str(s)
    return ns


# The transformers config class of each architecture the cases use (configs/*.py): hybrid_gdn_config tests the class.
CONFIG_CLASS = {"Qwen3NextForCausalLM": "Qwen3NextConfig", "Qwen3_5ForConditionalGeneration": "Qwen3_5Config",
                "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeConfig", "JetNemotronForCausalLM": "JetNemotronConfig",
                "InternS2PreviewForConditionalGeneration": "InternS2PreviewConfig", "FalconH1ForCausalLM": "FalconH1Config"}


# -- the harness ------------------------------------------------------------------------------------
class _View(types.SimpleNamespace):
    """ServerArgs as a record: the fields the functions read; any other field reads as None."""

    def __getattr__(self, name: str) -> Any:
        return None


class _Platform(types.SimpleNamespace):
    """get_platform(): the predicates of this case; any other (a non-CUDA platform) is False."""

    def __getattr__(self, name: str) -> Any:
        return False


def _install_imports(ns: dict[str, Any]) -> None:
    """The functions' own ``from sglang... import`` lines, answered from the harness."""
    def mod(name: str, **attrs: Any) -> None:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []  # type: ignore[attr-defined]
        sys.modules[name] = m

    for pkg in ("sglang", "sglang.srt", "sglang.srt.speculative", "sglang.srt.hardware_backend",
                "sglang.srt.hardware_backend.mlx", "sglang.srt.configs"):
        if pkg not in sys.modules or not getattr(sys.modules[pkg], "_attnplan_oracle", False):
            mod(pkg, _attnplan_oracle=True)

    class SpeculativeAlgorithm:
        DFLASH = types.SimpleNamespace(name="DFLASH")

        @staticmethod
        def from_string(name: Any) -> Any:
            return types.SimpleNamespace(supports_mixed_chunk=lambda: False, name=name)

    mod("sglang.srt.speculative.spec_info", SpeculativeAlgorithm=SpeculativeAlgorithm, _attnplan_oracle=True)
    mod("sglang.srt.server_args", DETERMINISTIC_ATTENTION_BACKEND_CHOICES=ns["_choices"]["DETERMINISTIC_ATTENTION_BACKEND_CHOICES"],
        RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND=ns["_choices"]["RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND"],
        _attnplan_oracle=True)
    mod("sglang.srt.connector", ConnectorType=types.SimpleNamespace(INSTANCE="instance"), _attnplan_oracle=True)
    mod("sglang.srt.utils.common", parse_connector_type=lambda p: None, _attnplan_oracle=True)
    # The backend classes the factories import once their checks pass: building one is the pass.
    for m, cls in (("flashattention_backend", "FlashAttentionBackend"), ("trtllm_mha_backend", "TRTLLMHAAttnBackend"),
                   ("trtllm_mla_backend", "TRTLLMMLABackend"), ("cutedsl_mla_backend", "CuteDslMLAPrefillBackend"),
                   ("tokenspeed_mla_backend", "TokenspeedMLABackend")):
        mod(f"sglang.srt.layers.attention.{m}", **{cls: lambda *a, **k: "built"}, _attnplan_oracle=True)
    for pkg in ("sglang.srt.layers", "sglang.srt.layers.attention", "sglang.srt.layers.attention.qsa"):
        mod(pkg, _attnplan_oracle=True)
    mod("sglang.srt.layers.attention.qsa.config", is_qwen_qsa=lambda c: False, _attnplan_oracle=True)
    mod("sglang.srt.configs.iquest_q1", IQuestQ1MTPConfig=object, _attnplan_oracle=True)
    mod("sglang.srt.utils.hf_transformers_utils", get_config=lambda *a, **k: None, _attnplan_oracle=True)
    # the non-DSA DeepSeek branch (no index_topk): is_deepseek_dsa is False for every case
    mod("sglang.srt.configs.model_config", is_deepseek_dsa=lambda c: False, get_dsa_index_kpool=lambda c: 1,
        unwrap_modelopt_quantization_config=lambda q: q or {}, NONCAUSAL_FULL_ATTENTION="noncausal",
        _attnplan_oracle=True)
    sys.modules.setdefault("sglang.srt.utils", types.ModuleType("sglang.srt.utils"))


def _run_case(ns: dict[str, Any], c: Case) -> dict[str, Any]:
    """SGLang's functions over one case: the resolved backends, page size, or the refusal."""
    cap, cuda = c.capability, c.cuda
    preds = {}
    for attr, fn in ns["_platform_names"].items():
        if isinstance(ns.get(fn), functools.partial):
            g = dict(ns)
            g.update(is_cuda=lambda: True, get_device_sm=lambda: cap,
                     torch=types.SimpleNamespace(version=types.SimpleNamespace(cuda=cuda)))
            # _check_cuda_device_version's globals: rebind to this case's device
            f = types.FunctionType(ns["_check_cuda_device_version"].__code__, g)
            preds[attr] = bool(f(**ns[fn].keywords))
    for attr in ("is_hip", "is_npu", "is_xpu", "is_musa", "has_amx", "is_cpu"):
        preds[attr] = False
    preds["has_flashinfer"] = preds["is_cuda"] = True
    platform = _Platform(**preds, is_out_of_tree=lambda: False)
    real = None
    if c.model is not None:
        # a real config.json, made into hf_config / ModelConfig by SGLang's own code (oracle/sglang_models.py)
        from attnplan.oracle.sglang_models import sglang_model

        real = sglang_model(ns["_src"], c.model)
        hf, mc, arch, mla = real.hf_config, real.model_config, real.architecture, real.is_mla
        gdn = real.sglang_class in ns["_hybrid_gdn_classes"]
    else:
        arch = c.arch or ("DeepseekV2ForCausalLM" if c.mla else "LlamaForCausalLM")  # no model override registered
        hf = types.SimpleNamespace(architectures=[arch], quantization_config=None)
        mc = types.SimpleNamespace(hf_config=hf, quantization=None, has_asymmetric_kv=c.asymmetric,
                                   has_attention_sinks=c.sinks, is_encoder_decoder=False, context_len=8192,
                                   attention_chunk_size=None, head_dim=128, v_head_dim=128 if not c.asymmetric else 64,
                                   get_num_kv_heads=lambda *a: 8, attention_arch="MLA" if c.mla else "MHA")
        mla, gdn = c.mla, CONFIG_CLASS.get(arch) in ns["_hybrid_gdn_classes"]
    view = _View(attention_backend=c.attention_backend, prefill_attention_backend=c.prefill,
                 decode_attention_backend=c.decode, kv_cache_dtype=c.kv, page_size=c.page,
                 enable_deterministic_inference=c.deterministic,
                 speculative_algorithm=c.speculative_algorithm, speculative_eagle_topk=c.topk,
                 speculative_num_steps=3 if c.topk else None,
                 speculative_num_draft_tokens=(4 if c.topk == 1 else 8) if c.topk else None,
                 speculative_adaptive=False, max_running_requests=None, enable_mixed_chunk=False,
                 speculative_use_rejection_sampling=False, speculative_accept_threshold_single=1.0,
                 speculative_accept_threshold_acc=1.0, disable_overlap_schedule=False, disable_radix_cache=False,
                 mamba_radix_cache_strategy="auto", linear_attn_backend="triton", quantization=None, device="cuda", attn_cp_size=1, dcp_size=1, tp_size=1,
                 model_path="model", prefill_kv_cache_dequant_dtype="auto", disaggregation_mode="null",
                 enable_unified_memory=False, moe_runner_backend="auto", ep_size=1, dtype="auto",
                 speculative_ngram_max_bfs_breadth=1, cuda_graph_config=None, mem_fraction_static=0.8)

    def apply(sa: Any, fn: Any) -> None:
        for k, v in (fn(sa) or {}).items():
            setattr(sa, k, v)

    def declare(sa: Any, source: str, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(sa, k, v)

    g = ns
    g.update(get_platform=lambda: platform, current_platform=platform, resolving_view=lambda x: x, resolved_view=lambda x: x,
             model_config_of=lambda x: mc, use_mla_backend=lambda x: mla, run_post_process_pass=apply,
             declare_resolution=declare, is_mps=lambda: False, is_cpu=lambda: False, use_mlx=lambda: False,
             xpu_has_xmx_support=lambda: False, get_nvidia_driver_version=lambda: (580,),
             is_triton_kernels_available=lambda: False, with_phase=lambda *a, **k: None,
             Phase=types.SimpleNamespace(DECODE="decode", PREFILL="prefill"), Backend=types.SimpleNamespace(DISABLED="disabled"),
             resolution_result=lambda *a, **k: None, attn_dp_enabled_of=lambda *a: False,
             get_device_capability=lambda: (cap // 10, cap % 10), _is_musa=False,
             get_parallel=lambda: types.SimpleNamespace(dcp_enabled=False),
             get_spec=lambda: types.SimpleNamespace(speculative_algorithm=view.speculative_algorithm),
             torch=types.SimpleNamespace(float8_e4m3fn="float8_e4m3fn"),
             parse_connector_type=lambda p: None, ConnectorType=types.SimpleNamespace(INSTANCE="instance"),
             get_quantization_config=lambda hf: None, is_npu=lambda: False, is_blackwell=lambda: preds["is_blackwell"],
             hybrid_gdn_config=lambda m: (object() if gdn else None),
             GDNAttnBackend=lambda *a, **k: "built", context_parallel_attn_dp_size=lambda *a, **k: 1)
    g["resolved_view"] = lambda x: x
    _install_imports(ns)
    if real is not None:
        # configs/model_config.py is_deepseek_dsa, SGLang's own (a config with index_topk), for a real config
        from attnplan.oracle.sglang_models import _sglang_model_code

        sys.modules["sglang.srt.configs.model_config"].is_deepseek_dsa = _sglang_model_code(ns["_src"])["is_deepseek_dsa"]
    stage = "startup"
    try:
        # serving_hook.py handle_deprecated_args (pipeline.py runs it before the model hook): backend aliases
        ns["_backend_aliases"](view, view)
        # model_hook.py handle_model_specific_adjustments: the architecture's declarations (the last writer
        # wins over the flags), then its per-architecture branch (the asserts)
        override = ns["_overrides_by_arch"].get(arch)
        if override is not None:
            for k, v in (override(view, hf) or {}).items():
                if k in ("attention_backend", "page_size"):
                    setattr(view, k, v)
        ns["_model_branches"](view, arch, view, hf, mc)
        ns["handle_deterministic_inference"](view)
        ns["handle_nvfp4_prefill_kv_dequant_dtype"](view)
        ns["handle_attention_backend_compatibility"](view)
        ns["handle_kv4_compatibility"](view)
        apply(view, ns["_page_size_default"])
        # handle_speculative_decoding -> the EAGLE family's handler (after the page default in pipeline.py);
        # DFLASH's own handler (_handle_dflash) is not run (EXCEPTIONS)
        if view.speculative_algorithm is not None and view.speculative_algorithm != "DFLASH":
            ns["_handle_eagle_family"](view)
        # ModelRunner builds each phase's backend through attention_registry.py's factories.
        stage = "backend-build"
        runner = types.SimpleNamespace(use_mla_backend=mla, server_args=view, kv_cache_dtype=None,
                                       model_config=mc)
        factories = {"fa3": "create_flashattention_v3_backend", "trtllm_mha": "create_trtllm_mha_backend",
                     "trtllm_mla": "create_trtllm_mla_backend", "tokenspeed_mla": "create_tokenspeed_mla_backend"}
        for b in dict.fromkeys(ns["attention_backends_of"](view)):
            if b in factories and factories[b] in ns:
                ns[factories[b]](runner)
        # attn_backend_wrapper: the hybrid-GDN branch, for a model whose config class hybrid_gdn_config lists
        if gdn:
            pre, dec = ns["attention_backends_of"](view)
            runner.prefill_attention_backend_str, runner.decode_attention_backend_str = pre, dec
            ns["_hybrid_gdn_branch"](runner)
    except (ValueError, RuntimeError, AssertionError, NotImplementedError) as exc:
        return {"refused": True, "refused_at": stage, "error": f"{type(exc).__name__}: {exc}"}
    pre, dec = ns["attention_backends_of"](view)
    want_pre, want_dec = c.prefill or c.attention_backend, c.decode or c.attention_backend
    coerced = sorted({"attention_backend" for want, runs in ((want_pre, pre), (want_dec, dec)) if want and want != runs}
                     | ({"kv_cache_dtype"} if view.kv_cache_dtype != c.kv else set())
                     | ({"page_size"} if c.page is not None and view.page_size != c.page else set()))
    return {"refused": False, "prefill": pre, "decode": dec, "page_size": view.page_size, "coerced": coerced}


# -- attnplan's side ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def attnplan_tables(release: str) -> tuple[Any, str, Optional[str]]:
    """attnplan's SGLang tables for ``sglang==release``: (tables, the release they speak for, a note when that is
    not ``release``). The release is asked for as a caller asks (``parse_engine("sglang==X")``) and the tables
    taken for it (``data.native(rs, "sglang", X)``: the items whose ``versions:`` hold X). Where attnplan refuses
    the release (not modelled), the newest modelled release's tables stand in and the note says so - the
    comparison then shows what the older release does differently."""
    from attnplan.policy.engine import default_ruleset
    from attnplan.policy.engines import parse_engine
    from attnplan.policy.errors import InvalidInputError

    from attnplan.sglang.data import native

    rs = default_ruleset()
    try:
        parse_engine(f"sglang=={release}", rs)
    except InvalidInputError as exc:
        newest = rs.engines["sglang"].versions[-1]
        return native(rs, "sglang", newest), newest, f"attnplan refuses sglang=={release} ({exc.message}); " \
                                                     f"compared against attnplan's sglang=={newest}"
    return native(rs, "sglang", release), release, None


def _attnplan(c: Case, release: str = NEWEST) -> dict[str, Any]:
    from attnplan.sglang.flags import SglangFlags
    from attnplan.sglang.resolve import ModelFacts, Platform, resolve

    t = attnplan_tables(release)[0]
    arch = c.arch or ("DeepseekV2ForCausalLM" if c.mla else "LlamaForCausalLM")  # no model override registered
    if c.model is not None:
        config = _attnplan_model(c.model)
        arch = _model_arch(c.model)
    flags = SglangFlags(attention_backend=c.attention_backend, prefill_attention_backend=c.prefill,
                        decode_attention_backend=c.decode, kv_cache_dtype=c.kv, page_size=c.page,
                        enable_deterministic_inference=c.deterministic,
                        speculative_algorithm=c.speculative_algorithm, speculative_eagle_topk=c.topk,
                        speculative_num_steps=3 if c.topk else None, architecture=arch)
    cuda = tuple(int(x) for x in c.cuda.split(".")[:2])
    if c.model is not None:
        m = ModelFacts.from_config(config, arch)   # what engine_resolution hands the resolver for that config
    else:
        m = ModelFacts(is_mla=c.mla, sinks=c.sinks, asymmetric_kv=c.asymmetric, group_size=c.group, architecture=arch)
    r = resolve(flags, m, Platform(c.capability, cuda), t)  # type: ignore[arg-type]
    if r.refusal is not None:
        return {"refused": True, "rule": r.refusal.rule, "refused_at": r.refusal.outcome,
                "error": f"[{r.refusal.rule}] {r.refusal.message}"}
    coerced = sorted({_FIELD.get(k.field, k.field) for k in r.coercions if user_gave(c, _FIELD.get(k.field, k.field))
                      and k.given != k.runs})
    return {"refused": False, "prefill": r.prefill, "decode": r.decode, "page_size": r.page_size, "coerced": coerced}


_FIELD = {"prefill_attention_backend": "attention_backend", "decode_attention_backend": "attention_backend"}


def user_gave(c: Case, field: str) -> bool:
    """Whether the case's command line sets ``field`` (a coercion is of a value the user gave)."""
    if field == "attention_backend":
        return any(b is not None for b in (c.attention_backend, c.prefill, c.decode))
    if field == "page_size":
        return c.page is not None
    return field == "kv_cache_dtype"


@functools.lru_cache(maxsize=64)
def _attnplan_model(name: str) -> Any:
    """attnplan's own reading of a real config.json (model/hfconfig.py config_from_hf)."""
    from attnplan.oracle.sglang_models import attnplan_config

    return attnplan_config(name)


@functools.lru_cache(maxsize=64)
def _model_arch(name: str) -> str:
    from attnplan.oracle.sglang_models import config_json

    return config_json(name)["architectures"][0]


# -- configurations ---------------------------------------------------------------------------------
CAPS = (80, 86, 89, 90, 100, 103, 120, 121)
CUDAS = ("12.2", "12.4", "12.8", "13.0")
BACKENDS = (None, "fa3", "flashinfer", "trtllm_mha", "triton", "fa4", "trtllm_mla", "flashmla")
SPLITS = ((None, None), ("flashinfer", "trtllm_mha"), ("fa3", "flashinfer"), ("trtllm_mha", "trtllm_mha"))
KVS = ("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "nvfp4")
PAGES = (None, 1, 16, 64, 128)


# Architectures with an override, an assert or a hybrid-GDN build check (and Llama, whose automatic EAGLE top-k
# is 4): (architecture, MLA, sinks).
ARCHS = (("GptOssForCausalLM", False, True), ("DeepseekV3ForCausalLM", True, False),
         ("KimiK25ForConditionalGeneration", True, False), ("Qwen3NextForCausalLM", False, False),
         ("Qwen3_5ForConditionalGeneration", False, False), ("Qwen3_5MoeForConditionalGeneration", False, False),
         ("InternS2PreviewForConditionalGeneration", False, False), ("InternS2MobiusForConditionalGeneration", False, False),
         ("FalconH1ForCausalLM", False, False), ("JetNemotronForCausalLM", False, False), ("Llama4ForCausalLM", False, False),
         ("Llama4ForConditionalGeneration", False, False), ("LlamaForCausalLM", False, False))
# (top-k, EAGLE with no top-k and no num-steps)
SPECS = ((None, False), (1, False), (4, False), (None, True))


def cases() -> Iterator[Case]:
    """Every generated configuration (the oracle's space)."""
    for cap, cuda, mla, be, (pre, dec), kv, page, det, topk in itertools.product(
            CAPS, CUDAS, (False, True), BACKENDS, SPLITS, KVS, PAGES, (False, True), (None, 1, 4)):
        yield Case(cap, cuda, mla, False, False, None, be, pre, dec, kv, page, det, topk)
    for cap, cuda, sinks, asym, kv, page in itertools.product(CAPS, CUDAS, (False, True), (False, True), KVS, PAGES):
        yield Case(cap, cuda, False, sinks, asym, None, None, None, None, kv, page, False, None)
    for (arch, mla, sinks), cap, cuda, be, (pre, dec), kv, page, (topk, auto) in itertools.product(
            ARCHS, CAPS, ("12.4", "12.8"), BACKENDS, SPLITS, ("auto", "fp8_e4m3", "nvfp4"), (None, 16, 128), SPECS):
        yield Case(cap, cuda, mla, sinks, False, arch, be, pre, dec, kv, page, False, topk, spec_auto=auto)
    for cap, cuda, be, pre, dec, kv in itertools.product(CAPS, ("12.4", "12.8"), (None, "cutedsl_mla", "trtllm_mla"),
                                                          (None, "cutedsl_mla", "trtllm_mla", "flashinfer"),
                                                          (None, "cutedsl_mla", "trtllm_mla"), KVS):
        yield Case(cap, cuda, True, False, False, "DeepseekV2ForCausalLM", be, pre, dec, kv, None, False, None)


# Real models (issue 39 item 2): every axis a model override, a model_hook.py assert or a backend factory reads
# crossed with each real config.json of attnplan/oracle/sglang_models.py MODELS.
MODEL_PAGES = (None, 1, 64, 128)
MODEL_KVS = ("auto", "fp8_e4m3", "nvfp4")


def model_cases() -> Iterator[Case]:
    from attnplan.oracle.sglang_models import MODELS, config_json

    for name in MODELS:
        data = config_json(name)
        text = data.get("text_config") or data
        mla = text.get("kv_lora_rank") is not None
        for cap, cuda, be, (pre, dec), kv, page, (topk, auto), det in itertools.product(
                CAPS, ("12.4", "12.8"), BACKENDS, SPLITS, MODEL_KVS, MODEL_PAGES, SPECS, (False, True)):
            if det and (topk or auto or kv != "auto"):
                continue   # deterministic mode crossed with the backends and pages only
            yield Case(cap, cuda, mla, False, False, data["architectures"][0], be, pre, dec, kv, page, det, topk,
                       spec_auto=auto, model=name)


# The surfaces where SGLang 0.5.21-0.5.23 differ and cases() does not reach (issue 42): DFLASH on SM100
# (model_override_base.py _forces_eagle_topk_one, 0.5.23), tokenspeed_mla (its own backend through 0.5.22,
# serving_hook.py's alias of cutedsl_mla in 0.5.23), Gemma4's assert (fa4 accepted from 0.5.22) and
# DiffusionGemma's FA4 page (overrides.py _fa4_page_constraint, page 1 from 0.5.22).
GEMMA4 = ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "DiffusionGemmaForBlockDiffusion")


def release_cases() -> Iterator[Case]:
    for cap, cuda, be, sinks, asym, page in itertools.product(CAPS, ("12.4", "12.8"), (None, "trtllm_mha", "fa4",
                                                                                     "flashinfer"),
                                                             (False, True), (False, True), (None, 1, 16)):
        yield Case(cap, cuda, False, sinks, asym, None, be, None, None, "auto", page, False, None, algorithm="DFLASH")
    ts = (None, "tokenspeed_mla")
    for cap, cuda, be, pre, dec, kv, page in itertools.product(CAPS, ("12.4", "12.8"), ts + ("trtllm_mla",), ts,
                                                               ts + ("trtllm_mla",), KVS, (None, 1, 64)):
        if "tokenspeed_mla" in (be, pre, dec):
            yield Case(cap, cuda, True, False, False, "DeepseekV2ForCausalLM", be, pre, dec, kv, page, False, None)
    for arch, cap, be, (pre, dec), page in itertools.product(GEMMA4, CAPS, BACKENDS, SPLITS, (None, 1, 16)):
        yield Case(cap, "12.8", False, False, False, arch, be, pre, dec, "auto", page, False, None)


def release_group(c: Case) -> str:
    """Which surface of release_cases() a case exercises: dflash, tokenspeed_mla, gemma4 (or core: cases())."""
    if c.algorithm == "DFLASH":
        return "dflash"
    if "tokenspeed_mla" in (c.attention_backend, c.prefill, c.decode):
        return "tokenspeed_mla"
    return "gemma4" if c.arch in GEMMA4 else "core"


def compare(sample: Optional[int] = None, seed: int = 0, src: Optional[Path] = None, release: Optional[str] = None,
            extra: bool = False, pool: Optional[list[Case]] = None, models: bool = False) -> dict[str, Any]:
    """Agreement per field over the generated configurations (all, or a seeded sample) between ``release``'s
    own functions (its source: ``src``, else ``release_src``) and attnplan asked for ``sglang==release``
    (``attnplan_tables``); ``extra`` adds ``release_cases()``, ``models`` ``model_cases()`` (real config.json files);
    ``pool`` replaces the generated cases."""
    if release is None:
        release = release_of(src) if src is not None else NEWEST
    src = Path(src) if src is not None else release_src(release)
    ns = _sglang(str(src))
    if pool is None:
        pool = list(cases()) + (list(release_cases()) if extra else []) + (list(model_cases()) if models else [])
    if sample is not None and sample < len(pool):
        pool = random.Random(seed).sample(pool, sample)
    agree = {f: 0 for f in FIELDS}
    seen = {f: 0 for f in FIELDS}
    disagreements: list[dict[str, Any]] = []
    excepted = 0
    for c in pool:
        want, got = _run_case(ns, c), _attnplan(c, release)
        if got.get("rule") in EXCEPTED_RULES and not want["refused"]:
            excepted += 1
            continue
        diff = []
        for f in FIELDS:
            if f == "refused_at":
                if not (want["refused"] and got["refused"]):
                    continue  # where both refuse: at the same stage
            elif f != "refused" and (want["refused"] or got["refused"]):
                continue  # a backend, page or coercion is compared only where neither side refused
            seen[f] += 1
            if want.get(f) == got.get(f):
                agree[f] += 1
            else:
                diff.append(f)
        if diff:
            disagreements.append({"case": c.__dict__, "fields": diff, "sglang": want, "attnplan": got})
    _, modelled, note = attnplan_tables(release)
    return {"release": release, "src": str(src),
            "attnplan_release": modelled, "note": note,
            "cases": len(pool), "excepted": excepted, "agreement": {f: {"agree": agree[f], "of": seen[f]} for f in FIELDS},
            "disagreements": disagreements, "exceptions": list(EXCEPTIONS)}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnplan.oracle.sglang", description=__doc__.split("\n")[0])
    p.add_argument("--sample", type=int, default=None, help="a seeded sample of the configurations (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--release", choices=RELEASES, default=None,
                   help=f"the SGLang release: its source (default {RELEASES_DIR}/sglang-X/sglang/srt; {NEWEST}: --src) "
                        f"against attnplan's sglang==X (default: the release --src holds, else {NEWEST})")
    p.add_argument("--src", type=Path, default=None, help=f"sglang/srt of an extracted SGLang wheel (default {SRC})")
    p.add_argument("--release-cases", action="store_true",
                   help="add the cases where the releases differ (DFLASH, tokenspeed_mla, Gemma4) to the pool")
    p.add_argument("--models", action="store_true",
                   help="add model_cases(): the real config.json files of attnplan/oracle/sglang_models.py, read by "
                        "SGLang's own ModelConfig code and by attnplan's hfconfig")
    p.add_argument("--models-only", action="store_true", help="only model_cases()")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    release = a.release or (release_of(a.src) if a.src is not None else NEWEST)
    src = a.src if a.src is not None else release_src(release)
    if not (src / "arg_groups").is_dir():
        print(f"attnplan: error: no SGLang {release} source at {src} (give --src .../sglang/srt, or run make setup)",
              file=sys.stderr)
        return 2
    pool = list(model_cases()) if a.models_only else None
    rep = compare(a.sample, a.seed, src, release, extra=a.release_cases, pool=pool, models=a.models)
    if a.json:
        json.dump(rep, sys.stdout, indent=2, default=str)
        print()
    else:
        print(f"SGLang {release} oracle ({src}) against attnplan's sglang=={rep['attnplan_release']}: {rep['cases']} "
              f"configurations ({rep['excepted']} refused by a rule whose SGLang code the oracle does not run: "
              f"{', '.join(sorted(EXCEPTED_RULES))})")
        if rep["note"]:
            print(f"  note: {rep['note']}")
        for f, v in rep["agreement"].items():
            print(f"  {f:10s} {v['agree']}/{v['of']} agree")
        for d in rep["disagreements"][:20]:
            print(f"  DISAGREE {d['fields']}: {d['case']}\n    sglang:   {d['sglang']}\n    attnplan: {d['attnplan']}")
        print("named exceptions (not exercised):")
        for e in rep["exceptions"]:
            print(f"  - {e}")
    return 0 if not rep["disagreements"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
