"""Files written by earlier releases, kept to prove this one still reads them."""
