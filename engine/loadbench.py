"""`python -m engine.loadbench`: whole-request load benchmark (implemented in `engine.tools.loadbench`)."""

from engine.tools.loadbench import main

if __name__ == "__main__":
    raise SystemExit(main())
