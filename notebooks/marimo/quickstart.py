"""Tutorial 01 for marimo: a saga that undoes itself, drawn live.

marimo has no IPython magics (``marimo convert`` comments every ``%aegis_saga`` out), so this
version calls what the magics call: `WorkflowEngine.run_saga` with a `LiveView` as a sink, and a
`ReplayView` of the run. Both are anywidgets, which marimo draws. Run it with
``marimo edit notebooks/marimo/quickstart.py`` (or ``marimo run`` for the app view).
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App()


@app.cell
def _():
    import marimo as mo

    mo.md(
        """
        # 01 · Quickstart: a saga that undoes itself

        An agent books a flight, then tries to charge a card. The card is declined. A **saga** pairs
        every step with a compensation, and when a later step fails the engine runs the compensations
        of the completed steps, newest first. Below, the AegisMCP documentation's two steps, each
        slowed by 0.8 s so you can watch the diagram grow and roll back.
        """
    )
    return (mo,)


@app.cell
def _():
    import anyio

    from aegis_nb import AegisContext, WorkflowEngine
    from aegis_nb.notebook import LiveView, ReplayView

    class BookFlightStep:
        async def execute(self, ctx: AegisContext):
            await anyio.sleep(0.8)  # a human pace: the real step takes microseconds
            print("Booking flight...")
            return ctx.with_metadata({"flight_id": "FLIGHT_999"})

        async def compensate(self, ctx: AegisContext):
            print(f"Canceling flight {ctx.metadata.get('flight_id')}...")

    class ChargeCardStep:
        async def execute(self, ctx: AegisContext):
            await anyio.sleep(0.8)
            print(f"Attempting to charge card for {ctx.metadata.get('flight_id')}...")
            raise ValueError("Card Declined!")

        async def compensate(self, ctx: AegisContext):
            pass

    engine = WorkflowEngine()
    view = LiveView()
    return AegisContext, BookFlightStep, ChargeCardStep, ReplayView, engine, view


@app.cell
def _(view):
    view  # noqa: B018 -- a cell shows its last expression: the live diagram, growing as the saga runs
    return


@app.cell
async def _(AegisContext, BookFlightStep, ChargeCardStep, engine, view):
    run = await engine.run_saga(
        [BookFlightStep(), ChargeCardStep()], AegisContext(), name="book_vacation", sinks=[view]
    )
    print(run.status.value)
    print(run.report.summary())
    return (run,)


@app.cell
def _(mo):
    mo.md(
        """
        The rollback is what this saga is for: `run_saga` returns the run whatever its outcome (the
        documentation's `execute_saga` raises `SagaRolledBack` instead). A replay plays the run again,
        one event every 0.4 s; the slider steps through it by hand.
        """
    )
    return


@app.cell
def _(ReplayView, run):
    ReplayView(run)
    return


if __name__ == "__main__":
    app.run()
