"""Alias of `aegis_nb.kernel`."""

from aegis_nb.kernel import *  # noqa: F403
from aegis_nb.kernel import __all__ as __all__
