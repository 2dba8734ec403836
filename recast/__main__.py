"""`python -m recast`: the command line (`recast.cli`)."""

from recast.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
