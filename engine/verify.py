"""`python -m engine.verify`: reference decoder vs pipelined engine on real weights (implemented in `engine.tools.verify`)."""

from engine.tools.verify import main

if __name__ == "__main__":
    raise SystemExit(main())
