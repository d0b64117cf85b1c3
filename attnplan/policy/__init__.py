"""attnplan's policy engine: which attention kernels will run here, and why not.

    from attnplan.policy import AttentionConfig, plan_for, require_plan, UnsupportedConfigurationError, simulated_node

    answer = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8), simulated_node("B200"))
    answer.plan.decode.backend   # 'trtllm-gen'

A model's files are read in ``attnplan.model`` (``plan_model``) and this machine is probed in ``attnplan.node``
(``local_node``): the policy plans declared or probed facts and reads nothing itself.

Imports neither torch nor flashinfer.
"""

from .answer import (
    ANSWER_SCHEMA_VERSION,
    BatchMetadata,
    EngineBackend,
    EngineRef,
    Fallback,
    JitModule,
    KVCachePlan,
    MetadataPlan,
    PhasePlan,
    Plan,
    PlanAnswer,
    Suggestion,
    TraceEntry,
    Violation,
    node_json,
)
from .api import clear_cache, plan_for, require_plan
from .capability import format_capability, parse_capability
from .backend_names import BACKEND_CHOICES
from .config import CONFIG_FIELDS, KV_CACHE_DTYPES, QUERY_DTYPES, AttentionConfig, make_config
from .devices import Catalog, Device, catalog, simulated_node
from .candidates import CandidateResult, evaluate_candidate
from .engine import default_ruleset, evaluate, load_rules
from .engines import EngineSpec, engine_names, parse_engine, resolve_engine
from .suggest import apply_suggestion, suggestions_for
from attnplan.errors import (  # the classes' home (policy/errors.py re-exports them for callers)
    AdapterCallError,
    AttnplanError,
    BuildError,
    ConditionError,
    InvalidInputError,
    ModelConfigError,
    PlanMismatchError,
    RayConnectError,
    RuleError,
    RulePackError,
    SetupError,
    SourceNotFoundError,
    TableError,
    StartupMismatchError,
    UnknownDeviceError,
    UnsupportedConfigurationError,
)
from .facts import Fact, NodeFacts, Source
from .explain import Explanation, explain
from .rulepack import Check, Rule, RuleSet
from .version import SUPPORTED_FLASHINFER

# The public surface: the embedded calls, their answers, nodes, models, rules and the error tree.
# Helpers the other sub-packages share (per_rank_fields, base_context, backend_choice, node_json, the
# artifactory probe...) are imported from their modules, never re-exported here.
__all__ = [
    # the embedded calls (docs/contract.md, The plan) and their answers
    "AttentionConfig", "plan_for", "require_plan", "clear_cache", "evaluate", "explain", "Explanation",
    "suggestions_for", "apply_suggestion", "evaluate_candidate", "CandidateResult",
    "PlanAnswer", "Plan", "PhasePlan", "KVCachePlan", "MetadataPlan", "BatchMetadata", "JitModule",
    "Violation", "Suggestion", "TraceEntry", "Fallback", "EngineRef", "EngineBackend", "ANSWER_SCHEMA_VERSION",
    "node_json",
    # engine layers
    "EngineSpec", "parse_engine", "resolve_engine", "engine_names",
    # nodes
    "NodeFacts", "Fact", "Source",
    "simulated_node", "catalog", "Catalog", "Device", "parse_capability", "format_capability",
    # configs
    "make_config",
    # rules and what derives from them
    "RuleSet", "Rule", "Check", "default_ruleset", "load_rules", "capability_matrix", "matrix_markdown",
    "CONFIG_FIELDS", "KV_CACHE_DTYPES", "QUERY_DTYPES", "BACKEND_CHOICES", "SUPPORTED_FLASHINFER",
    # the error tree (attnplan/errors.py)
    "AttnplanError", "InvalidInputError", "UnknownDeviceError", "ModelConfigError", "RulePackError", "RuleError",
    "ConditionError", "UnsupportedConfigurationError", "PlanMismatchError", "StartupMismatchError",
    "AdapterCallError", "SetupError", "BuildError", "SourceNotFoundError", "TableError", "RayConnectError",
]


def __getattr__(name: str):
    # The capability matrix (policy/matrix.py and its representative configs) is for `attnplan matrix`, the labels
    # and the docs: imported when first asked for, not on every command's path (issue 36: fewer modules imported).
    if name in ("capability_matrix", "matrix_markdown"):
        from . import matrix

        return getattr(matrix, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
