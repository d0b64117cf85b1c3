"""Versions this project knows."""

# The flashinfer-python release attnplan's kernels_adapter is built and tested against; a
# simulated node assumes it unless told otherwise.
SUPPORTED_FLASHINFER = "0.7.2.post1"
