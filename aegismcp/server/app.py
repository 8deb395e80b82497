"""Alias of `aegis_nb.server.app`: ``from aegismcp.server.app import AegisMCP``."""

from aegis_nb.server.app import AegisMCP

__all__ = ["AegisMCP"]
