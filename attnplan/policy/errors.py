"""The exception tree, as the policy package names it: every class lives in ``attnplan/errors.py``
(the bottom of the package, so that ``safeio`` and every layer above raise the same classes).
attnplan's own modules import the classes from there (one module fewer on every command's path, issue 36
item 6); this module keeps the names where callers import them."""

from attnplan.errors import (
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

__all__ = [
    "AttnplanError", "InvalidInputError", "UnknownDeviceError", "ModelConfigError", "RulePackError", "RuleError",
    "ConditionError", "UnsupportedConfigurationError", "PlanMismatchError", "StartupMismatchError",
    "AdapterCallError", "SetupError", "BuildError", "SourceNotFoundError", "TableError", "RayConnectError",
]
