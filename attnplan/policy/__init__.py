"""attnplan's policy engine: which attention kernels will run here, and why not.

    from attnplan.policy import AttentionConfig, plan_for, require_plan, UnsupportedConfigurationError, simulated_node

    answer = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8), simulated_node("B200"))
    answer.plan.decode.backend   # 'trtllm-gen'

    model = plan_model("config.json", simulated_node("H100"))   # every attention layer group
    [(g.kind, g.layers, g.status) for g in model.layer_groups]

Imports neither torch nor flashinfer.
"""

from .answer import (
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
from .config import CONFIG_FIELDS, KV_CACHE_DTYPES, QUERY_DTYPES, AttentionConfig
from .devices import Catalog, Device, catalog, simulated_node
from .candidates import CandidateResult, evaluate_candidate, page_domain
from .engine import default_ruleset, evaluate, load_rules
from .engines import EngineLike, EngineSpec, engine_names, parse_engine, resolve_engine
from .probe import needs_artifactory_check
from .suggest import apply_suggestion, suggestions_for
from .errors import (
    AttnplanError,
    InvalidInputError,
    ModelConfigError,
    PlanMismatchError,
    RulePackError,
    UnknownDeviceError,
    UnsupportedConfigurationError,
)
from .facts import Fact, NodeFacts, Source
from .hfconfig import config_from_hf, fields_from_hf, make_config, read_model_config
from .probe import NodeCache, ProbeIO, local_node, probe_node
from .explain import Explanation, explain
from .matrix import capability_matrix, matrix_markdown
from .layers import LayerGroup, ModelLayers, compact_layers, layer_groups, read_layers
from .model_plan import GroupPlan, KVCacheGroup, KVCacheGroupsPlan, ModelPlanAnswer, explain_groups, plan_model
from .rulepack import RuleSet
from .version import SUPPORTED_FLASHINFER

# Names the other sub-packages use: they import from here, never from a policy module.
from .answer import ANSWER_SCHEMA_VERSION
from .backend_names import VLLM_OTHER_BACKENDS, VLLM_TO_ATTNPLAN, backend_choice
from .conditions import FactRef, Leaf, Pred
from .facts_catalog import base_context
from .hfconfig import read_model
from .parallel import per_rank_fields, per_rank_heads, startup_errors
from .probe import ARTIFACTORY_TTL_S, DEFAULT_ARTIFACTORY, DEFAULT_TIMEOUT_S, artifactory_policy, check_artifactory
from .rulepack import Check, Rule
from .plan import attention_plan, phase_plan

__all__ = [
    "AttentionConfig", "plan_for", "require_plan", "UnsupportedConfigurationError", "simulated_node",
    "PlanAnswer", "Plan", "PhasePlan", "KVCachePlan", "MetadataPlan", "BatchMetadata", "JitModule",
    "Violation", "Suggestion", "TraceEntry", "NodeFacts", "Fact", "Source",
    "local_node", "probe_node", "ProbeIO", "NodeCache", "catalog", "Catalog", "Device",
    "config_from_hf", "fields_from_hf", "read_model_config", "make_config",
    "evaluate", "suggestions_for", "apply_suggestion", "default_ruleset", "load_rules", "page_domain", "RuleSet",
    "evaluate_candidate", "CandidateResult", "EngineSpec", "EngineLike", "parse_engine", "resolve_engine", "engine_names", "EngineRef", "EngineBackend", "Fallback",
    "needs_artifactory_check", "node_json", "explain", "Explanation", "capability_matrix", "matrix_markdown",
    "plan_model", "ModelPlanAnswer", "GroupPlan", "KVCacheGroupsPlan", "KVCacheGroup", "explain_groups",
    "LayerGroup", "ModelLayers", "layer_groups", "read_layers", "compact_layers",
    "parse_capability", "format_capability", "clear_cache",
    "AttnplanError", "InvalidInputError", "UnknownDeviceError", "ModelConfigError", "RulePackError",
    "PlanMismatchError", "SUPPORTED_FLASHINFER", "CONFIG_FIELDS", "KV_CACHE_DTYPES", "QUERY_DTYPES", "BACKEND_CHOICES",
    'ANSWER_SCHEMA_VERSION', 'ARTIFACTORY_TTL_S', 'Check', 'DEFAULT_ARTIFACTORY', 'DEFAULT_TIMEOUT_S', 'FactRef', 'Leaf', 'Pred', 'Rule', 'VLLM_OTHER_BACKENDS', 'VLLM_TO_ATTNPLAN', 'artifactory_policy', 'attention_plan', 'backend_choice', 'base_context', 'check_artifactory', 'per_rank_fields', 'per_rank_heads', 'phase_plan', 'read_model', 'startup_errors',
]
