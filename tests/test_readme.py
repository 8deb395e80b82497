"""The README's Python examples run as written and print what the README says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_the_readme_saga_example_rolls_back_the_flight() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(block for block in blocks if "Card Declined!" in block)
    out = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["cancelling FL-LIS", "Card Declined! — rolled back: BookFlight"]
