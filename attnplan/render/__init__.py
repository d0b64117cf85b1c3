"""Presentation: text tables for people and JSON shapes for machines, shared by the CLI, the REST
service and the preflight. Renderers read answers; they never decide anything."""

# Each name is imported from its module on first use (PEP 562): a command imports the renderers it runs, e.g.
# ``attnplan plan``'s tables never import answer.py's JSON (issue 36 item 6: fewer modules on one command's path).
_FROM = {
    "compact_layers": "groups", "render_groups": "groups", "render_groups_explain": "groups",
    **dict.fromkeys(("engine_line", "node_label", "paint", "plan_heading", "render_answer", "render_explain",
                     "render_node", "render_rules", "render_verdict", "rules_json", "table"), "tables"),
    "plan_json": "answer",
    "finish": "verdict", "verdict_message": "verdict",
    "note_text": "notes",
    "entry_inputs": "trace", "finish_trace": "trace",
}

__all__ = ["engine_line", "render_groups", "render_groups_explain", "compact_layers", "node_label", "paint", "render_answer", "render_explain", "render_node", "render_rules",
           "render_verdict", "plan_heading", "rules_json", "table", "finish", "verdict_message", "plan_json",
           "note_text", "entry_inputs", "finish_trace"]


def __getattr__(name: str):
    where = _FROM.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # one import statement per module, so that tests/test_import_structure.py's graph still reads every arrow
    if where == "groups":
        from . import groups as module
    elif where == "tables":
        from . import tables as module  # type: ignore[no-redef]
    elif where == "answer":
        from . import answer as module  # type: ignore[no-redef]
    elif where == "verdict":
        from . import verdict as module  # type: ignore[no-redef]
    elif where == "notes":
        from . import notes as module  # type: ignore[no-redef]
    else:
        from . import trace as module  # type: ignore[no-redef]
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
