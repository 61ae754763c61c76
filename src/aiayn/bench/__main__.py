"""``python -m aiayn.bench``: the benchmark's command line."""

from .command import main

main()
