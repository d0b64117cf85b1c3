"""SGLang's own model reading for its oracle (issue 39 item 2): real config.json files made into the objects
SGLang's model overrides, hooks and backend factories read, by SGLang 0.5.23's own code taken out of its source.

SGLang's ``ModelConfig.__init__`` (configs/model_config.py) downloads, loads quantization configs and imports
half of sglang.srt, none of which runs on a CPU-only machine without SGLang installed. The oracle builds the
smallest object the hooks read instead, with SGLang's code wherever SGLang decides something:

- ``hf_config``: transformers' config class for the file's ``model_type`` (SGLang's ``get_config`` ->
  ``AutoConfig.from_pretrained``; its ``_CONFIG_REGISTRY`` maps ``kimi_k2`` to a subclass of transformers'
  ``DeepseekV3Config``, the class used here). Where transformers' strict config class refuses a field of the real
  file (Llama-4's ``attn_temperature_tuning: 4``, declared a bool, under transformers 5.20), that field is left out
  and ``reader`` names it: no hook or backend choice reads it.
- SGLang's own config class name (``sglang_class``): the class its ``_CONFIG_REGISTRY``
  (utils/hf_transformers/common.py) registers for the ``model_type`` (``Qwen3NextConfig``, ``FalconH1Config``...),
  read from the source; configs/hybrid_arch.py ``hybrid_gdn_config`` tests that class.
- ``hf_text_config``: utils/hf_transformers/common.py ``get_hf_text_config`` / ``_patch_text_config``, unchanged.
- the model config: ``ModelConfig``'s own methods, unchanged (``_derive_model_shapes``, ``_detect_attention_sinks``,
  ``has_asymmetric_kv``, the KV-head getters) and ``is_hybrid_swa_model``, run on a record holding
  ``hf_config`` / ``hf_text_config``: ``attention_arch`` (MLA or MHA), head dims, sinks, hybrid SWA come from them.

The config files: attnplan's presets and tests/models (each with its Hub repository in tests/models/README.md)
and ``model_configs/`` (Kimi-K2; SOURCES.md there).
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import math
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from attnplan.errors import SourceNotFoundError

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# name -> the real config.json (Hub repository: tests/models/README.md, attnplan/presets, model_configs/SOURCES.md)
MODELS: dict[str, Path] = {
    "deepseek-v3": ROOT / "tests/models/deepseek-v3.json",
    "kimi-k2": HERE / "model_configs/kimi-k2-instruct.json",
    "gpt-oss-20b": ROOT / "tests/models/gpt-oss-20b.json",
    "gpt-oss-120b": ROOT / "attnplan/presets/gpt-oss-120b.json",
    "qwen3-next": ROOT / "tests/models/qwen3-next-80b-a3b-instruct.json",
    "falcon-h1": ROOT / "tests/models/falcon-h1-7b-instruct.json",
    "llama-4-scout": ROOT / "tests/models/llama-4-scout-17b-16e-instruct.json",
    "gemma-2": ROOT / "tests/models/gemma-2-9b.json",
    "gemma-3-27b": ROOT / "tests/models/gemma-3-27b-it.json",
    "gemma-3-1b": ROOT / "tests/models/gemma-3-1b-it.json",
    "llama-3.1-8b": ROOT / "attnplan/presets/llama-3.1-8b.json",
}

# The ModelConfig methods the hooks' reads go through (configs/model_config.py class ModelConfig).
_METHODS = ("_derive_model_shapes", "_detect_attention_sinks", "has_asymmetric_kv", "_init_mla_scaling",
            "get_total_num_attention_heads", "get_num_attention_heads", "get_total_num_kv_heads",
            "get_max_num_attention_heads", "get_num_kv_heads")
# ...and the module-level names they call.
_MODULE_NAMES = {"AttentionArch", "SWA_SINK_ARCHS", "MIMO_V2_MODEL_ARCHS", "PURE_MAMBA1_ARCHITECTURES",
                 "PURE_SSM_ARCHITECTURES", "_hf_arch", "_hf_attr", "is_deepseek_dsa", "is_deepseek_v4", "is_qwen4_exp",
                 "get_dsa_index_head_dim", "resolve_spec_hidden_size", "compute_mla_mscale_scaling",
                 "is_hybrid_swa_model"}


def config_json(name: str) -> dict[str, Any]:
    """The real config.json of a model the oracle knows (MODELS)."""
    path = MODELS.get(name)
    if path is None:
        raise SourceNotFoundError(f"no model config {name!r} (known: {', '.join(MODELS)})")
    if not path.is_file():
        raise SourceNotFoundError(f"{path}: the model config for {name} is missing (a source checkout has it)")
    return json.loads(path.read_text())


def _top(tree: ast.Module, names: set[str], path: Path) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            out.append(node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            out.append(node)
    found = {getattr(n, "name", None) for n in out} | {t.id for n in out if isinstance(n, ast.Assign)
                                                      for t in n.targets if isinstance(t, ast.Name)}
    if names - found:
        raise SourceNotFoundError(f"{path}: not found: {sorted(names - found)}")
    return out


def _registry_classes(src: Path) -> dict[str, str]:
    """SGLang's ``_CONFIG_REGISTRY``: model_type -> SGLang's config class name, for the classes the registry lists
    that sglang/srt/configs defines (a ``model_type = "..."`` in the class body)."""
    common = src / "utils/hf_transformers/common.py"
    tree = ast.parse(common.read_text(), str(common))
    listed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "_CONFIG_REGISTRY":
            listed = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    if not listed:
        raise SourceNotFoundError(f"{common}: no _CONFIG_REGISTRY")
    out: dict[str, str] = {}
    for f in sorted((src / "configs").glob("*.py")):
        for node in ast.parse(f.read_text(), str(f)).body:
            if isinstance(node, ast.ClassDef) and node.name in listed:
                for st in node.body:
                    if (isinstance(st, ast.Assign) and any(getattr(t, "id", None) == "model_type" for t in st.targets)
                            and isinstance(st.value, ast.Constant)):
                        out[st.value.value] = node.name
    return out


@functools.lru_cache(maxsize=4)
def _sglang_model_code(src: str) -> dict[str, Any]:
    """SGLang's ModelConfig methods (as a class) and the helpers they call, compiled from its source."""
    s = Path(src)
    mc_path = s / "configs/model_config.py"
    tree = ast.parse(mc_path.read_text(), str(mc_path))
    body = _top(tree, _MODULE_NAMES, mc_path)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelConfig"), None)
    if cls is None:
        raise SourceNotFoundError(f"{mc_path}: no class ModelConfig")
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in _METHODS]
    missing = set(_METHODS) - {m.name for m in methods}
    if missing:
        raise SourceNotFoundError(f"{mc_path}: ModelConfig has no {sorted(missing)}")
    shell = ast.ClassDef(name="SglangModelConfig", bases=[], keywords=[], body=methods, decorator_list=[],
                         type_params=[])
    body.append(ast.fix_missing_locations(ast.copy_location(shell, cls)))
    common = s / "utils/hf_transformers/common.py"
    body += _top(ast.parse(common.read_text(), str(common)), {"get_hf_text_config", "_patch_text_config"}, common)
    from enum import Enum, IntEnum, auto

    import torch
    from transformers import PretrainedConfig

    ns: dict[str, Any] = {"__name__": "sglang_oracle_model_config", "math": math, "Enum": Enum, "IntEnum": IntEnum,
                          "auto": auto, "Any": Any, "Optional": Optional, "List": list, "torch": torch,
                          "PretrainedConfig": PretrainedConfig, "logger": logging.getLogger("attnplan.oracle.sglang"),
                          "cached_property": functools.cached_property,
                          # rope_scaling "type" spelling for remote code (hf_transformers_patches.py): no attention fact
                          "normalize_rope_scaling_compat": lambda config: None,
                          # the yarn mscale only scales softmax; no backend reads it
                          "yarn_get_mscale": lambda scale=1.0, mscale=1.0: 1.0}
    exec(compile(ast.Module(body=body, type_ignores=[]), f"{mc_path}:ModelConfig", "exec"), ns)
    ns["_registry"] = _registry_classes(s)
    return ns


def _install_dots3() -> None:
    # _derive_model_shapes imports configs/dots3.py's Dots3Config for an isinstance test: no model here is Dots3
    name = "sglang.srt.configs.dots3"
    if name not in sys.modules:
        for pkg in ("sglang", "sglang.srt", "sglang.srt.configs"):
            if pkg not in sys.modules:
                m = types.ModuleType(pkg)
                m.__path__ = []  # type: ignore[attr-defined]
                sys.modules[pkg] = m
        mod = types.ModuleType(name)
        mod.Dots3Config = type("Dots3Config", (), {})  # type: ignore[attr-defined]
        sys.modules[name] = mod


def hf_config(data: dict[str, Any]) -> tuple[Any, str]:
    """transformers' config object for a config.json, as SGLang's get_config loads it, and which reader made it."""
    import transformers
    from huggingface_hub.errors import StrictDataclassFieldValidationError
    from transformers import AutoConfig

    d = json.loads(json.dumps(data))
    model_type = d.pop("model_type", None)
    dropped: list[str] = []
    for _ in range(8):
        try:
            if model_type == "kimi_k2":   # SGLang's _KimiK2ConfigAlias(transformers.DeepseekV3Config)
                alias = type("_KimiK2ConfigAlias", (transformers.DeepseekV3Config,), {"model_type": "kimi_k2"})
                obj, how = alias(**d), "SGLang's _KimiK2ConfigAlias(transformers DeepseekV3Config)"
            else:
                obj = AutoConfig.for_model(model_type, **d)
                how = f"transformers {type(obj).__name__}"
            if dropped:
                how += f"; left out, refused by transformers' strict config class: {', '.join(dropped)}"
            return obj, how
        except StrictDataclassFieldValidationError as exc:
            # transformers >= 5 validates field types (huggingface_hub strict dataclasses): Llama-4's real file has
            # attn_temperature_tuning: 4 where the class declares a bool. Leave the refused field out (none of them
            # is read by a hook or an attention backend choice) and say so in ``reader``.
            name = str(exc).split("'")[1]   # "Validation error for field '<name>':"
            where = [sub for sub in [d] + [v for v in d.values() if isinstance(v, dict)] if name in sub]
            if not where:
                raise
            for sub in where:
                del sub[name]
            dropped.append(name)
    raise SourceNotFoundError(f"transformers refuses the {model_type} config: {', '.join(dropped)}")


@dataclass(frozen=True)
class SglangModel:
    """What SGLang's code made of one config.json."""

    name: str
    hf_config: Any
    model_config: Any
    sglang_class: Optional[str]    # SGLang's own config class for the text config's model_type, if it has one
    reader: str

    @property
    def architecture(self) -> str:
        return self.hf_config.architectures[0]

    @property
    def is_mla(self) -> bool:
        return self.model_config.attention_arch.name == "MLA"


@functools.lru_cache(maxsize=64)
def sglang_model(src: str, name: str) -> SglangModel:
    """The hf_config and model config SGLang's code builds for MODELS[name] (src: sglang/srt)."""
    ns = _sglang_model_code(src)
    _install_dots3()
    hf, reader = hf_config(config_json(name))
    mc = ns["SglangModelConfig"]()
    mc.hf_config = hf
    mc.hf_text_config = ns["get_hf_text_config"](hf)
    mc.is_draft_model = False
    mc._derive_model_shapes()
    mc.has_attention_sinks = mc._detect_attention_sinks()
    # ModelConfig._derive_hybrid_model (the server default: hybrid SWA memory on)
    mc.is_hybrid_swa = ns["is_hybrid_swa_model"](hf.architectures, mc.hf_text_config)
    mc.is_encoder_decoder = False   # is_encoder_decoder_model: mllama / whisper only
    mc.attention_chunk_size = getattr(mc.hf_text_config, "attention_chunk_size", None)
    mc.context_len = getattr(mc.hf_text_config, "max_position_embeddings", 8192)
    mc.quantization = None          # --quantization (unset); hf_config.quantization_config stays the file's
    text_type = getattr(hf.get_text_config(), "model_type", None) if hasattr(hf, "get_text_config") else None
    return SglangModel(name, hf, mc, ns["_registry"].get(text_type or getattr(hf, "model_type", None)), reader)


def attnplan_config(name: str) -> Any:
    """attnplan's own reading of the same config.json (model/hfconfig.py config_from_hf)."""
    from attnplan.model.hfconfig import config_from_hf

    return config_from_hf(config_json(name))
