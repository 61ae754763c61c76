"""``python -m aiayn.bench``: the benchmark's command line."""

from .command import main

if __name__ == "__main__":
    main()
