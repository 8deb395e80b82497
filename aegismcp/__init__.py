"""Import alias: the AegisMCP documentation's import paths, served by `aegis_nb`. Re-exports only."""

from aegis_nb import *  # noqa: F403
from aegis_nb import __all__ as __all__
