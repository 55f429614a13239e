"""Stage 9, the `dreamshard` command: `main` (the parser and the table, suite, place and methods
commands), `costs` (measure, collect, calibrate), `plans` (check), `train` (train, train-rnn),
`demo`, `summaries`, `args` (shared options). May import: everything below."""

from dreamshard.cli.main import main

__all__ = ["main"]
