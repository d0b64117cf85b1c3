"""A HuggingFace ``config.json`` -> the model's attention layer groups (docs/contract.md, The plan, layer groups).

Each layer is read the way vLLM 0.33's model code builds it (files under
``vllm/model_executor/models/``), then layers with identical parameters collapse into one
group: a uniform model is one group. Non-softmax layers (Gated DeltaNet, Mamba) are groups too,
marked not served by FlashInfer attention, with the recurrent state vLLM pages beside the KV cache.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal, Mapping, Optional, Sequence

from pydantic import BaseModel, ConfigDict

from ..policy.answer import Note
from attnplan.errors import ModelConfigError

Kind = Literal["full", "sliding", "chunked_local", "linear_attention", "mamba"]
ATTENTION_KINDS: tuple[str, ...] = ("full", "sliding", "chunked_local")

# HF layer_types strings (transformers' layer_type_validation) -> our kinds.
_LAYER_TYPES = {
    "full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked_local",
    "linear_attention": "linear_attention", "mamba": "mamba",
}
# Fields that size other parts of the model; named in a note so that nobody wonders.
_IGNORED = (
    "num_experts", "num_local_experts", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "interleave_moe_layer_step",
    "quantization_config", "rope_theta", "rope_scaling", "partial_rotary_factor", "attn_output_gate",
    "final_logit_softcapping", "attn_temperature_tuning", "max_position_embeddings", "q_lora_rank",
    "mlp_only_layers", "first_k_dense_replace", "intermediate_size", "vocab_size",
)
# Far past any published model (DeepSeek-V3: 61 layers): a larger count is a typo or an attack,
# and per-layer lists of 10^7 entries took minutes and gigabytes (issue 24 #6).
MAX_LAYERS = 100_000
# Sizes (heads, head dims, windows, state dims) past this are not real and would overflow the
# float arithmetic of the scale and the state sizes.
MAX_SIZE = 1 << 40


class RecurrentState(BaseModel):
    """A non-attention layer's per-request state, as vLLM pages it (MambaSpec)."""

    model_config = ConfigDict(frozen=True)

    mixer: Literal["gated_delta_net", "mamba1", "mamba2"]
    shapes: tuple[tuple[int, ...], ...]
    source: str

    def page_bytes(self, elem_bytes: int) -> int:
        """MambaSpec.page_size_bytes: every state tensor of one request (mamba_cache_dtype auto)."""
        return sum(math.prod(s) for s in self.shapes) * elem_bytes


class LayerGroup(BaseModel):
    """Layers whose attention (or recurrent mixer) has the same parameters."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    layers: tuple[int, ...]
    head_dim_qk: Optional[int] = None
    head_dim_vo: Optional[int] = None
    num_qo_heads: Optional[int] = None
    num_kv_heads: Optional[int] = None
    sliding_window: Optional[int] = None
    chunk_size: Optional[int] = None
    sm_scale: Optional[float] = None
    scale_source: str = ""
    logits_soft_cap: Optional[float] = None
    sinks: bool = False
    rope: Optional[bool] = None
    mla: Optional[dict[str, int]] = None
    recurrent: Optional[RecurrentState] = None
    source: str = ""

    @property
    def is_attention(self) -> bool:
        return self.kind in ATTENTION_KINDS

    def key(self) -> str:
        """Everything but the layer indices: layers with equal keys are one group."""
        return json.dumps(self.model_dump(mode="json", exclude={"layers"}), sort_keys=True)


class ModelLayers(BaseModel):
    model_config = ConfigDict(frozen=True)

    model_type: str
    num_layers: int
    groups: tuple[LayerGroup, ...]
    # What the reading tells about the config, as data (render/notes.py words it): model/plan.py carries it into
    # the model's answer.
    notes_says: tuple[Note, ...] = ()

    @property
    def attention_groups(self) -> tuple[LayerGroup, ...]:
        return tuple(g for g in self.groups if g.is_attention)


# -- small readers ------------------------------------------------------------------------
# transformers' config-class defaults for attention fields a published config.json may omit
# (google/gemma-3-4b-it's text_config names no heads at all): vLLM reads the config object, so
# it sees these. Gemma3TextConfig, Gemma2Config, Llama4TextConfig.__init__ defaults.
_HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "query_pre_attn_scalar": 256, "sliding_window": 4096},
    "gemma2": {"num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
               "query_pre_attn_scalar": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0},
    "llama4_text": {"attention_chunk_size": 8192},
}
_HF_DEFAULTS["gemma3"] = _HF_DEFAULTS["gemma3_text"]
_HF_DEFAULTS["llama4"] = _HF_DEFAULTS["llama4_text"]


def text_config(hf: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: a nested ``text_config`` wins (Gemma-3, Llama-4), with the
    config class's defaults for attention fields it leaves out (an explicit null stays null)."""
    if isinstance(hf.get("text_config"), dict):
        inner = dict(hf["text_config"])
        inner.setdefault("model_type", hf.get("model_type"))
        inner.setdefault("torch_dtype", hf.get("torch_dtype") or hf.get("dtype"))
    else:
        inner = dict(hf)
    for k, v in _HF_DEFAULTS.get(str(inner.get("model_type") or ""), {}).items():
        inner.setdefault(k, v)
    return inner


def _pos_int(d: Mapping[str, Any], key: str, default: Any = None, *, required: bool = False) -> Any:
    v = d.get(key, default)
    if v is None:
        if required:
            raise ModelConfigError("config.json", f"missing {key}")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ModelConfigError("config.json", f"{key} must be a positive integer, got {_show(v)}")
    if v > MAX_SIZE:
        raise ModelConfigError("config.json", f"{key} is {_show(v)}, larger than any real model's (at most {MAX_SIZE})")
    return v


def _show(v: Any) -> str:
    """A value for an error message, cut short (a list of a million entries or a 4,000-digit
    integer must not become the message; ``repr`` of a huge int raises past 4,300 digits)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 200:
        return f"an integer of about {int(v.bit_length() * 0.30103)} digits"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _finite(v: Any) -> Optional[float]:
    """``v`` as a finite float, or None when it is not a real number (bools, strings, lists, NaN,
    an integer past the float range)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _pos_num(d: Mapping[str, Any], key: str) -> Optional[float]:
    v = d.get(key)
    if v is None:
        return None
    f = _finite(v)
    if f is None or not f > 0:
        raise ModelConfigError("config.json", f"{key} must be a positive number, got {_show(v)}")
    return f


def _every(n: int, interval: int, key: str) -> list[bool]:
    """True on every interval-th layer (1-based): transformers' ``bool((i + 1) % interval)`` is False."""
    if interval <= 0:
        raise ModelConfigError("config.json", f"{key} must be a positive integer, got {interval!r}")
    return [(i + 1) % interval == 0 for i in range(n)]


# -- per-layer kinds ----------------------------------------------------------------------
def _kinds(c: Mapping[str, Any], mt: str, n: int, notes: list[str]) -> tuple[list[str], list[bool], str]:
    """(kind per layer, RoPE per layer, where the pattern comes from)."""
    rope = [True] * n
    if mt in ("llama4", "llama4_text"):
        # llama4.py Llama4Attention.__init__: nope = no_rope_layers[layer_idx] == 0; chunked local
        # attention on the RoPE layers when attention_chunk_size is set. transformers'
        # Llama4TextConfig derives an empty no_rope_layers from no_rope_layer_interval (4).
        nrl = c.get("no_rope_layers") or None
        if nrl is None:
            key = "no_rope_layer_interval" if "no_rope_layer_interval" in c else "nope_layer_interval"
            every = _pos_int(c, key, 4)
            nrl = [0 if g else 1 for g in _every(n, every, key)]
        if not isinstance(nrl, list) or len(nrl) != n or any(x not in (0, 1) or isinstance(x, bool) for x in nrl):
            raise ModelConfigError("config.json", f"no_rope_layers must be {n} entries of 0/1 (num_hidden_layers)")
        chunk = _pos_int(c, "attention_chunk_size")
        rope = [x == 1 for x in nrl]
        kinds = ["chunked_local" if r and chunk else "full" for r in rope]
        return kinds, rope, "vllm llama4.py Llama4Attention.__init__ (no_rope_layers, attention_chunk_size)"
    lt = c.get("layer_types")
    if lt is not None:
        if not isinstance(lt, list) or len(lt) != n:
            got = len(lt) if isinstance(lt, list) else type(lt).__name__
            raise ModelConfigError("config.json", f"layer_types has {got} entries but num_hidden_layers is {n}")
        bad = sorted({_show(t) if not isinstance(t, str) else t for t in lt
                      if not isinstance(t, str) or t not in _LAYER_TYPES})
        if bad:
            raise ModelConfigError("config.json", f"unknown layer type {bad[0]!r} in layer_types "
                                   f"(known: {', '.join(_LAYER_TYPES)})")
        kinds = [_LAYER_TYPES[t] for t in lt]
        if mt == "gpt_oss":
            # gpt_oss.py OAIAttention.__init__ slides on even layers whatever layer_types says.
            vllm = ["sliding" if i % 2 == 0 else "full" for i in range(n)]
            if vllm != kinds:
                notes.append(Note(kind="layer-types-overridden", source="vLLM's gpt_oss.py"))
                kinds = vllm
            return kinds, rope, "vllm gpt_oss.py OAIAttention.__init__ (layer_idx % 2 == 0 slides)"
        return kinds, rope, "config.json layer_types (read by the vLLM model, e.g. gemma3.py Gemma3Attention)"
    if mt in ("gemma3", "gemma3_text"):
        # transformers Gemma3TextConfig builds layer_types from sliding_window_pattern (default 6);
        # vllm gemma3.py Gemma3Attention.__init__ reads config.layer_types[layer_idx].
        p = c.get("sliding_window_pattern", 6)
        if isinstance(p, bool) or not isinstance(p, int) or p <= 0:
            raise ModelConfigError("config.json", f"sliding_window_pattern must be a positive integer, got {p!r}")
        return (["full" if g else "sliding" for g in _every(n, p, "sliding_window_pattern")], rope,
                "sliding_window_pattern (transformers Gemma3TextConfig.layer_types; vllm gemma3.py Gemma3Attention)")
    if mt == "gemma2":
        return (["full" if g else "sliding" for g in _every(n, 2, "")], rope,
                "alternating (transformers Gemma2Config.layer_types; vllm gemma2.py Gemma2Attention)")
    if mt == "gpt_oss":
        return (["sliding" if i % 2 == 0 else "full" for i in range(n)], rope,
                "vllm gpt_oss.py OAIAttention.__init__ (layer_idx % 2 == 0 slides)")
    if mt == "qwen3_next":
        every = _pos_int(c, "full_attention_interval", 4)
        return (["full" if g else "linear_attention" for g in _every(n, every, "full_attention_interval")], rope,
                "full_attention_interval (transformers Qwen3NextConfig.layer_types; vllm qwen3_next.py Qwen3NextModel)")
    if mt == "jamba":
        period = _pos_int(c, "attn_layer_period", 8)
        offset = c.get("attn_layer_offset", 4)
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < period:
            raise ModelConfigError("config.json", f"attn_layer_offset must be an integer in [0, {period}), got {offset!r}")
        return (["full" if i % period == offset else "mamba" for i in range(n)], rope,
                "attn_layer_period/offset (transformers JambaConfig.layers_block_type; vllm jamba.py JambaModel)")
    window = c.get("sliding_window") if c.get("use_sliding_window", True) is not False else None
    return (["sliding" if window is not None else "full"] * n, rope,
            "uniform (every layer the same attention)")


def _kv_heads(c: Mapping[str, Any], model_type: str, heads: int) -> int:
    """KV heads under every name vLLM reads (hfconfig.KV_HEAD_KEYS: Falcon's ``num_kv_heads``,
    ``n_head_kv``, ...), and Falcon's multi_query meaning one KV head."""
    from .hfconfig import KV_HEAD_KEYS

    for key in KV_HEAD_KEYS:
        v = _pos_int(c, key)
        if v is not None:
            kv = v
            break
    else:
        kv = heads
    if model_type == "falcon" and not c.get("new_decoder_architecture") and c.get("multi_query"):
        kv = 1
    return kv


# -- the groups ---------------------------------------------------------------------------
def read_layers(hf: Mapping[str, Any]) -> ModelLayers:
    """Read a config.json (dict) into layer groups, in the order of their first layer."""
    if not isinstance(hf, Mapping):
        raise ModelConfigError("config.json", "a config.json holds a JSON object")
    c = text_config(hf)
    mt = str(c.get("model_type") or "")
    n = _pos_int(c, "num_hidden_layers", required=True)
    if n > MAX_LAYERS:
        raise ModelConfigError("config.json", f"num_hidden_layers is {_show(n)}: more than {MAX_LAYERS} layers is "
                                              "not a real model (fix num_hidden_layers)")
    heads = _pos_int(c, "num_attention_heads", required=True)
    kv = _kv_heads(c, mt, heads)
    notes: list[str] = []
    kinds, rope, source = _kinds(c, mt, n, notes)
    falcon_h1 = mt == "falcon_h1"

    mla = None
    if c.get("kv_lora_rank") is not None:
        mla = {k: _pos_int(c, k, required=True) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
        hq, hv = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"], mla["v_head_dim"]
    else:
        hd = _pos_int(c, "head_dim")
        if hd is None:
            hidden = _pos_int(c, "hidden_size", required=True)
            if hidden % heads:
                raise ModelConfigError("config.json", f"hidden_size {hidden} is not divisible by num_attention_heads {heads}")
            hd = hidden // heads
        hq = hv = hd
    scale, scale_src = _scale(c, mt, hq, mla is not None, notes)
    cap = _pos_num(c, "attn_logit_softcapping")
    window = _pos_int(c, "sliding_window") if "sliding" in kinds else None
    if "sliding" in kinds and window is None:
        raise ModelConfigError("config.json", "sliding layers need sliding_window (a positive integer)")
    chunk = _pos_int(c, "attention_chunk_size") if "chunked_local" in kinds else None
    state = _recurrent(c, mt, kinds)

    # Layers differ only by kind and RoPE: group the indices by those two, then build one
    # LayerGroup per group (one model per group, never one per layer).
    members: dict[tuple[str, Optional[bool]], list[int]] = {}
    for i, kind in enumerate(kinds):
        members.setdefault((kind, rope[i] if kind in ATTENTION_KINDS else None), []).append(i)
    out_list: list[LayerGroup] = []
    for (kind, has_rope), idx in members.items():
        if kind in ATTENTION_KINDS:
            out_list.append(LayerGroup(
                kind=kind, layers=tuple(idx), head_dim_qk=hq, head_dim_vo=hv, num_qo_heads=heads, num_kv_heads=kv,
                sliding_window=window if kind == "sliding" else None,
                chunk_size=chunk if kind == "chunked_local" else None,
                sm_scale=scale, scale_source=scale_src, logits_soft_cap=cap, sinks=mt == "gpt_oss",
                rope=has_rope, mla=mla, source=source))
        else:
            out_list.append(LayerGroup(kind=kind, layers=tuple(idx), recurrent=state, source=source))  # no RoPE: not attention
    if falcon_h1:
        # falcon_h1.py FalconH1ParallelHybrid: attention and a Mamba-2 mixer side by side in every layer.
        mamba = LayerGroup(kind="mamba", layers=tuple(range(n)), recurrent=state,
                           source="vllm falcon_h1.py FalconH1ParallelHybrid (Mamba-2 beside attention)")
        same = [g for g in out_list if g.key() == mamba.key()]
        if same:  # (cannot happen today: falcon_h1 layer_types name no mamba layers; kept exact)
            out_list[out_list.index(same[0])] = same[0].model_copy(
                update={"layers": tuple(sorted(set(same[0].layers) | set(range(n))))})
        else:
            out_list.append(mamba)
        notes.append(Note(kind="parallel-mixer", name=mt, mixer="Mamba-2"))
    out = tuple(out_list)
    ignored = [k for k in _IGNORED if k in c and c[k] not in (None, [], {})
               and not (k == "rope_scaling" and "yarn_get_mscale" in scale_src)]
    if "quantization_config" in hf and "quantization_config" not in ignored:
        ignored.append("quantization_config")
    if isinstance(hf.get("text_config"), dict):
        notes.append(Note(kind="multimodal"))
    if ignored:
        notes.append(Note(kind="ignored-fields", named_by=tuple(ignored)))
    if mt in ("llama4", "llama4_text") and any(not r for r in rope):
        notes.append(Note(kind="nope-temperature", name=mt, source="llama4.py _get_attn_scale"))
    return ModelLayers(model_type=mt, num_layers=n, groups=out, notes_says=tuple(notes))


def layer_groups(hf: Mapping[str, Any]) -> tuple[LayerGroup, ...]:
    """The attention (and non-attention) layer groups of a config.json."""
    return read_layers(hf).groups


# -- layer indices for people ----------------------------------------------------------
def _runs(layers: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = layers[0]
    for x in list(layers[1:]) + [None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(out)


def compact_layers(layers: Sequence[int], num_layers: int | None = None) -> str:
    """Layer indices for people: ``all``, ``3..47 every 4``, ``all but 5..59 every 6``, ``0-4,6-10``."""
    xs = sorted(layers)
    if not xs:
        return "-"
    if num_layers is not None and xs == list(range(num_layers)):
        return f"all {num_layers}"
    steps = {b - a for a, b in zip(xs, xs[1:])}
    if len(xs) >= 3 and len(steps) == 1 and (d := steps.pop()) > 1:
        return f"{xs[0]}..{xs[-1]} every {d}"
    text = _runs(xs)
    if num_layers is not None and len(text) > 24:
        rest = sorted(set(range(num_layers)) - set(xs))
        if rest and len(rest) < len(xs):
            return f"all but {compact_layers(rest)}"
    return text


# -- softmax scale ------------------------------------------------------------------------
def yarn_get_mscale(scale: float = 1.0, mscale: float = 1.0) -> float:
    """vllm/model_executor/models/deepseek_v2.py yarn_get_mscale (same in rotary_embedding/common.py)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _scale(c: Mapping[str, Any], mt: str, qk: int, mla: bool, notes: list[str]) -> tuple[float, str]:
    if mt in ("gemma2", "gemma3", "gemma3_text"):
        # gemma2.py / gemma3.py: self.scaling = config.query_pre_attn_scalar**-0.5 (HF default 256).
        q = _pos_num(c, "query_pre_attn_scalar") or 256.0
        return q ** -0.5, f"query_pre_attn_scalar^-0.5 = {q:g}^-0.5 (vllm {mt[:6]}.py)"
    if mla:
        # deepseek_v2.py DeepseekV2MLAAttention.__init__: qk_head_dim^-0.5, times mscale^2 when the
        # rope type is not default and not 'deepseek_llama_scaling' (attention_factor == 1.0).
        rp = c.get("rope_parameters") or c.get("rope_scaling") or {}
        if not isinstance(rp, dict):
            raise ModelConfigError("config.json", f"rope_scaling must be an object, got {rp!r}")
        rtype = rp.get("rope_type") or rp.get("type") or "default"
        s = qk ** -0.5
        if rtype != "default" and rp.get("attention_factor") != 1.0:
            factor = _pos_num(rp, "factor")
            if factor is None:
                raise ModelConfigError("config.json", f"rope_scaling type {rtype!r} needs factor")
            raw_dim = rp.get("mscale_all_dim") or 0.0
            all_dim = _finite(raw_dim)
            if all_dim is None or all_dim < 0:
                raise ModelConfigError("config.json", f"rope_scaling.mscale_all_dim must be a number >= 0, "
                                                      f"got {_show(raw_dim)}")
            m = yarn_get_mscale(factor, all_dim)
            return s * m * m, (f"qk_head_dim^-0.5 * mscale^2, mscale = 0.1*{float(all_dim):g}*ln({factor:g})+1 = {m:.6f} "
                               "(vllm deepseek_v2.py yarn_get_mscale)")
        return s, "qk_head_dim^-0.5 (vllm deepseek_v2.py)"
    return qk ** -0.5, "head_dim^-0.5"


# -- recurrent state (vLLM's MambaStateShapeCalculator, tp=1, no speculative tokens) -------
def _recurrent(c: Mapping[str, Any], mt: str, kinds: list[str]) -> Optional[RecurrentState]:
    if mt == "qwen3_next" and "linear_attention" in kinds:
        # qwen3_next.py get_mamba_state_shape_from_config -> mamba_utils.gated_delta_net_state_shape.
        nk, nv = _pos_int(c, "linear_num_key_heads", required=True), _pos_int(c, "linear_num_value_heads", required=True)
        dk, dv = _pos_int(c, "linear_key_head_dim", required=True), _pos_int(c, "linear_value_head_dim", required=True)
        conv = _pos_int(c, "linear_conv_kernel_dim", 4)
        return RecurrentState(mixer="gated_delta_net", shapes=((conv - 1, dk * nk * 2 + dv * nv), (nv, dv, dk)),
                              source="vllm mamba_utils.py gated_delta_net_state_shape")
    if mt == "falcon_h1":
        # falcon_h1.py get_mamba_state_shape_from_config -> mamba2_state_shape.
        if c.get("mamba_d_ssm") is not None:
            inter = _pos_int(c, "mamba_d_ssm")
        else:
            expand = _pos_num(c, "mamba_expand")
            if expand is None:
                raise ModelConfigError("config.json", "falcon_h1 needs mamba_d_ssm or mamba_expand "
                                                      "(the Mamba-2 mixer's inner size)")
            inner = expand * _pos_int(c, "hidden_size", required=True)
            if not inner <= MAX_SIZE:
                raise ModelConfigError("config.json", f"mamba_expand {_show(c.get('mamba_expand'))} times hidden_size "
                                                      f"is larger than any real model's (at most {MAX_SIZE})")
            inter = int(inner)
        ng, nh = _pos_int(c, "mamba_n_groups", 1), _pos_int(c, "mamba_n_heads", required=True)
        dh, ds, conv = _pos_int(c, "mamba_d_head", required=True), _pos_int(c, "mamba_d_state", required=True), _pos_int(c, "mamba_d_conv", 4)
        return RecurrentState(mixer="mamba2", shapes=((conv - 1, inter + 2 * ng * ds), (nh, dh, ds)),
                              source="vllm mamba_utils.py mamba2_state_shape")
    if mt == "jamba" and "mamba" in kinds:
        # jamba.py get_mamba_state_shape_from_config -> mamba1_state_shape.
        inter = _pos_int(c, "mamba_expand", 2) * _pos_int(c, "hidden_size", required=True)
        ds, conv = _pos_int(c, "mamba_d_state", 16), _pos_int(c, "mamba_d_conv", 4)
        return RecurrentState(mixer="mamba1", shapes=((conv - 1, inter), (inter, ds)),
                              source="vllm mamba_utils.py mamba1_state_shape")
    if "linear_attention" in kinds or "mamba" in kinds:
        raise ModelConfigError("config.json", f"recurrent layers of model_type {mt!r} are not known to attnplan")
    return None
