"""Gateway layer: a transactional MCP front for anyone's servers, driven by a policy per tool."""

from aegis_nb.kernel.extras import needs_extra

with needs_extra("mcp", "aegis_nb.gateway (the saga gateway)"):
    from aegis_nb.gateway.app import SAGA_ARGUMENT, SAGA_META_KEY, Gateway, default_policy
    from aegis_nb.gateway.policy import (
        SAGA_TOOLS,
        Policy,
        PolicyError,
        ToolKind,
        ToolPolicy,
        UpstreamSpec,
        load_policy,
        parse_policy,
    )
    from aegis_nb.gateway.upstream import UpstreamLost
    from aegis_nb.server.bindings import UNRESOLVED, Binding, BindingError


__all__ = [
    "SAGA_ARGUMENT",
    "SAGA_META_KEY",
    "SAGA_TOOLS",
    "UNRESOLVED",
    "Binding",
    "BindingError",
    "Gateway",
    "Policy",
    "PolicyError",
    "ToolKind",
    "ToolPolicy",
    "UpstreamLost",
    "UpstreamSpec",
    "default_policy",
    "load_policy",
    "parse_policy",
]
