"""`python -m engine.soak`: churn test (implemented in `engine.tools.soak`)."""

from engine.tools.soak import main

if __name__ == "__main__":
    raise SystemExit(main())
