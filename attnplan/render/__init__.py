"""Presentation: text tables for people and JSON shapes for machines, shared by the CLI, the REST
service and the preflight. Renderers read answers; they never decide anything."""

from .groups import compact_layers, render_groups, render_groups_explain
from .tables import (
    engine_line,
    node_label,
    paint,
    plan_heading,
    render_answer,
    render_explain,
    render_node,
    render_rules,
    render_verdict,
    rules_json,
    table,
)
from .answer import plan_json
from .verdict import finish, verdict_message
from .notes import note_text
from .trace import entry_inputs, finish_trace

__all__ = ["engine_line", "render_groups", "render_groups_explain", "compact_layers", "node_label", "paint", "render_answer", "render_explain", "render_node", "render_rules",
           "render_verdict", "plan_heading", "rules_json", "table", "finish", "verdict_message", "plan_json",
           "note_text", "entry_inputs", "finish_trace"]
