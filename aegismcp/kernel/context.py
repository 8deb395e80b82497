"""Alias of `aegis_nb.kernel.context`: ``from aegismcp.kernel.context import AegisContext``."""

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.values import Secret

__all__ = ["AegisContext", "Secret"]
