"""Probing this machine into facts (NVML, installed packages, cubins, the kernel table, the artifactory):
``probe_node`` / ``local_node`` (``probe``), and FlashInfer's own package checks (``flashinfer_packages``).
The policy plans the facts; this package is where they are read."""

from .probe import NodeCache, ProbeIO, local_node, probe_node

__all__ = ["NodeCache", "ProbeIO", "local_node", "probe_node"]
