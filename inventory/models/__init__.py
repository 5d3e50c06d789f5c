"""Inventory models, one module per concept; Django finds them all through this package."""

from inventory.models.gpu_types import GpuType
from inventory.models.nodes import Gpu, Node

__all__ = ["Gpu", "GpuType", "Node"]
