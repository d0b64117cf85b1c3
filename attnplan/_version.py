"""The one source of attnplan's version (pyproject reads it: ``[tool.setuptools.dynamic]``)."""

__version__ = "0.2.0"
