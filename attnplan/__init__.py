"""attnplan: which attention kernels will actually run on this GPU, for this model — and will it fail?

The embedded API, for a serving engine's init::

    from attnplan import AttentionConfig, require_plan, simulated_node

    answer = require_plan(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8),
                          simulated_node("B200"))
    answer.plan.decode.backend        # 'trtllm-gen'

A whole model, layer group by layer group (sliding/global, chunked local, non-attention layers)::

    from attnplan import plan_model
    model = plan_model("gemma-3-27b-it/config.json", simulated_node("H100"))
    model.ok, [(g.kind, g.sliding_window, g.attention.window_left) for g in model.attention_groups]
    model.to_json()                   # the JSON contract, with layer_groups

``require_plan`` raises ``UnsupportedConfigurationError`` (a ``ValueError``) naming every violated
rule and the verified suggestions; ``plan_for`` returns the answer either way. ``node=None``
probes this machine (NVML, installed packages, cubins) once.

Sub-packages: ``rules`` (the rule data), ``policy`` (the engine: plans facts, reads nothing), ``model``
(reads a model's config.json, plans its layer groups), ``node`` (probes this machine), ``render`` (tables and JSON),
``rest`` (the FastAPI service), ``adapter`` (runs a plan's FlashInfer kernels), ``preflight``
(many nodes), ``cli``. Importing ``attnplan`` imports neither torch nor flashinfer.

Errors (all ``AttnplanError``; the tree lives in ``attnplan/errors.py``)::

    AttnplanError
    ├── InvalidInputError (ValueError)      bad input: a field, a flag, a file (CLI exit 2, REST 422)
    │   ├── UnknownDeviceError              a device name not in the catalog
    │   └── ModelConfigError                an unreadable or impossible model config.json
    ├── RulePackError                       a rule pack that does not load (fails closed)
    ├── RuleError (ValueError)              one rule that does not compile
    │   └── ConditionError                  a condition that does not compile
    ├── UnsupportedConfigurationError (ValueError)   the rules reject the config
    │   └── PlanMismatchError               a plan checked against a device it was not made for
    │       └── StartupMismatchError        ... listing the facts that differ from the plan's node
    ├── AdapterCallError (ValueError)       an adapter call whose arguments do not fit its plan
    ├── SetupError (RuntimeError)           the environment around attnplan is not what it needs
    │   ├── BuildError                      a kernel module that does not compile
    │   └── SourceNotFoundError (LookupError)   an installed package's source lacks what attnplan reads
    └── RayConnectError                     the Ray cluster cannot be reached (preflight exit 3)
"""

from ._version import __version__

# The public names are imported on first use (PEP 562): ``attnplan --version`` and the CLI's
# start-up must not pay for pydantic models they do not use (issue 27).
_FROM_POLICY = frozenset({
    "SUPPORTED_FLASHINFER",
    "AttentionConfig",
    "AttnplanError",
    "Fact",
    "InvalidInputError",
    "ModelConfigError",
    "NodeFacts",
    "PlanAnswer",
    "PlanMismatchError",
    "RulePackError",
    "RuleSet",
    "Source",
    "UnknownDeviceError",
    "UnsupportedConfigurationError",
    "load_rules",
    "simulated_node",
})
# The calls that read this machine or a model's files live above the policy (which plans facts only).
_ELSEWHERE = {"plan_for": "embedded", "require_plan": "embedded", "plan_model": "embedded",
              "ModelPlanAnswer": "model", "local_node": "node"}


def __getattr__(name: str):
    where = "policy" if name in _FROM_POLICY else _ELSEWHERE.get(name)
    if where is not None:
        if where == "policy":
            from . import policy as module
        elif where == "embedded":
            from . import embedded as module  # type: ignore[no-redef]
        elif where == "model":
            from . import model as module  # type: ignore[no-redef]
        else:
            from . import node as module  # type: ignore[no-redef]
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnplan' has no attribute {name!r}")


__all__ = [
    "__version__",
    "AttentionConfig", "plan_for", "require_plan", "plan_model", "ModelPlanAnswer", "simulated_node", "local_node",
    "PlanAnswer", "NodeFacts", "Fact", "Source", "RuleSet", "load_rules", "SUPPORTED_FLASHINFER",
    "AttnplanError", "InvalidInputError", "UnknownDeviceError", "ModelConfigError", "RulePackError",
    "UnsupportedConfigurationError", "PlanMismatchError",
]
