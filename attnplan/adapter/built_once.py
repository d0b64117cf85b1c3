"""A native helper built and loaded once per process, or None and why (host_native.py: host_step.c through ctypes;
host_torch.py: host_torch.cpp through torch.utils.cpp_extension). Either one failing leaves its Python path running."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional


class BuiltOnce:
    """``load()`` returns (the loaded library, its path) or raises; its first call's outcome is kept."""

    def __init__(self, load: Callable[[], tuple[Any, str]]):
        self._load = load
        self._lock = threading.Lock()
        self.state: dict[str, Any] = {}       # lib (None where it failed), why, path

    def library(self) -> Optional[Any]:
        """The loaded library, or None (``status()`` says why)."""
        lib = self.state.get("lib", False)
        if lib is not False:
            return lib
        with self._lock:
            if "lib" not in self.state:
                try:
                    self.state["lib"], self.state["path"] = self._load()
                    self.state["why"] = None
                except Exception as e:  # noqa: BLE001 - any failure keeps the Python path, said in status()
                    self.state["lib"] = None
                    self.state["why"] = f"{type(e).__name__}: {e}"
        return self.state["lib"]

    def status(self) -> dict[str, Any]:
        """{"compiled": bool, "path": the library or None, "why": why not or None}."""
        self.library()
        return {"compiled": self.state["lib"] is not None, "path": self.state.get("path"), "why": self.state["why"]}

    def reset(self) -> None:
        """Forget the outcome (tests: a switch set, another cache dir)."""
        with self._lock:
            self.state.clear()
