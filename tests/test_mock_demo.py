"""`make demo`: the travel saga through a real client session against the mock agency, three ways.

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
""".replace(
    "{timeout}",
    "step 'ReserveHotel' exceeded its deadline (budget N ms) — rolled back: ReserveHotel, BookFlight",
)


async def test_the_demo_shows_each_step_and_the_ledger_after_each_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    await run_demo()
    printed = capsys.readouterr().out
    # Timings vary from run to run; everything else is fixed.
    printed = re.sub(r"^ +\d+\.\d ms  ", "  ", printed, flags=re.MULTILINE)
    printed = re.sub(r"budget \d+\.\d ms", "budget N ms", printed)
    assert printed == EXPECTED
