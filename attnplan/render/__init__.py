"""Presentation: text tables for people and JSON shapes for machines, shared by the CLI, the REST
service and the preflight. Renderers read answers; they never decide anything."""

from .tables import (
    node_label,
    paint,
    render_answer,
    render_explain,
    render_node,
    render_rules,
    rules_json,
    table,
)

__all__ = ["node_label", "paint", "render_answer", "render_explain", "render_node", "render_rules",
           "rules_json", "table"]
