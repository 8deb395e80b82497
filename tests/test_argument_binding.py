"""A saga whose arguments do not fit a step's execute or compensate is refused before any step runs.

The same check covers the list form, the engine, function steps, wrapped steps and the magics; its
message names the entry, the method, its parameters and what the saga gave it (by number and name,
never by value).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from aegis_nb import AegisContext, SagaDefinitionError, WorkflowEngine, step
from aegis_nb.notebook.injection import Fault, inject
from aegis_nb.saga.definition import normalize_saga
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.testing import EventCapture
from tests.ipython_support import loaded_shell, ok, usage_error


class Effects:
    """Every call any step made, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []


class BookFlight:
    """Needs a destination, in execute and compensate alike."""

    def __init__(self, effects: Effects) -> None:
        self.effects = effects

    async def execute(self, ctx: AegisContext, destination: str, *, seats: int = 1) -> None:
        self.effects.calls.append(f"book {destination} x{seats}")

    async def compensate(self, ctx: AegisContext, destination: str, *, seats: int = 1) -> None:
        self.effects.calls.append(f"cancel {destination}")


class ChargeCard:
    """Takes no arguments."""

    def __init__(self, effects: Effects) -> None:
        self.effects = effects

    async def execute(self, ctx: AegisContext) -> None:
        self.effects.calls.append("charge")

    async def compensate(self, ctx: AegisContext) -> None:
        self.effects.calls.append("refund")


class LopsidedUndo:
    """Its execute takes an amount; its compensate forgot to."""

    async def execute(self, ctx: AegisContext, amount: int) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Classy:
    """A class used as the step itself, through classmethods."""

    @classmethod
    async def execute(cls, ctx: AegisContext, code: str) -> None:
        return None

    @classmethod
    async def compensate(cls, ctx: AegisContext, code: str) -> None:
        return None


@pytest.fixture
def effects() -> Effects:
    return Effects()


MISSING_DESTINATION = (
    "saga entry 0 (BookFlight): execute(ctx, destination, *, seats=1) does not fit the arguments the "
    "saga gives it (none besides the context): missing a required argument: 'destination'"
)


@pytest.mark.anyio
async def test_the_engine_refuses_a_missing_argument_before_the_first_step_runs(effects: Effects) -> None:
    capture = EventCapture()
    engine = WorkflowEngine(sinks=[capture])
    with pytest.raises(SagaDefinitionError) as caught:
        await engine.execute_saga([ChargeCard(effects), BookFlight(effects)])
    assert str(caught.value) == MISSING_DESTINATION.replace("entry 0", "entry 1")
    assert effects.calls == []
    assert capture.events == []


@pytest.mark.anyio
async def test_arguments_that_fit_run_as_before(effects: Effects) -> None:
    engine = WorkflowEngine()
    saga = [(BookFlight(effects), ("Lisbon",), {"seats": 2}), ChargeCard(effects)]
    await engine.execute_saga(saga)
    assert effects.calls == ["book Lisbon x2", "charge"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        pytest.param(BookFlight(Effects()), MISSING_DESTINATION, id="missing"),
        pytest.param(
            (ChargeCard(Effects()), ("extra",), {}),
            "saga entry 0 (ChargeCard): execute(ctx) does not fit the arguments the saga gives it "
            "(1 positional argument after the context): too many positional arguments",
            id="too-many",
        ),
        pytest.param(
            (BookFlight(Effects()), ("Oslo",), {"nights": 3}),
            "saga entry 0 (BookFlight): execute(ctx, destination, *, seats=1) does not fit the arguments "
            "the saga gives it (1 positional argument and keyword nights after the context): got an "
            "unexpected keyword argument 'nights'",
            id="unexpected-keyword",
        ),
        pytest.param(
            (LopsidedUndo(), (5,), {}),
            "saga entry 0 (LopsidedUndo): compensate(ctx) does not fit the arguments the saga gives it "
            "(1 positional argument after the context): too many positional arguments",
            id="compensate-too",
        ),
        pytest.param(
            Classy,
            "saga entry 0 (Classy): execute(ctx, code) does not fit the arguments the saga gives it "
            "(none besides the context): missing a required argument: 'code'",
            id="class-as-step",
        ),
    ],
)
def test_the_list_form_names_the_entry_the_method_and_the_mismatch(entry: object, message: str) -> None:
    with pytest.raises(SagaDefinitionError) as caught:
        normalize_saga([entry])
    assert str(caught.value) == message


def test_the_message_never_shows_argument_values() -> None:
    with pytest.raises(SagaDefinitionError) as caught:
        normalize_saga([(ChargeCard(Effects()), ("hunter2",), {"pin": "1234"})])
    assert str(caught.value) == (
        "saga entry 0 (ChargeCard): execute(ctx) does not fit the arguments the saga gives it "
        "(1 positional argument and keyword pin after the context): too many positional arguments"
    )


def test_a_function_step_is_checked_against_its_functions_not_its_pass_through_methods() -> None:
    @step(name="Reserve")
    async def reserve(ctx: AegisContext, hotel: str) -> None:
        return None

    @reserve.compensation
    async def release(ctx: AegisContext) -> None:
        return None

    with pytest.raises(SagaDefinitionError) as caught:
        normalize_saga([(reserve, ("Ritz",), {})])
    assert str(caught.value) == (
        "saga entry 0 (Reserve): compensate(ctx) does not fit the arguments the saga gives it "
        "(1 positional argument after the context): too many positional arguments"
    )


def test_a_read_only_function_step_has_only_its_execute_checked() -> None:
    @step(read_only=True)
    async def look(ctx: AegisContext, city: str) -> None:
        return None

    (spec,) = normalize_saga([(look, ("Oslo",), {})])
    assert (spec.name, spec.args) == ("look", ("Oslo",))


def test_a_step_wrapped_with_a_fault_is_checked_against_the_wrapped_step() -> None:
    wrapped = inject(BookFlight(Effects()), Fault(latency=0.1))
    with pytest.raises(SagaDefinitionError) as caught:
        normalize_saga([wrapped])
    assert str(caught.value) == MISSING_DESTINATION


def test_the_class_check_is_cached_by_class_and_argument_shape() -> None:
    from aegis_nb.saga.binding import class_mismatch

    class Fresh:
        async def execute(self, ctx: AegisContext, n: int) -> None:
            return None

        async def compensate(self, ctx: AegisContext, n: int) -> None:
            return None

    before = class_mismatch.cache_info()
    for _ in range(3):
        normalize_saga([(Fresh(), (1,), {}), (Fresh(), (2,), {})])
    after = class_mismatch.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 5)


# -- the magics ------------------------------------------------------------------------------------

BOOK_FLIGHT_CELL = """%%aegis_step BookFlight
async def execute(ctx, destination):
    return ctx.with_metadata({"flight": destination})

async def compensate(ctx, destination):
    return None
"""

CHARGE_CARD_CELL = """%%aegis_step ChargeCard
async def execute(ctx):
    return None

async def compensate(ctx):
    return None
"""

MAGIC_MISSING_DESTINATION = (
    "saga entry 0 (BookFlight): execute(ctx, destination) does not fit the arguments the saga gives it "
    "(none besides the context): missing a required argument: 'destination'; a magic gives steps their "
    "arguments in the cell form: %%{magic} on the first line, then one step per line, e.g. BookFlight(...)"
)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with loaded_shell(BOOK_FLIGHT_CELL, CHARGE_CARD_CELL) as ip:
        yield ip


def test_the_saga_magic_refuses_a_missing_argument_and_books_nothing(shell: InteractiveShell) -> None:
    message = usage_error(shell, "%aegis_saga BookFlight ChargeCard --mock travel -o run")
    assert message == MAGIC_MISSING_DESTINATION.format(magic="aegis_saga")
    assert "run" not in shell.user_ns
    assert "travel" not in shell.user_ns  # refused before the mock tools were even bound


def test_the_rehearsal_refuses_up_front_instead_of_calling_every_scenario_unsafe(
    shell: InteractiveShell,
) -> None:
    message = usage_error(shell, "%aegis_rehearse BookFlight ChargeCard --mock travel -o rehearsal")
    assert message == MAGIC_MISSING_DESTINATION.format(magic="aegis_rehearse")
    assert "rehearsal" not in shell.user_ns


@pytest.mark.parametrize("magic", ["aegis_saga", "aegis_rehearse"])
def test_the_line_form_sends_a_step_with_arguments_to_the_cell_form(
    shell: InteractiveShell, magic: str
) -> None:
    assert usage_error(shell, f'%{magic} BookFlight("Lisbon") ChargeCard') == (
        f"%{magic}: BookFlight(...) has arguments, which only the cell form takes: write %%{magic} "
        '(with the options) on the first line, then one step per line, e.g. BookFlight("Lisbon")'
    )


def test_the_cell_form_with_the_argument_runs(shell: InteractiveShell) -> None:
    ok(shell, '%%aegis_saga -o run\nBookFlight("Lisbon")\nChargeCard')
    run = shell.user_ns["run"]
    assert isinstance(run, SagaRun)
    assert run.error is None
    assert run.context is not None
    assert dict(run.context.metadata) == {"flight": "Lisbon"}
