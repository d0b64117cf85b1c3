"""Model presets for the status page: the HuggingFace config.json files in ``attnplan/presets``
(or ``$ATTNPLAN_EXAMPLES_DIR``).

They are read once, when the app is created (``create_app``), never on a request: a file that
attnplan's own parser cannot read is read by transformers' config class, and importing
transformers takes seconds (issue 27: the first ``GET /v1/presets`` took 5.2 s and timed out
under load). A file added to the directory later is served after a restart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import re

from attnplan.policy import AttnplanError
from attnplan.model import fields_from_hf, read_model_config

MAX_PRESETS = 100
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # a preset's name: never a path


def default_examples_dir() -> Optional[Path]:
    """ATTNPLAN_EXAMPLES_DIR when set, else the presets shipped in the package."""
    env = os.environ.get("ATTNPLAN_EXAMPLES_DIR")
    if env:
        return Path(env)
    from attnplan.presets import PRESETS_DIR
    return PRESETS_DIR


def load_presets(directory: Optional[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """(presets, errors): each preset is its name and the config fields its file implies."""
    if directory is None or not directory.is_dir():
        return [], []
    presets: list[dict[str, Any]] = []
    errors: list[str] = []
    for path in sorted(directory.glob("*.json"))[:MAX_PRESETS]:
        try:
            fields = fields_from_hf(read_model_config(path), path.name)
        except AttnplanError as exc:
            # Name the file, not the server's directory layout.
            errors.append(str(exc).replace(str(path), path.name).removeprefix("model_config: "))
            continue
        presets.append({"name": path.stem, "fields": fields})
    return presets, errors


class Presets:
    """The one preset registry of a service (issue 40 #5): every route that takes a preset name
    (``/v1/plan``, ``/v1/plan/serve``, ``/v1/compare``) resolves it here. ``/v1/presets`` lists the
    service's presets directory (``listed``: each file read once, now); a name resolves to a preset
    of that directory that read cleanly, else to one shipped in ``attnplan/presets`` (the CLI's
    ``--model NAME``): custom presets plan on every route, and so do the shipped ones."""

    def __init__(self, directory: Optional[Path]):
        from attnplan.presets import PRESETS_DIR

        self.directory = directory
        self.listed, self.errors = load_presets(directory)
        self.paths: dict[str, Path] = {p.stem: p for p in sorted(PRESETS_DIR.glob("*.json")) if NAME.fullmatch(p.stem)}
        if directory is not None and directory.is_dir():
            good = {p["name"] for p in self.listed}
            for path in sorted(directory.glob("*.json"))[:MAX_PRESETS]:
                if path.stem in good and NAME.fullmatch(path.stem):
                    self.paths[path.stem] = path  # the service's own directory wins over a shipped name

    def path(self, name: Any) -> Optional[Path]:
        return self.paths.get(name) if isinstance(name, str) else None
