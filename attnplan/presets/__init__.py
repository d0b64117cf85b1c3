"""Model presets: public HuggingFace config.json files of models users plan for (data only).

The status page offers them as presets; ``examples/`` in a source checkout links to them."""

from pathlib import Path

PRESETS_DIR = Path(__file__).resolve().parent
