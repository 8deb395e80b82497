"""Alias of `aegis_nb.kernel.errors`."""

from aegis_nb.kernel.errors import (
    AegisError,
    SagaCompensationFailed,
    SagaDefinitionError,
    SagaFailed,
    SagaRolledBack,
    ServerUnreachable,
    StepResultError,
    ToolError,
    ToolTimeoutError,
)

__all__ = [
    "AegisError",
    "SagaCompensationFailed",
    "SagaDefinitionError",
    "SagaFailed",
    "SagaRolledBack",
    "ServerUnreachable",
    "StepResultError",
    "ToolError",
    "ToolTimeoutError",
]
