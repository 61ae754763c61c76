"""``python -m aiayn.bench``: the benchmark's command line."""

from . import main

main()
