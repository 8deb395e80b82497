"""Rehearse an agent: run its policy against the mock agency once clean and once per fault of each
tool it calls (failing before it acts; acting, then never answering), and judge how each saga ended.

An agent's saga is only as safe as the server's undo for its worst call. Each scenario starts from a
fresh `TravelAgency` carrying one fault, serves it through the server `serve` builds (a gateway and
its policy, or an `AegisMCP` app), plays the agent through an MCP client session in process, and then
reads the ledger: a committed saga must leave exactly its trip standing, any other end nothing at
all. A booking left live after a rollback (an undo the policy could not call: the call timed out,
so no booking id came back to bind) makes the scenario unclean, and the table says so::

    rehearsal = await rehearse_agent(TripAgent(deadline_seconds=0.5), serve)
    rehearsal            # a table in the notebook; str() gives the same as text
    rehearsal.clean      # True when every scenario ended clean
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Final

from mcp import Client
from mcp.server.mcpserver import MCPServer

from aegis_nb.kernel.report import SagaStatus
from aegis_nb.mock.agency import TravelAgency
from aegis_nb.mock.faults import FaultPlan, ToolFaults
from aegis_nb.mock.ledger import LedgerState
from aegis_nb.notebook.rehearsal_view import ledger_words, outcome_word
from aegis_nb.notebook.trip_agent import Seen, TripAgent

HEADER: Final = ("scenario", "outcome", "ledger after")
"""The columns, named as ``%aegis_rehearse``'s table names them."""

BOOKING_TOOLS: Final = ("book_flight", "reserve_hotel", "charge_card")
"""The tools the trip agent calls inside its saga, in order: each is faulted in turn."""


class Fault(enum.Enum):
    """How a scenario's tool misbehaves (one call of it)."""

    NONE = "no fault"
    FAILS = "fails"
    TIMES_OUT = "times out after acting"

    def faults(self) -> ToolFaults:
        if self is Fault.FAILS:
            return ToolFaults(fail_next=1)
        return ToolFaults(hang_after_effect=1)


@dataclass(frozen=True, slots=True)
class AgentScenario:
    """One rehearsed run: the fault, how the saga ended, what stood in the ledger after, and the verdict."""

    tool: str | None
    fault: Fault
    status: str
    """The saga's final status as its last ``saga_commit`` / ``saga_rollback`` / ``saga_status`` said."""
    left_live: tuple[str, ...]
    """Booking and charge ids left live that the saga's end did not keep (empty when clean)."""
    answer: str
    ledger: LedgerState
    """The agency's ledger after the run."""

    @property
    def clean(self) -> bool:
        return not self.left_live

    @property
    def label(self) -> str:
        return "clean run" if self.tool is None else f"{self.tool} {self.fault.value}"

    def row(self) -> tuple[str, str, str]:
        """Scenario, outcome, ledger after: in the words of ``%aegis_rehearse``'s table."""
        status = _status(self.status)
        outcome = self.status if status is None else outcome_word(status)
        return self.label, outcome, ledger_words(status, self.ledger, self.left_live)


@dataclass(frozen=True, slots=True)
class AgentRehearsal:
    """Every scenario of one rehearsal, in order; shown as a table."""

    scenarios: tuple[AgentScenario, ...]

    @property
    def clean(self) -> bool:
        return all(s.clean for s in self.scenarios)

    def __str__(self) -> str:
        rows = [HEADER, *(s.row() for s in self.scenarios)]
        widths = [max(len(row[i]) for row in rows) for i in range(2)]
        return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's text form (``text/plain``): the table, not the dataclass."""
        printer.text(str(self))

    def _repr_html_(self) -> str:
        head = "<tr>" + "".join(f"<th>{cell}</th>" for cell in HEADER) + "</tr>"
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in s.row()) + "</tr>" for s in self.scenarios
        )
        return f"<table>{head}{body}</table>"


async def rehearse_agent(
    agent: TripAgent,
    serve: Callable[[TravelAgency], MCPServer[Any]],
    *,
    tools: Sequence[str] = BOOKING_TOOLS,
) -> AgentRehearsal:
    """Run `agent` once clean, then once per tool in `tools` for each `Fault` (see the module)."""
    plans = [
        (None, Fault.NONE),
        *((tool, fault) for tool in tools for fault in (Fault.FAILS, Fault.TIMES_OUT)),
    ]
    found = []
    for tool, fault in plans:
        plan = FaultPlan() if tool is None else FaultPlan().with_tool(tool, fault.faults())
        found.append(await _scenario(agent, serve, TravelAgency(faults=plan), tool, fault))
    return AgentRehearsal(tuple(found))


async def _scenario(
    agent: TripAgent,
    serve: Callable[[TravelAgency], MCPServer[Any]],
    agency: TravelAgency,
    tool: str | None,
    fault: Fault,
) -> AgentScenario:
    async with Client(serve(agency)) as client:

        async def call(name: str, arguments: Mapping[str, Any]) -> Seen:
            result = await client.call_tool(name, dict(arguments))
            content: Any = result.structured_content
            if content is None:
                content = "\n".join(getattr(block, "text", "") for block in result.content)
            return Seen(name, not result.is_error, content)

        seen, answer = await agent.drive(call)
        handle = seen[0].content["saga"] if seen and seen[0].ok else None
        # The agent may stop without ending the saga: ask how it stands (open, or how it ended).
        final = await call("saga_status", {"saga": handle}) if handle is not None else None
    status = str(final.content.get("status")) if final is not None and final.ok else "never begun"
    state = agency.state()
    return AgentScenario(tool, fault, status, _left_live(state, status), answer.text, state)


def _status(text: str) -> SagaStatus | None:
    """The status ``saga_status`` named (None for an answer that is not one: ``never begun``)."""
    try:
        return SagaStatus(text)
    except ValueError:
        return None


def _left_live(state: LedgerState, status: str) -> tuple[str, ...]:
    """What stands that should not: everything live, unless the saga committed (then nothing)."""
    if status == "committed":
        return ()
    live = [b.id for b in (*state.flights, *state.hotels) if b.status.value == "live"]
    live += [c.id for c in state.charges if c.status.value == "live"]
    return tuple(live)
