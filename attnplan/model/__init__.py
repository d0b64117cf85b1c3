"""Reading a model: its config.json (a path, a preset, the HuggingFace cache) into attention fields and layer
groups (``hfconfig``, ``layers``), and planning every group (``plan``: ``plan_model``). The policy below it
plans configs; this package is where a model's files are read."""

from .hfconfig import config_from_hf, fields_from_hf, read_model_config
from .layers import LayerGroup, ModelLayers, compact_layers, layer_groups, read_layers
from .plan import GroupPlan, KVCacheGroup, KVCacheGroupsPlan, ModelPlanAnswer, explain_groups, plan_model

__all__ = ["config_from_hf", "fields_from_hf", "read_model_config",
           "LayerGroup", "ModelLayers", "compact_layers", "layer_groups", "read_layers",
           "GroupPlan", "KVCacheGroup", "KVCacheGroupsPlan", "ModelPlanAnswer", "explain_groups", "plan_model"]
