"""Kernel: the context, the error tree, the report values and the deadline-enforcing executor."""

from aegis_nb.kernel.context import AegisContext
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
from aegis_nb.kernel.executor import DeadlineGuard, ToolExecutor
from aegis_nb.kernel.report import (
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaReport,
    SagaStatus,
)
from aegis_nb.kernel.values import FrozenDict, Secret

__all__ = [
    "AegisContext",
    "AegisError",
    "CompensationFailure",
    "DeadlineGuard",
    "ErrorInfo",
    "FailureKind",
    "FrozenDict",
    "SagaCompensationFailed",
    "SagaDefinitionError",
    "SagaFailed",
    "SagaReport",
    "SagaRolledBack",
    "SagaStatus",
    "Secret",
    "ServerUnreachable",
    "StepResultError",
    "ToolError",
    "ToolExecutor",
    "ToolTimeoutError",
]
