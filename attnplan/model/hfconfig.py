"""A HuggingFace model (directory, config.json or cached repo id) -> attention config fields (docs/contract.md, The plan).

Reading follows vLLM 0.33 (/work/ref/vllm-src/vllm/transformers_utils/config.py
``CONFIG_FIELD_ALIASES`` and transformers_utils/model_arch_config_convertor.py
``get_head_size``/``get_total_num_kv_heads``, ``FalconModelArchConfigConvertor``): KV heads come
from the first of ``n_head_kv``, ``num_kv_heads``, ``num_key_value_heads``,
``multi_query_group_num``, ``num_attention_groups``; the head size from ``head_dim`` (> 0) or
``hidden_size / num_attention_heads``.

Two readers. attnplan's own reads the dict; it is used whenever it can read the whole file
(``_own_reading``: a family in ``SPELLED_OUT``, every attention field its transformers config
class would otherwise default spelled out in the file, no key it does not understand), which is
every shipped preset: importing transformers costs seconds (torch comes with it), and a planner
that takes seconds per call is not used. Otherwise, when ``transformers`` is importable, the
family's own config class reads the file (``AutoConfig.for_model``), so family quirks (attribute
maps, class defaults, ``text_config`` nesting) are read as the model's code reads them; without
transformers the dict is read by hand and every field not understood is named in
``ModelInfo.notes_says`` (data: render/notes.py words it). tests/test_model_plan_cli.py checks that both readers agree on every config
the repository holds. Impossible values
(0 or negative heads, NaN/inf soft-cap, heads not divisible by KV heads) are refused.
Every file goes through :mod:`attnplan.safeio` (bounded, regular files only, nesting bounded,
duplicate keys refused).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from ..policy.answer import Note
from ..policy.config import AttentionConfig, make_config
from ..policy.dtypes import HALF_DTYPES, TORCH_DTYPE
from attnplan.errors import InvalidInputError, ModelConfigError

MAX_CONFIG_BYTES = 4 << 20
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
MLA_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
# Keys read above or known not to affect the attention kernels (named so that the rest can be noted).
_READ = set(KV_HEAD_KEYS + HEAD_KEYS + MLA_KEYS) | {
    "head_dim", "hidden_size", "torch_dtype", "dtype", "sliding_window", "use_sliding_window",
    "attn_logit_softcapping", "model_type", "text_config", "multi_query", "new_decoder_architecture"}
_HARMLESS = {
    "architectures", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id", "vocab_size",
    "intermediate_size", "num_hidden_layers", "max_position_embeddings", "rms_norm_eps",
    "layer_norm_eps", "layer_norm_epsilon", "rope_theta", "rope_scaling", "rope_parameters",
    "hidden_act", "initializer_range", "tie_word_embeddings", "transformers_version", "use_cache",
    "attention_bias", "attention_dropout", "mlp_bias", "pretraining_tp", "q_lora_rank", "n_routed_experts",
    "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size", "first_k_dense_replace",
    "num_local_experts", "router_aux_loss_coef", "quantization_config", "final_logit_softcapping",
    "query_pre_attn_scalar", "max_window_layers", "layer_types", "num_nextn_predict_layers",
    "bias", "parallel_attn", "alibi", "hidden_dropout", "qk_layernorm", "topk_method", "n_group",
    "topk_group", "routed_scaling_factor", "scoring_func", "norm_topk_prob", "ep_size", "moe_layer_freq",
    "_name_or_path", "vision_config", "image_token_index", "num_experts", "output_router_logits",
    "swiglu_limit", "experts_per_token", "initial_context_length", "rope_scaling_type", "head_dtype",
    # MoE training loss, generation defaults, the MLP's activation, RoPE bases, Gemma-2's old name
    # of sliding_window (read above): none changes an attention kernel.
    "aux_loss_alpha", "cache_implementation", "hidden_activation", "rope_local_base_freq", "sliding_window_size"}
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")


@dataclass(frozen=True)
class ModelInfo:
    """What a model's config implies: the attention fields, where they came from and what was not read
    (``notes_says``: data, worded by render/notes.py ``notes_text``; issue 36 item 6)."""

    fields: dict[str, Any]
    source: str
    reader: str  # "transformers" or "attnplan"
    notes_says: tuple[Note, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict)


# -- locating and reading the file ------------------------------------------------------------
def hf_cache_dir() -> Path:
    """The hub cache huggingface_hub uses: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


# A revision is a git ref (branch or tag) or a commit hash, never a path (issue 40 #4: a REST client's
# ``revision: "/etc"`` or ``"../../x"`` made the node open that directory's config.json, and
# huggingface_hub's try_to_load_from_cache reads ``refs/<revision>`` whole: a 700 MB file named as the
# revision took the server to 2.2 GB). One path segment of the characters HuggingFace's own branch and
# tag names use; ``..`` is no git ref name (git check-ref-format).
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_REF_BYTES = 256  # refs/<name> holds one commit hash


def check_revision(revision: Any) -> Optional[str]:
    """``revision`` when it is a branch, tag or commit hash; else ``InvalidInputError`` (never echoing it)."""
    if revision is None:
        return None
    if not isinstance(revision, str) or not REVISION.fullmatch(revision) or ".." in revision:
        raise InvalidInputError("revision", "a git branch, tag or commit hash (letters, digits, '.', '_', '-'; "
                                            "e.g. main or a 40-hex commit), never a path")
    return revision


def _under(path: Path, root: Path) -> bool:
    try:
        return path.resolve(strict=True).is_relative_to(root.resolve(strict=True))
    except (OSError, RuntimeError):  # gone, a symlink loop
        return False


def _cached_config(repo_id: str, revision: Optional[str]) -> Optional[Path]:
    """The cached snapshot's config.json of ``repo_id`` at ``revision`` (the layout huggingface_hub
    documents: models--org--name/refs/<ref> holds a commit, snapshots/<commit>/config.json), or None.
    Read offline, bounded, and only inside that repo's cache folder: the file (a symlink into
    ../../blobs) must resolve under it, and a ref file is read to at most ``MAX_REF_BYTES``."""
    from attnplan.safeio import read_bounded

    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        return None
    ref = check_revision(revision) or "main"
    repo_dir = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    commit = ref
    ref_file = repo_dir / "refs" / ref
    if ref_file.is_file() and _under(ref_file, repo_dir):
        try:
            commit = read_bounded(ref_file, what="revision", max_bytes=MAX_REF_BYTES).strip()
        except InvalidInputError:
            return None
        if not REVISION.fullmatch(commit) or ".." in commit:
            return None
    p = repo_dir / "snapshots" / commit / "config.json"
    return p if p.is_file() and _under(p, repo_dir) else None


def cached_config(repo_id: str, revision: Optional[str] = None) -> Optional[Path]:
    """The config.json of a repo id in the local HuggingFace cache at ``revision`` (a ref or commit:
    ``check_revision``), resolved inside the repo's cache folder only; None when it is not cached."""
    return _cached_config(repo_id, revision)


def _preset(name: str) -> Optional[Path]:
    """A shipped preset (attnplan/presets/NAME.json) by its name, e.g. ``llama-3.1-8b``."""
    if "/" in name:
        return None
    from attnplan.presets import PRESETS_DIR

    p = PRESETS_DIR / f"{name}.json"
    return p if p.is_file() else None


def resolve_model(ref: str | Path, revision: Optional[str] = None) -> Path:
    """The config.json a model reference names: a config.json path, a directory holding one, a
    shipped preset by name (``llama-3.1-8b``: attnplan/presets), or a HuggingFace repo id found in
    the local cache (never downloaded). A local path wins over a preset, a preset over the cache.
    ``revision`` is a git ref or commit hash (``check_revision``), never a path."""
    check_revision(revision)
    s = str(ref)
    if not s.strip():
        raise ModelConfigError(repr(s), "empty model reference")
    p = Path(s).expanduser()
    if p.is_dir():
        if not (p / "config.json").exists():
            raise ModelConfigError(s, "directory has no config.json")
        return p / "config.json"
    if p.exists() or s.startswith((".", "/", "~")) or s.endswith(".json") or not _REPO_ID.fullmatch(s):
        return p
    preset = _preset(s)
    if preset is not None:
        return preset
    got = _cached_config(s, revision)
    if got is None:
        raise ModelConfigError(s, f"not a local path and not in the HuggingFace cache ({hf_cache_dir()}); "
                                  f"fetch it with: hf download {s} config.json")
    return got


def read_model_config(path: str | Path) -> dict[str, Any]:
    from attnplan.safeio import parse_json, read_bounded

    p = resolve_model(path)
    try:
        data = parse_json(read_bounded(p, what="model_config", max_bytes=MAX_CONFIG_BYTES),
                          what="model_config", name=str(path))
    except ModelConfigError:
        raise
    except InvalidInputError as exc:
        msg = str(exc).split(": ", 1)[1] if ": " in str(exc) else str(exc)
        raise ModelConfigError(str(path), msg) from None
    if not isinstance(data, dict):
        raise ModelConfigError(str(path), "a config.json holds a JSON object")
    return data


# -- reading the fields -----------------------------------------------------------------------
class _Dict:
    def __init__(self, data: Mapping[str, Any]):
        self.data = data

    def get(self, key: str) -> Any:
        return self.data.get(key)


class _Obj:
    def __init__(self, cfg: Any):
        self.cfg = cfg

    def get(self, key: str) -> Any:
        if key == "torch_dtype":  # transformers 5's name (reading the old one warns)
            key = "dtype"
        return getattr(self.cfg, key, None)


def _int(src: Any, key: str, where: str, *, minimum: int = 1) -> Optional[int]:
    v = src.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ModelConfigError(where, f"{key} must be an integer, got {v!r}")
    if v < minimum:
        raise ModelConfigError(where, f"{key} must be at least {minimum}, got {v}")
    return v


def _first(src: Any, keys: tuple[str, ...], where: str) -> Optional[int]:
    for k in keys:
        v = _int(src, k, where)
        if v is not None:
            return v
    return None


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' own warnings (rope validation, renamed keys) are not attnplan's output: the
    reading's notes say what matters. Its logger and Python warnings are silenced while it reads."""
    import logging
    import warnings

    lg = logging.getLogger("transformers")
    level = lg.level
    lg.setLevel(logging.ERROR + 10)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        lg.setLevel(level)


def _transformers_config(data: Mapping[str, Any], notes: Optional[list[Note]] = None) -> Any:
    """The model's own config class, when transformers knows the model_type; None otherwise.

    A public config.json that the installed transformers' class refuses (version skew: e.g.
    Llama-4-Scout's integer ``attn_temperature_tuning`` against a bool field) is read by
    attnplan's own parser instead, and a note says why: refusing the model would be wrong."""
    mt = data.get("model_type")
    if not isinstance(mt, str):
        return None
    try:
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        return None
    if mt not in CONFIG_MAPPING:
        return None
    kwargs = {k: v for k, v in data.items() if k != "model_type"}
    if "torch_dtype" in kwargs and "dtype" not in kwargs:  # transformers 5 renamed it (and warns)
        kwargs["dtype"] = kwargs.pop("torch_dtype")
    try:
        with _quiet_transformers():
            cfg = AutoConfig.for_model(mt, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a config the family's own class refuses
        if notes is not None:
            first = str(exc).strip().splitlines()
            notes.append(Note(kind="config-class-refused", name=mt, value=first[0] if first else type(exc).__name__))
        return None
    # vLLM reads the language model's sub-config (transformers_utils/config.py get_hf_text_config).
    get_text = getattr(cfg, "get_text_config", None)
    return get_text() if callable(get_text) else cfg


# Families attnplan's own reader may read, with the attention fields their transformers config
# class gives a default when the file leaves them out (``AutoConfig.for_model(mt)`` of
# transformers 5.20: Qwen3Config.head_dim=128, Gemma2Config.attn_logit_softcapping=50.0,
# MistralConfig.sliding_window=4096, Qwen2/3 use_sliding_window=False, DeepseekV3Config's MLA
# sizes...). A file that spells all of them out reads the same either way; one that does not is
# left to the class.
_HEADS = ("num_attention_heads", "num_key_value_heads")
SPELLED_OUT: dict[str, tuple[str, ...]] = {
    "llama": _HEADS,
    "qwen2": _HEADS + ("use_sliding_window",),
    "qwen2_moe": _HEADS + ("use_sliding_window",),
    "qwen3": _HEADS + ("head_dim", "use_sliding_window"),
    "qwen3_moe": _HEADS + ("head_dim", "use_sliding_window"),
    "mistral": _HEADS + ("head_dim", "sliding_window"),
    "gemma2": _HEADS + ("head_dim", "sliding_window", "attn_logit_softcapping"),
    "gemma3_text": _HEADS + ("head_dim", "sliding_window"),
    "deepseek_v3": _HEADS + MLA_KEYS,
    "gpt_oss": _HEADS + ("head_dim", "sliding_window"),
}


# What each family's transformers config class gives an attention field the file leaves out (issue 40
# #8), read from the installed transformers 5.20 (transformers/models/<family>/configuration_<family>.py
# class attributes and __post_init__), so that attnplan's own reader (no transformers installed, or
# ``use_transformers=False``) reads a file as vLLM does through that class. Only a field *absent* from
# the file takes its default (a JSON null is passed to the class as None). Fields not listed take
# attnplan's derivations, which are the classes' own: KV heads = the attention heads (LlamaConfig,
# Phi3Config ``num_key_value_heads = num_attention_heads``), head size = hidden_size / heads
# (LlamaConfig, MistralConfig, MixtralConfig ``head_dim``; Qwen3MoeConfig has no head_dim attribute,
# so vLLM's get_head_size derives it). The size of the model itself (num_attention_heads,
# hidden_size) is never defaulted: a file that does not give it is refused, not planned as the class's
# example model. tests/test_model_defaults.py checks every row against the installed transformers.
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {},
    "phi3": {},
    "mistral": {"num_key_value_heads": 8, "sliding_window": 4096},
    "mixtral": {"num_key_value_heads": 8},
    "qwen2": {"num_key_value_heads": 32, "use_sliding_window": False, "sliding_window": 4096},
    "qwen2_moe": {"num_key_value_heads": 16, "use_sliding_window": False, "sliding_window": 4096},
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "use_sliding_window": False, "sliding_window": 4096},
    "qwen3_moe": {"num_key_value_heads": 4, "use_sliding_window": False, "sliding_window": 4096},
    "gemma": {"num_key_value_heads": 16, "head_dim": 256},
    "gemma2": {"num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0},
    "gemma3_text": {"num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096},
    "deepseek_v2": {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
    "deepseek_v3": {"num_key_value_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128},
    "gpt_oss": {"num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128},
}
# A multimodal config's text_config is read by its text family's class (Gemma3Config -> Gemma3TextConfig).
_TEXT_FAMILY = {"gemma3": "gemma3_text"}


def with_class_defaults(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the attention fields its family's config class defaults filled in where absent."""
    mt = data.get("model_type")
    mt = _TEXT_FAMILY.get(mt, mt) if isinstance(mt, str) else None
    defaults = CLASS_DEFAULTS.get(mt) if mt is not None else None
    out = dict(data)
    for key, value in (defaults or {}).items():
        if key == "num_key_value_heads" and any(k in data for k in KV_HEAD_KEYS):
            continue  # another spelling of the KV heads is given
        out.setdefault(key, value)
    return out


def _own_reading(data: Mapping[str, Any], where: str) -> Optional["ModelInfo"]:
    """attnplan's own reading when it can read the whole file (see the module docstring), else None."""
    inner: Mapping[str, Any] = data
    if isinstance(data.get("text_config"), dict):
        inner = {"model_type": data.get("model_type"), **data["text_config"]}
    mt = inner.get("model_type")
    if mt == "gemma3":  # the text_config of Gemma3ForConditionalGeneration is a Gemma3TextConfig
        mt = "gemma3_text"
    need = SPELLED_OUT.get(mt) if isinstance(mt, str) else None
    if need is None or any(k not in inner for k in need):
        return None
    try:
        info = model_info(data, where, use_transformers=False)
    except ModelConfigError:
        return None  # the family's own class decides what is wrong (or right) with it
    return None if info.notes_says else info


def fields_from_hf(data: Mapping[str, Any], where: str = "config.json", *, use_transformers: bool = True) -> dict[str, Any]:
    """The attention fields a config.json implies (explicit flags are merged over these)."""
    return model_info(data, where, use_transformers=use_transformers).fields


def model_info(data: Mapping[str, Any], where: str = "config.json", *,
               use_transformers: bool | str = True) -> ModelInfo:
    """``use_transformers``: True reads with attnplan's own parser when it can read the whole file
    and with transformers (when installed) otherwise; ``"always"`` forces transformers' config
    class; False never uses it."""
    notes: list[Note] = []
    if use_transformers is True:
        own = _own_reading(data, where)
        if own is not None:
            return own
    obj = _transformers_config(data, notes) if use_transformers else None
    top = data
    if obj is not None:
        src: Any = _Obj(obj)
        reader = "transformers"
        model_type = data.get("model_type")
    else:
        reader = "attnplan"
        if isinstance(data.get("text_config"), dict):
            # Multimodal models keep the language model's attention in text_config.
            inner = dict(data["text_config"])
            inner.setdefault("model_type", data.get("model_type"))
            inner.setdefault("torch_dtype", data.get("torch_dtype") or data.get("dtype"))
            data = inner
        data = with_class_defaults(data)
        src = _Dict(data)
        model_type = data.get("model_type")
        unread = sorted(k for k in data if k not in _READ and k not in _HARMLESS and not k.endswith("_token_id"))
        if unread:
            notes.append(Note(kind="unread-fields", source=where, named_by=tuple(unread)))
    heads = _first(src, HEAD_KEYS, where)
    if heads is None:
        raise ModelConfigError(where, "missing num_attention_heads")
    out: dict[str, Any] = {"num_qo_heads": heads}
    kv = _first(src, KV_HEAD_KEYS, where)
    # Falcon (model_arch_config_convertor.py FalconModelArchConfigConvertor): multi_query without
    # the new decoder architecture means one KV head.
    if model_type == "falcon" and not src.get("new_decoder_architecture") and src.get("multi_query"):
        kv = 1
    kv = kv if kv is not None else heads
    if heads % kv:
        raise ModelConfigError(where, f"num_attention_heads {heads} is not divisible by the {kv} KV heads")
    out["num_kv_heads"] = kv
    dtype = src.get("torch_dtype") or src.get("dtype") or top.get("torch_dtype") or top.get("dtype")
    dtype = str(dtype).replace("torch.", "") if dtype is not None else None
    if dtype in (TORCH_DTYPE[d] for d in HALF_DTYPES):
        out["dtype"] = dtype
    # float32 or absent: vLLM's dtype=auto downcasts to the platform's first supported dtype,
    # bf16 on sm80+ (config/model.py _resolve_auto_dtype, platforms/cuda.py supported_dtypes).
    if src.get("kv_lora_rank") is not None:
        for key in MLA_KEYS:
            v = _int(src, key, where)
            if v is None:
                raise ModelConfigError(where, f"MLA config (kv_lora_rank set) is missing {key}")
            out[key] = v
    else:
        hd = src.get("head_dim")
        if hd is not None and not (isinstance(hd, int) and not isinstance(hd, bool)):
            raise ModelConfigError(where, f"head_dim must be an integer, got {hd!r}")
        if hd is not None and hd < 0:
            raise ModelConfigError(where, f"head_dim must be positive, got {hd}")
        if not hd:  # vLLM treats head_dim 0/None as absent (get_head_size)
            hidden = _int(src, "hidden_size", where)
            if hidden is None:
                raise ModelConfigError(where, "missing head_dim and hidden_size (cannot derive the head size)")
            if hidden % heads:
                raise ModelConfigError(where, f"hidden_size {hidden} is not divisible by num_attention_heads {heads}")
            hd = hidden // heads
        out["head_dim"] = hd
    sw = src.get("sliding_window") if src.get("use_sliding_window") is not False else None
    if sw is not None and not (isinstance(sw, int) and not isinstance(sw, bool)):
        raise ModelConfigError(where, f"sliding_window must be an integer or null, got {sw!r}")
    if isinstance(sw, int) and sw > 0:
        out["sliding_window"] = sw
    cap = src.get("attn_logit_softcapping")
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap < 0:
            raise ModelConfigError(where, f"attn_logit_softcapping must be a finite non-negative number, got {cap!r}")
        if cap > 0:
            out["logits_soft_cap"] = float(cap)
    if model_type == "gpt_oss":
        out["sinks"] = True
    return ModelInfo(fields=out, source=where, reader=reader, notes_says=tuple(notes), raw=dict(top))


def read_model(ref: str | Path, *, hf_overrides: Optional[Mapping[str, Any]] = None,
               use_transformers: bool = True, revision: Optional[str] = None) -> ModelInfo:
    """A model by directory, config.json path or cached repo id (at ``revision``: a git ref or
    commit hash, ``check_revision``); ``hf_overrides`` are merged over the file as vLLM's
    ``--hf-overrides`` are."""
    data = read_model_config(resolve_model(ref, revision) if revision is not None else ref)
    if hf_overrides:
        data = {**data, **dict(hf_overrides)}
    return model_info(data, str(ref), use_transformers=use_transformers)


def config_from_hf(path_or_data: str | Path | Mapping[str, Any], **overrides: Any) -> AttentionConfig:
    """Build an AttentionConfig from a config.json (path, directory, repo id or dict); ``overrides`` win."""
    if isinstance(path_or_data, Mapping):
        fields = fields_from_hf(path_or_data, "config.json")
    else:
        fields = read_model(path_or_data).fields
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return make_config(fields)
