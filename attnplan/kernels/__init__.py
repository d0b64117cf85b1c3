"""Kernel layer decided from the kernel libraries' own inventories and selection code.

``attnplan.kernels.trtllm_gen``: FlashInfer's trtllm-gen FMHA kernel table and a port of its host-side
selection (which cubin a call loads, or which parameters have none).
"""
