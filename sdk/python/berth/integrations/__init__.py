"""Ready-made deployments: ``integrations.VLLM`` and its ``VLLMArgs`` (docs/inference.md, "vLLM")."""

from .vllm import VLLM, VLLMArgs

__all__ = ["VLLM", "VLLMArgs"]
