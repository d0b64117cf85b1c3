"""attnplan's rules, as data.

``packs/*.yaml`` hold the capability rules (docs/contract.md, Rules), ``backends.yaml`` the backend catalog
and the selection order (docs/contract.md, Selection), ``devices.yaml`` the device catalog. ``policy`` loads and
evaluates them; nothing here is code.
"""

from pathlib import Path

RULES_DIR = Path(__file__).resolve().parent
PACKS_DIR = RULES_DIR / "packs"
BACKENDS_FILE = RULES_DIR / "backends.yaml"
DEVICES_FILE = RULES_DIR / "devices.yaml"


def pack_files(directory: Path = PACKS_DIR) -> list[Path]:
    return sorted(p for p in directory.glob("*.yaml") if not p.name.startswith("."))
