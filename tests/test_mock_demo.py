"""`make demo`: the travel saga through a real client session against the mock agency, three ways,
then with the flight and the hotel booked in parallel (the trace shows their events interleaved).

In the third the hotel's booking timed out before it was made: its in-doubt undo says "nothing to
undo", as the ledger (no hotel, one cancellation: the flight's) shows, not "undone".
"""

from __future__ import annotations

import re

import pytest

from aegis_nb.demo import run_demo

pytestmark = pytest.mark.anyio

EXPECTED = """
=== 1. all steps succeed
  book_trip started: BookFlight -> ReserveHotel -> ChargeCard
  step 1 of 3: executing BookFlight
  step 1 of 3: BookFlight done
  step 2 of 3: executing ReserveHotel
  step 2 of 3: ReserveHotel done
  step 3 of 3: executing ChargeCard
  step 3 of 3: ChargeCard done
  book_trip committed
result (ok): committed: BookFlight, ReserveHotel, ChargeCard
ledger:
  flights : FL-0001 AE729 to Lisbon
  hotels  : HT-0001 Hotel Lisbon, 3 nights
  charges : CH-0001 €555.00 on card ****4242  (held: €555.00)
  undone  : 0 cancellations, 0 refunds

=== 2. the card is declined
  book_trip started: BookFlight -> ReserveHotel -> ChargeCard
  step 1 of 3: executing BookFlight
  step 1 of 3: BookFlight done
  step 2 of 3: executing ReserveHotel
  step 2 of 3: ReserveHotel done
  step 3 of 3: executing ChargeCard
  step 3 of 3: ChargeCard failed: Card Declined!
  compensating ReserveHotel
  ReserveHotel undone
  compensating BookFlight
  BookFlight undone
  book_trip rolled back: Card Declined! — rolled back: ReserveHotel, BookFlight
result (error): Card Declined! — rolled back: ReserveHotel, BookFlight
ledger:
  flights : -
  hotels  : -
  charges : -  (held: €0.00)
  undone  : 2 cancellations, 0 refunds

=== 3. the hotel is slower than the client's 300 ms deadline
  book_trip started: BookFlight -> ReserveHotel -> ChargeCard
  step 1 of 3: executing BookFlight
  step 1 of 3: BookFlight done
  step 2 of 3: executing ReserveHotel
  step 2 of 3: ReserveHotel timed out
  compensating ReserveHotel
  ReserveHotel nothing to undo
  compensating BookFlight
  BookFlight undone
  book_trip rolled back: {timeout}
result (error): {timeout}
ledger:
  flights : -
  hotels  : -
  charges : -  (held: €0.00)
  undone  : 1 cancellation, 0 refunds

=== 4. flight and hotel booked at the same time, then the card is declined
  saga book_trip started: BookFlight -> ReserveHotel -> ChargeCard (no deadline)
  -> [parallel 1.1] BookFlight.execute()
  -> [parallel 1.2] ReserveHotel.execute()
  <- [parallel 1.1] BookFlight ok (N ms)
  <- [parallel 1.2] ReserveHotel ok (N ms)
  -> ChargeCard.execute()
  x  ChargeCard error: Card Declined! (N ms)
  <~ [parallel 1.1] BookFlight.compensate()
  <~ [parallel 1.2] ReserveHotel.compensate()
  ~> [parallel 1.1] BookFlight undone (N ms)
  ~> [parallel 1.2] ReserveHotel undone (N ms)
  saga book_trip rolled back in N ms: Card Declined! — rolled back: BookFlight, ReserveHotel
result (error): Card Declined! — rolled back: BookFlight, ReserveHotel
ledger:
  flights : -
  hotels  : -
  charges : -  (held: €0.00)
  undone  : 2 cancellations, 0 refunds
""".replace(
    "{timeout}",
    "step 'ReserveHotel' exceeded its deadline (budget N ms) — rolled back: BookFlight; "
    "nothing to undo: ReserveHotel",
)


def members_in_start_order(text: str) -> str:
    """`text` with each run of group members' start lines sorted: members start together, in the
    scheduler's order (trio shuffles it), so only which lines they are is fixed."""
    lines, out = text.split("\n"), []
    while lines:
        line = lines.pop(0)
        if "[parallel" not in line or line[:5] not in ("  -> ", "  <~ "):
            out.append(line)
            continue
        together = [line]
        while lines and lines[0][:5] == line[:5] and "[parallel" in lines[0]:
            together.append(lines.pop(0))
        out += sorted(together)
    return "\n".join(out)


async def test_the_demo_shows_each_step_and_the_ledger_after_each_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    await run_demo()
    printed = capsys.readouterr().out
    # Timings vary from run to run; everything else is fixed.
    printed = re.sub(r"^ +\d+\.\d ms  ", "  ", printed, flags=re.MULTILINE)
    printed = re.sub(r"budget \d+\.\d ms", "budget N ms", printed)
    printed = re.sub(r"(\(|in )\d+\.\d ms", r"\1N ms", printed)  # the trace's durations
    assert members_in_start_order(printed) == EXPECTED
