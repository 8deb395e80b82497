"""Alias of `aegis_nb.server`."""
