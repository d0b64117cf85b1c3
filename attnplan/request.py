"""A model as an engine command runs it: the one request every entry point plans (issue 36 item 6).

``ModelRequest`` holds what ``attnplan vllm serve`` reads from a serve line (the model, tensor /
pipeline / decode-context parallelism, dtype, KV-cache dtype, block size, attention backend,
speculative tokens, ``--hf-overrides``) plus the engine layer to plan for. The CLI (``plan`` and
``explain --model-config``, ``preflight``, ``labels``: one parse of a model's flags, :func:`request_from_fields`;
``compare``: one request per engine, attnplan/compare.py), the REST service (``POST /v1/plan``,
``POST /v1/plan/serve``) and the preflight nodes (HTTP and Ray) build one and call :func:`plan_request`; a pasted ``vllm serve ...`` line
becomes one through :func:`ModelRequest.from_serve_text`, which hands the words to
``attnplan.vllm.args.parse_serve_line`` (vLLM's own parser when installed): there is no second
parser.

The model is a config.json's contents (a JSON object), a preset shipped in
``attnplan/presets`` (``gemma-2-9b``), a HuggingFace repo id already in this machine's cache, or,
where the caller is trusted to name files (the CLI), a path. A config.json received as data is
held to the limits a file is held to (``attnplan.safeio``: size and nesting; the layer reader
checks ``layer_types`` against ``num_hidden_layers``).

Every attention layer group is planned per rank (``model.plan_model``); the answer is
``vllm.serve.ServeAnswer`` and its JSON ``serve_json``, exactly what ``attnplan vllm serve --json``
prints, with the echoed request, the node and the rules revision beside it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import Any, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

from attnplan.policy import InvalidInputError, ModelConfigError, NodeFacts, RuleSet
from attnplan.model import plan_model
from attnplan.render.notes import notes_text
from attnplan.render.verdict import finish   # every answer leaves worded (render/verdict.py), as attnplan.plan_model's
from attnplan.policy.answer import node_json
from attnplan.policy.parallel import startup_errors

from attnplan.vllm.args import ServeLine, parse_serve_line, speculative_tokens
from attnplan.vllm.serve import ServeAnswer, flag_fields, serve_json

MAX_MODEL_BYTES = 4 << 20  # a config.json file's limit (model/hfconfig.py MAX_CONFIG_BYTES)
MAX_LINE_CHARS = 8192
# A HuggingFace repo id (org/name) or a preset name: never a path when paths are not allowed.
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")

EXAMPLE_MODEL = "google/gemma-3-27b-it"
EXAMPLE_SERVE_LINE = "vllm serve google/gemma-3-27b-it -tp 2 --kv-cache-dtype fp8"


class SglangLineFields(BaseModel):
    """The ``sglang.launch_server`` flags a ``ModelRequest`` carries besides the common ones (sglang/flags.py
    SglangFlags; sglang/launch.py parse_launch_line reads them off a line)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_attention_backend: Optional[StrictStr] = Field(None, max_length=64)
    decode_attention_backend: Optional[StrictStr] = Field(None, max_length=64)
    speculative_algorithm: Optional[StrictStr] = Field(None, max_length=32)
    speculative_eagle_topk: Optional[StrictInt] = Field(None, ge=1, le=1024)
    speculative_num_draft_tokens: Optional[StrictInt] = Field(None, ge=1, le=1024)
    speculative_num_steps: Optional[StrictInt] = Field(None, ge=1, le=1024)
    enable_deterministic_inference: bool = False
    attn_dp_size: StrictInt = Field(1, ge=1, le=4096, description="attention data parallelism (--dp with "
                                                                   "--enable-dp-attention, or --attn-dp-size)")


class ModelRequest(BaseModel):
    """A model and the ``vllm serve`` flags that shape its attention; the engine layer to plan for."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True,
                              json_schema_extra={"examples": [
                                  {"model": EXAMPLE_MODEL, "tensor_parallel_size": 2, "kv_cache_dtype": "fp8"},
                                  {"model": {"model_type": "gemma3_text", "num_hidden_layers": 62,
                                             "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                                             "hidden_size": 5376, "sliding_window": 1024,
                                             "sliding_window_pattern": 6, "query_pre_attn_scalar": 168},
                                   "engine": "vllm==0.33.0"}]})

    model: Union[StrictStr, dict[str, Any]] = Field(
        description="the model: its config.json contents (a JSON object), a preset name (GET /v1/presets), or a "
                    "HuggingFace repo id in the node's cache (never downloaded)")
    engine: Optional[StrictStr] = Field(None, min_length=1, max_length=64,
                                        description="engine layer: vllm, vllm==0.33.0 or flashinfer (absent: the "
                                                    "node's installed vllm, else the newest modelled)")
    tensor_parallel_size: StrictInt = Field(1, ge=1, le=4096, description="vllm serve -tp")
    pipeline_parallel_size: StrictInt = Field(1, ge=1, le=4096, description="vllm serve -pp")
    decode_context_parallel_size: StrictInt = Field(1, ge=1, le=4096, description="vllm serve -dcp")
    dtype: StrictStr = Field("auto", min_length=1, max_length=32, description="vllm serve --dtype (auto: the model's)")
    kv_cache_dtype: StrictStr = Field("auto", min_length=1, max_length=32,
                                      description="the engine's --kv-cache-dtype in its own spelling: vLLM 0.33's "
                                                  "CacheDType (fp8, bfloat16, ...); under engine sglang SGLang "
                                                  "0.5.23's choices (fp8_e4m3, bf16, ...)")
    block_size: Optional[StrictInt] = Field(None, ge=1, le=1 << 20,
                                            description="vllm serve --block-size (absent: the smallest every group takes)")
    attention_backend: Optional[StrictStr] = Field(None, min_length=1, max_length=64,
                                                   description="vllm serve --attention-backend (vLLM's names, e.g. "
                                                               "FLASHINFER, or attnplan's)")
    num_speculative_tokens: StrictInt = Field(0, ge=0, le=1024,
                                              description="--speculative-config's num_speculative_tokens")
    attention_config: dict[str, Any] = Field(default_factory=dict, max_length=32,
                                             description="vllm serve --attention-config: use_trtllm_attention and "
                                                         "disable_flashinfer_q_quantization are modelled")
    hf_overrides: dict[str, Any] = Field(default_factory=dict, description="vllm serve --hf-overrides: merged over "
                                                                           "the config.json")
    max_model_len: Optional[StrictInt] = Field(None, ge=1, description="vllm serve --max-model-len (echoed; the "
                                                                       "attention kernels do not depend on it)")
    revision: Optional[StrictStr] = Field(None, max_length=128, description="vllm serve --revision: a git branch, "
                                                                           "tag or commit hash of the cached repo "
                                                                           "(never a path)")
    # SGLang's launch_server flags beyond the ones above (engine sglang only): one request for a vLLM serve line
    # and a launch_server line (from_launch_text), planned by one pipeline (plan_request)
    sglang: Optional[SglangLineFields] = Field(None, description="engine sglang: launch_server flags beyond the "
                                                                 "common ones (per-phase backends, EAGLE, DP attention)")
    overrides: dict[str, Any] = Field(default_factory=dict, description="attnplan's own attention fields laid over "
                                                                        "every layer group (attnplan plan --model X "
                                                                        "--FLAG)")

    @field_validator("revision")
    @classmethod
    def _revision_is_a_ref(cls, v: Optional[str]) -> Optional[str]:
        # A ref or a commit, looked up inside the repo's cache folder only (model/hfconfig.py
        # check_revision): a path here made the node read its own files (issue 40 #4).
        from attnplan.model.hfconfig import check_revision

        return check_revision(v)

    # -- building one -------------------------------------------------------------------------
    @classmethod
    def build(cls, **fields: Any) -> "ModelRequest":
        """Validated, with a bad value as one ``InvalidInputError`` naming the field."""
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            raise request_error(exc) from None

    @classmethod
    def from_serve_line(cls, line: ServeLine, *, engine: Optional[str] = "vllm") -> "ModelRequest":
        """What ``parse_serve_line`` read, as a request (``engine``: the line is vLLM's)."""
        cache_dtype(engine, line.kv_cache_dtype)  # exactly the engine's spelling, before the model strips it
        return cls.build(
            model=line.model, engine=engine, tensor_parallel_size=line.tensor_parallel_size,
            pipeline_parallel_size=line.pipeline_parallel_size,
            decode_context_parallel_size=line.decode_context_parallel_size, dtype=line.dtype,
            kv_cache_dtype=line.kv_cache_dtype, block_size=line.block_size, attention_backend=line.attention_backend,
            num_speculative_tokens=speculative_tokens(line.speculative), hf_overrides=dict(line.hf_overrides),
            attention_config=dict(line.attention_config),
            max_model_len=line.max_model_len, revision=line.revision)

    @classmethod
    def from_serve_text(cls, text: str, *, engine: Optional[str] = "vllm") -> "ModelRequest":
        """A pasted ``vllm serve MODEL [flags]`` line (``vllm serve`` optional, shell quoting honoured)."""
        return cls.from_serve_line(parse_serve_text(text), engine=engine)

    # -- what it asks -------------------------------------------------------------------------
    @property
    def ranks(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def line_fields(self) -> dict[str, Any]:
        """The attention fields the serve flags set on every layer group (vllm/serve.py LINE_FIELDS), over
        ``overrides``; a flag left at its default (``--kv-cache-dtype auto``) leaves an override's value standing (an
        ``overrides.kv_cache_dtype`` sent as such; the CLI's ``--kv-cache-dtype`` is the request's own field, in the
        engine's spelling: request_from_fields). The KV-cache dtype leaves the engine's spelling here and only here
        (:func:`cache_dtype`)."""
        flags = flag_fields(
            dtype=self.dtype, kv_cache_dtype="auto", block_size=self.block_size,
            attention_backend=self.attention_backend, num_speculative_tokens=self.num_speculative_tokens,
            decode_context_parallel_size=self.decode_context_parallel_size, attention_config=self.attention_config,
            release=(self.engine or "").partition("==")[2].strip() or None)
        flags["kv_cache_dtype"] = cache_dtype(self.engine, self.kv_cache_dtype)
        if self.kv_cache_dtype == "auto" and "kv_cache_dtype" in self.overrides:
            del flags["kv_cache_dtype"]
        return {**self.overrides, **flags}

    def model_label(self) -> str:
        """The model as a reader sees it: the reference, or ``config.json <model_type> sha256:<12>``."""
        if isinstance(self.model, str):
            return self.model
        return f"config.json {self.model.get('model_type') or '?'} sha256:{model_digest(self.model)}"

    def echo(self) -> dict[str, Any]:
        """The request as an answer names it (an inline config.json by its digest, not its text)."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["model"] = self.model_label()
        return data

    def wire(self) -> dict[str, Any]:
        """The JSON body a node is sent (``POST /v1/plan``): only what differs from the defaults,
        so a request means the same to a node that knows fewer optional fields."""
        return self.model_dump(mode="json", exclude_defaults=True) | {"model": self.model}

    def serve_line(self, parser: str = "request") -> ServeLine:
        return ServeLine(model=self.model_label(), tensor_parallel_size=self.tensor_parallel_size,
                         pipeline_parallel_size=self.pipeline_parallel_size,
                         decode_context_parallel_size=self.decode_context_parallel_size, dtype=self.dtype,
                         kv_cache_dtype=self.kv_cache_dtype, block_size=self.block_size,
                         attention_backend=self.attention_backend, attention_config=dict(self.attention_config),
                         speculative={"num_speculative_tokens": self.num_speculative_tokens}
                         if self.num_speculative_tokens else {},
                         max_model_len=self.max_model_len, hf_overrides=dict(self.hf_overrides),
                         revision=self.revision, parser=parser)

    def load(self, *, allow_paths: bool = True, presets: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        """The config.json (with ``hf_overrides`` merged, as vLLM merges them). ``allow_paths``:
        whether the model may name a file or directory (the CLI: yes; a REST client: no, only a
        preset or a cached repo id). ``presets``: the caller's preset registry (name -> file; the
        REST service's, rest/presets.py), instead of the presets shipped in ``attnplan/presets``."""
        if isinstance(self.model, dict):
            data = bounded_config(self.model)
        else:
            data = read_reference(self.model, allow_paths=allow_paths, revision=self.revision, presets=presets)
        if self.hf_overrides:
            data = {**data, **bounded_config(self.hf_overrides, what="hf_overrides")}
        return data


# A model request's flat flags (``attnplan plan/explain/preflight --model-config X --FLAG``, a preflight ``--configs``
# entry) -> the request field that carries each: the engine command's own flags, read as the engine reads them
# (``--kv-cache-dtype`` in its spelling: vLLM 0.33's CacheDType, SGLang 0.5.23's choices under sglang). Every other
# flag is an attention field in attnplan's vocabulary (``--head-dim``, ``--sliding-window``, ...), laid over every
# layer group as ``overrides``.
REQUEST_FIELDS = {"kv_cache_dtype": "kv_cache_dtype", "page_size": "block_size", "block_size": "block_size",
                  "attention_backend": "attention_backend", "num_speculative_tokens": "num_speculative_tokens",
                  "dcp_world_size": "decode_context_parallel_size", "dtype": "dtype",
                  "tensor_parallel_size": "tensor_parallel_size", "pipeline_parallel_size": "pipeline_parallel_size",
                  "decode_context_parallel_size": "decode_context_parallel_size", "hf_overrides": "hf_overrides",
                  "revision": "revision", "max_model_len": "max_model_len"}


def request_from_fields(model: Any, fields: Mapping[str, Any], *, engine: Optional[str] = None) -> ModelRequest:
    """The one parse of a model and flat flags into the one request (issue 36 item 6): ``plan``/``explain
    --model-config``, ``preflight --model-config`` / ``--configs`` entries and ``labels`` build theirs here, so one
    flag means one thing on every command. The engine command's flags go to the request's fields
    (``REQUEST_FIELDS``: a ``--kv-cache-dtype`` the engine refuses is bad input in the engine's words, exit 2, as
    on a pasted line), any other attention field into ``overrides``; an unknown field is bad input naming it."""
    from attnplan.policy import CONFIG_FIELDS

    if not isinstance(model, (str, dict)) or not model:
        raise InvalidInputError("model_config", f"must be a path, a preset or a repo id, got {model!r}")
    out: dict[str, Any] = {"model": model, "engine": engine}
    over: dict[str, Any] = {}
    for k, v in fields.items():
        if v is None:
            continue
        if k in REQUEST_FIELDS:
            out[REQUEST_FIELDS[k]] = v
        elif k in CONFIG_FIELDS:
            over[k] = v
        else:
            raise InvalidInputError(k, "unknown field", sorted(set(CONFIG_FIELDS) | set(REQUEST_FIELDS)))
    if over:
        out["overrides"] = over
    if isinstance(out.get("kv_cache_dtype"), str):   # the engine's spelling, exactly: before the model strips it
        cache_dtype(engine, out["kv_cache_dtype"])
    return ModelRequest.build(**out)


def cache_dtype(engine: Optional[str], raw: str) -> str:
    """A request's ``--kv-cache-dtype`` in the attention config's vocabulary: the one translation of the spelling
    the request carries, which is always its engine's own (a request is never rewritten into another engine's
    spelling, so reading it twice reads the same). Under SGLang its 0.5.23 choices exactly
    (sglang/srt/arg_groups/fields/model.py ``kv_cache_dtype`` ``choices=``; attnplan/sglang/flags.py ``kv_dtype``);
    under vLLM (and the FlashInfer adapter, which takes vLLM's flags) that release's ``CacheDType`` exactly
    (vllm/config/cache.py; attnplan/vllm/serve.py ``vllm_kv_cache_dtype``). A spelling the engine refuses is bad
    input (exit 2, REST 422) in that engine's words."""
    from attnplan.policy import default_ruleset, parse_engine

    spec = parse_engine(engine, default_ruleset())   # an engine the rules do not model: bad input naming them
    if spec.name == "sglang":
        from attnplan.sglang.flags import kv_dtype

        return kv_dtype(raw)
    from attnplan.vllm.serve import vllm_kv_cache_dtype

    return vllm_kv_cache_dtype(raw, spec.version if spec.name == "vllm" else None)


def request_error(exc: ValidationError) -> InvalidInputError:
    e = exc.errors()[0]
    cause = (e.get("ctx") or {}).get("error")
    if isinstance(cause, InvalidInputError):  # a validator's own error names its field and the fix
        return cause
    loc = ".".join(str(x) for x in e.get("loc", ())) or "request"
    if e.get("type") == "extra_forbidden":
        return InvalidInputError(loc, "unknown field", sorted(ModelRequest.model_fields))
    return InvalidInputError(loc, str(e.get("msg", "invalid")))


def parse_serve_text(text: str, *, allow_files: bool = True) -> ServeLine:
    """``vllm serve MODEL [flags]`` (the leading ``vllm serve`` optional) -> ``ServeLine``.
    ``allow_files=False`` (a line from a REST client): a flag that would make this machine read a
    file (``--config FILE``, ``@FILE``) is refused by name before any parser sees the line."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError("serve", "give a vllm serve line, e.g. " + repr(EXAMPLE_SERVE_LINE))
    if len(text) > MAX_LINE_CHARS:
        raise InvalidInputError("serve", f"the line is {len(text)} characters; at most {MAX_LINE_CHARS}")
    try:
        words = shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:
        raise InvalidInputError("serve", f"cannot split the line as a shell would: {exc}") from None
    if words[:1] == ["vllm"]:
        words = words[1:]
        if words[:1] != ["serve"]:
            raise InvalidInputError("serve", "a vllm line must be 'vllm serve MODEL [flags]'")
    if words[:1] == ["serve"]:
        words = words[1:]
    return parse_serve_line(words, allow_files=allow_files)


def model_digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:12]


def bounded_config(data: Any, *, what: str = "model") -> dict[str, Any]:
    """A config.json received as data, held to a file's limits: serialised size and nesting
    (``safeio.parse_json``, which also refuses NaN and duplicate keys on the way back)."""
    from attnplan.safeio import MAX_DEPTH, parse_json

    if not isinstance(data, dict):
        raise InvalidInputError(what, "a config.json holds a JSON object")
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidInputError(what, f"not a JSON object a config.json can hold: {str(exc)[:120]}") from None
    if len(text.encode("utf-8")) > MAX_MODEL_BYTES:
        raise InvalidInputError(what, f"config.json is over the {MAX_MODEL_BYTES}-byte limit")
    out = parse_json(text, what=what, name="config.json", max_depth=MAX_DEPTH)
    return dict(out)


def read_reference(ref: str, *, allow_paths: bool, revision: Optional[str] = None,
                   presets: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """A preset name, a cached repo id, or (``allow_paths``) a file or directory -> config.json.
    ``presets``: name -> config.json of the caller's registry (default: attnplan/presets)."""
    from pathlib import Path

    from attnplan.model import read_model_config
    from attnplan.model.hfconfig import check_revision
    from attnplan.presets import PRESETS_DIR

    check_revision(revision)  # a ref or a commit, never a path (issue 40 #4)
    if allow_paths and Path(ref).expanduser().exists():
        return read_model_config(ref)
    if _REF.fullmatch(ref) and "/" not in ref and ".." not in ref:
        preset = presets.get(ref) if presets is not None else PRESETS_DIR / f"{ref}.json"
        if preset is not None and Path(preset).is_file():
            return read_model_config(preset)
    if not allow_paths:
        # Only a repo id, looked up in the cache: a client never makes this node open a file it names.
        if not _REF.fullmatch(ref) or ".." in ref or "/" not in ref or Path(ref).exists():
            raise InvalidInputError("model", f"{ref!r} is neither a preset (GET /v1/presets) nor a HuggingFace "
                                             "repo id (org/name); send the config.json itself as a JSON object")
        from attnplan.model.hfconfig import cached_config

        # The cache only, never a local path: resolved inside the repo's cache folder (hfconfig.py).
        path = cached_config(ref, revision)
        if path is None:  # the client cannot fetch it onto this node: say what it can do
            raise InvalidInputError("model", "not in this node's HuggingFace cache: send its config.json as a "
                                             "JSON object instead")
        return read_model_config(path)
    from attnplan.model.hfconfig import resolve_model

    return read_model_config(resolve_model(ref, revision))  # a cached repo id at its revision


# -- planning -----------------------------------------------------------------------------
def plan_request(req: ModelRequest, node: Optional[NodeFacts] = None, ruleset: Optional[RuleSet] = None, *,
                 allow_paths: bool = True, parser: str = "request",
                 presets: Optional[Mapping[str, Any]] = None, model_field: str = "model",
                 loaded: Optional[Mapping[str, Any]] = None) -> ServeAnswer:
    """Every attention layer group of the model, for one rank, on ``node`` (None: this machine),
    or vLLM's startup refusal (tensor parallelism that does not divide the heads, DCP limits).
    ``model_field``: what the caller calls the model in a bad-input error (``model``: a serve line's or a REST
    body's; ``model_config``: ``attnplan plan --model-config``'s, the ``ModelConfigError`` as raised).
    ``loaded``: the config.json as ``req.load`` reads it (``hf_overrides`` merged), for a caller that plans one
    model many times (attnplan/compare.py: every GPU and engine); the request still names the model as given, so
    its answer names it so too. None: read here."""
    from attnplan.model.hfconfig import model_info
    from attnplan.model.layers import text_config

    try:
        data = dict(loaded) if loaded is not None else req.load(allow_paths=allow_paths, presets=presets)
        info = model_info(text_config(data), req.model_label())
    except ModelConfigError as exc:
        raise _model_error(exc, model_field) from None
    fields = info.fields
    line = req.serve_line(parser)
    heads = int(fields["num_qo_heads"])
    notes = list(notes_text(info.notes_says))   # the config reader's notes are data (render/notes.py)
    # SGLang's data-parallel attention: each attention group holds tp / attn_dp ranks (runtime_context.py
    # derive_attn_tp_size), and the heads split over those
    dp = req.sglang.attn_dp_size if req.sglang is not None else 1
    # the split as the layer groups will see it: an override's heads or DCP size (attnplan plan --model X
    # --num-heads N / --dcp-world-size N) over the model's, as model/plan.py plan_model checks each group
    heads = _override_int(req.overrides, "num_qo_heads") or heads
    kv_heads = _override_int(req.overrides, "num_kv_heads") or int(fields.get("num_kv_heads") or fields["num_qo_heads"])
    dcp = (req.decode_context_parallel_size if req.decode_context_parallel_size > 1
           else _override_int(req.overrides, "dcp_world_size") or 1)
    if req.tensor_parallel_size % dp:
        errs = [f"tp_size ({req.tensor_parallel_size}) must be divisible by the attention data-parallel size ({dp})"]
    else:
        errs = startup_errors(heads, kv_heads, req.tensor_parallel_size // dp, dcp,
                              mla=fields.get("kv_lora_rank") is not None)
    if dp > 1 and not errs:
        notes.append(f"data-parallel attention: {dp} groups of {req.tensor_parallel_size // dp} attention rank(s); "
                     f"each rank plans heads/{req.tensor_parallel_size // dp}")
    engine, req = engine_of(req, data, ruleset)
    # the flags as attention fields, read before any verdict: a flag the engine refuses (a --kv-cache-dtype it
    # does not spell so) is bad input, as its parser refuses it before the split is looked at
    over = req.line_fields()
    if errs:
        from attnplan.policy import default_ruleset, resolve_engine

        ref = resolve_engine(engine, node, ruleset if ruleset is not None else default_ruleset())
        return ServeAnswer(line, req.ranks, None, None, startup_error=errs[0], notes=notes, engine=engine.name,
                           release=ref.version)
    if req.sglang is not None and req.sglang.enable_deterministic_inference:
        over["batch_invariant"] = True
    try:
        model = finish(plan_model(data, node, overrides=over, ruleset=ruleset, engine=engine,
                                  tensor_parallel_size=req.tensor_parallel_size // dp))
    except ModelConfigError as exc:
        if exc.path == "config.json" and isinstance(req.model, str):   # the planner read it as data: name it
            exc = ModelConfigError(req.model, str(exc).removeprefix(f"{exc.field}: config.json: "))
        raise _model_error(exc, model_field) from None
    first = next((g.config for g in model.attention_groups if g.config is not None), None)
    return ServeAnswer(line, req.ranks, first, model.answer(), notes=notes, model=model)


def _model_error(exc: ModelConfigError, field: str) -> InvalidInputError:
    """A model that cannot be read, as bad input naming the caller's field for it."""
    if field == exc.field:
        return exc
    return InvalidInputError(field, str(exc).removeprefix(f"{exc.field}: "))


def _override_int(overrides: Mapping[str, Any], key: str) -> Optional[int]:
    """A positive integer override, else None (a bad value is the attention config's to refuse, by field)."""
    v = overrides.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


def engine_of(req: ModelRequest, data: Mapping[str, Any], ruleset: Optional[RuleSet] = None) -> tuple[Any, ModelRequest]:
    """The engine a request speaks for, with the parts that are the engine's own (under SGLang its own
    --attention-backend name: attnplan/engine_request.py), and the request without them."""
    from attnplan.engine_request import with_backend
    from attnplan.policy import default_ruleset, parse_engine

    spec = parse_engine(req.engine, ruleset if ruleset is not None else default_ruleset())
    if spec.name != "sglang":
        if req.sglang is not None:
            raise InvalidInputError("sglang", f"launch_server flags belong to engine sglang, not {spec}")
        return spec, req
    if req.sglang is not None:   # SGLang's own flags beyond the common ones ride in its request
        from attnplan.engine_request import sglang_backend
        from attnplan.policy import EngineSpec
        from attnplan.sglang.flags import SglangEngine, SglangFlags

        x = req.sglang
        flags = SglangFlags(
            prefill_attention_backend=sglang_backend(x.prefill_attention_backend) if x.prefill_attention_backend else None,
            decode_attention_backend=sglang_backend(x.decode_attention_backend) if x.decode_attention_backend else None,
            speculative_algorithm=x.speculative_algorithm, speculative_eagle_topk=x.speculative_eagle_topk,
            speculative_num_draft_tokens=x.speculative_num_draft_tokens, speculative_num_steps=x.speculative_num_steps,
            enable_deterministic_inference=x.enable_deterministic_inference, tp_size=req.tensor_parallel_size)
        spec = EngineSpec(spec.name, spec.version, SglangEngine(flags, **({"version": spec.version} if spec.version else {})))
    # (the architecture joins in plan_model: policy/engines.py engine_request_for_model)
    spec, backend = with_backend(spec, req.attention_backend)
    # the KV-cache dtype stays in SGLang's spelling: line_fields translates it, once (cache_dtype)
    return spec, req.model_copy(update={"attention_backend": backend})


def check_request(req: ModelRequest, *, allow_paths: bool = True, presets: Optional[Mapping[str, Any]] = None) -> None:
    """Bad input (``InvalidInputError`` naming the field) that no node could plan, found without
    planning: the model's layers and fields as attnplan's own reader sees them (no transformers
    import), and the serve flags laid over them. A rejection is not bad input: that is for the
    node to say."""
    from attnplan.policy import make_config
    from attnplan.model import fields_from_hf, read_layers
    from attnplan.model.layers import text_config

    if req.engine is not None:
        from attnplan.policy import default_ruleset, parse_engine

        parse_engine(req.engine, default_ruleset())  # an engine the rules do not model: bad input
    from attnplan.model.plan import PER_GROUP_FIELDS

    try:
        data = req.load(allow_paths=allow_paths, presets=presets)
        layers = read_layers(data)
        fields = fields_from_hf(text_config(data), req.model_label(), use_transformers=False)
    except ModelConfigError as exc:
        raise InvalidInputError("model", str(exc).removeprefix("model_config: ")) from None
    _engine, req = engine_of(req, data)
    over = req.line_fields()
    if len(layers.attention_groups) > 1:  # as plan_model refuses them
        for k in PER_GROUP_FIELDS:
            if k in over:
                raise InvalidInputError(k, f"set per layer group by the model config ({len(layers.attention_groups)} "
                                           "attention groups); it cannot be overridden for the whole model")
    make_config({**fields, **over})


def answer_json(sa: ServeAnswer, req: ModelRequest, node: NodeFacts, *, trace: bool = True,
                rules_revision: str = "") -> dict[str, Any]:
    """``attnplan vllm serve --json``'s JSON, with the request as sent (``request``), the node
    (``node``: present even when vLLM would refuse at startup) and the rules revision."""
    from attnplan.policy import ANSWER_SCHEMA_VERSION

    data = serve_json(sa, trace=trace)
    if sa.model is not None:
        node = sa.model.node
        rules_revision = sa.model.rules_revision or rules_revision
    return {"schema_version": ANSWER_SCHEMA_VERSION, **data, "request": req.echo(), "node": node_json(node),
            "rules_revision": rules_revision}


__all__ = ["ModelRequest", "plan_request", "request_from_fields", "REQUEST_FIELDS", "answer_json", "check_request", "parse_serve_text", "bounded_config",
           "read_reference", "cache_dtype"]


def plan_serve(line: ServeLine, node: Optional[NodeFacts] = None, ruleset: Optional[RuleSet] = None, *,
               engine: Optional[str] = None) -> ServeAnswer:
    """A parsed ``vllm serve`` line, planned by the one pipeline of engine lines (``plan_request``) under ``engine``
    (``vllm``, or ``vllm==X``: that release's layer); the flags that do not change attention are named."""
    for k, flag in (("tensor_parallel_size", "--tensor-parallel-size"), ("pipeline_parallel_size", "--pipeline-parallel-size"),
                    ("decode_context_parallel_size", "--decode-context-parallel-size")):
        if getattr(line, k) < 1:   # said in the line's own words (vLLM refuses these at startup)
            raise InvalidInputError(k, f"{flag} must be at least 1, got {getattr(line, k)}")
    sa = plan_request(ModelRequest.from_serve_line(line, engine=engine or "vllm"), node, ruleset, parser=line.parser)
    if line.ignored:
        sa.notes.append(f"flags that do not change attention, accepted and ignored: {' '.join(line.ignored)}")
    return sa
