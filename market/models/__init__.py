"""Market models, one module per concept; Django finds them all through this package."""

from market.models.gpu_types import GpuType

__all__ = ["GpuType"]
