"""A scripted travel agent: the tool calls an LLM agent would make to book a trip inside a saga.

`TripAgent` is a policy, not a model: given what it has seen so far (each tool's answer, in order) it
names its next move, a `Call` or its final `Answer`. It begins a saga, books a flight and a hotel,
charges a card for both, and then commits; when a call fails it retries it (the next card, for a
declined charge; up to `retries` times for anything else) and, out of retries, rolls the saga back and
answers quoting the rollback, or, with ``abandon=True``, simply stops, leaving the saga to its TTL.
Being a pure function of the transcript it replays the same way every time, so a test, a tutorial
and a rehearsal against the mock's faults can all drive real agent frameworks with it, offline:

    agent = TripAgent(cards=("4000000000000002", "4242424242424242"))
    model = agent.function_model()          # pydantic-ai's FunctionModel (no network)
    seen, answer = await agent.drive(call)  # or any MCP client: `call(tool, arguments) -> Seen`
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models.function import AgentInfo, FunctionModel

DEFAULT_CARD: Final = "4242424242424242"
"""A card number the mock agency charges."""

MAX_MOVES: Final = 50
"""Moves `drive` allows before it calls the script broken (a policy loops only through a bug)."""


@dataclass(frozen=True, slots=True)
class Call:
    """A move: call `tool` with `arguments`."""

    tool: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Answer:
    """The final move: the agent's answer to its user."""

    text: str


@dataclass(frozen=True, slots=True)
class Seen:
    """One tool's answer as the agent saw it: whether it succeeded, and its content (structured if the
    tool gave structure, else its text)."""

    tool: str
    ok: bool
    content: Any


@dataclass(frozen=True, slots=True)
class TripAgent:
    """The trip policy (see the module docstring); every field is a knob a test or rehearsal turns."""

    destination: str = "Lisbon"
    nights: int = 2
    cards: tuple[str, ...] = (DEFAULT_CARD,)
    """Cards to try in turn: a declined charge is retried with the next one."""
    retries: int = 0
    """Further attempts of a failed booking call before the agent gives up."""
    ttl_seconds: float | None = None
    """Asked of ``saga_begin`` (None: the server's default)."""
    deadline_seconds: float | None = None
    """Asked of ``saga_begin`` (None: the server's default)."""
    abandon: bool = False
    """Out of retries, or with everything booked, stop without ending the saga."""

    def next_move(self, seen: Sequence[Seen]) -> Call | Answer:
        """What the agent does after `seen` (empty: at the start)."""
        if not seen:
            asked = {"ttl_seconds": self.ttl_seconds, "deadline_seconds": self.deadline_seconds}
            return Call("saga_begin", {name: value for name, value in asked.items() if value is not None})
        begun = seen[0]
        if not begun.ok:
            return Answer(f"I could not begin a saga: {begun.content}")
        handle = begun.content["saga"]
        last = seen[-1]
        if last.tool == "saga_rollback":
            return Answer(f"I booked nothing: the saga was rolled back ({_summary(last)}).")
        if last.tool == "saga_commit":
            if last.ok and last.content.get("status") == "committed":
                return Answer(f"Your trip to {self.destination} is booked: {_booked(seen)}.")
            return Answer(f"The trip could not be committed: {_summary(last)}.")
        bookings = seen[1:]
        done = {s.tool: s.content for s in bookings if s.ok}
        failures = [s for s in bookings if not s.ok]
        if failures and failures[-1] is last:
            attempts = sum(1 for s in failures if s.tool == last.tool)
            if last.tool == "charge_card" and attempts < len(self.cards):
                return self._charge(handle, done, self.cards[attempts])
            if last.tool != "charge_card" and attempts <= self.retries:
                return self._booking(last.tool, handle)
            if self.abandon:
                return Answer(f"I stopped: {last.tool} failed ({last.content}).")
            return Call("saga_rollback", {"saga": handle, "reason": f"{last.tool} failed: {last.content}"})
        for tool in ("book_flight", "reserve_hotel"):
            if tool not in done:
                return self._booking(tool, handle)
        if "charge_card" not in done:
            return self._charge(handle, done, self.cards[0])
        if self.abandon:
            return Answer("I stopped before committing.")
        return Call("saga_commit", {"saga": handle})

    def _booking(self, tool: str, handle: str) -> Call:
        if tool == "book_flight":
            return Call(tool, {"destination": self.destination, "saga": handle})
        return Call(tool, {"city": self.destination, "nights": self.nights, "saga": handle})

    @staticmethod
    def _charge(handle: str, done: Mapping[str, Any], card: str) -> Call:
        amount = done["book_flight"]["price_cents"] + done["reserve_hotel"]["price_cents"]
        return Call("charge_card", {"amount_cents": amount, "card_number": card, "saga": handle})

    async def drive(
        self, call: Callable[[str, Mapping[str, Any]], Awaitable[Seen]]
    ) -> tuple[tuple[Seen, ...], Answer]:
        """Play the policy through `call` (any MCP client's call, as a `Seen`) to its answer."""
        seen: list[Seen] = []
        for _ in range(MAX_MOVES):
            move = self.next_move(seen)
            if isinstance(move, Answer):
                return tuple(seen), move
            seen.append(await call(move.tool, move.arguments))
        raise RuntimeError(f"the trip agent made {MAX_MOVES} moves without an answer")

    def function_model(self) -> FunctionModel:
        """The policy as pydantic-ai's `FunctionModel`: one move per model turn, from the messages.

        Tool failures reach it as pydantic-ai passes them with ``tool_error_behavior='failed'`` (a
        failed tool return) or by default (a retried tool return, or in older versions a retry prompt);
        all are seen as failed calls.
        """
        from aegis_nb.kernel.extras import needs_extra

        with needs_extra("agents", "TripAgent.function_model (a pydantic-ai model)"):
            from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
            from pydantic_ai.models.function import FunctionModel

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            move = self.next_move(seen_in(messages))
            if isinstance(move, Answer):
                return ModelResponse(parts=[TextPart(move.text)])
            return ModelResponse(parts=[ToolCallPart(move.tool, dict(move.arguments))])

        return FunctionModel(respond, model_name="trip-agent")


def seen_in(messages: Sequence[ModelMessage]) -> list[Seen]:
    """The tool answers in a pydantic-ai transcript, in order, as the trip policy reads them."""
    from pydantic_ai.messages import ModelRequest, RetryPromptPart, ToolReturnPart

    seen: list[Seen] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                # "failed" with tool_error_behavior='failed'; "retried" by default (a retry request).
                failed = getattr(part, "outcome", None) in ("failed", "retried")
                seen.append(Seen(part.tool_name, not failed, part.content))
            elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
                seen.append(Seen(part.tool_name, False, part.content))
    return seen


def _summary(seen: Seen) -> str:
    content = seen.content
    if isinstance(content, Mapping):
        return str(content.get("summary") or content.get("status"))
    return str(content)


def _booked(seen: Sequence[Seen]) -> str:
    done = {s.tool: s.content for s in seen if s.ok}
    flight, hotel, charge = done["book_flight"], done["reserve_hotel"], done["charge_card"]
    return f"flight {flight['booking_id']}, hotel {hotel['booking_id']}, charge {charge['charge_id']}"
