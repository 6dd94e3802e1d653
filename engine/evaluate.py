"""`python -m engine.evaluate`: evaluate a model on held-out scenes (implemented in `engine.training.evaluate`)."""

from engine.training.evaluate import main

if __name__ == "__main__":
    raise SystemExit(main())
