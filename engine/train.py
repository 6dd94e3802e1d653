"""`python -m engine.train`: train the embedded model (implemented in `engine.training.train`)."""

from engine.training.train import main

if __name__ == "__main__":
    raise SystemExit(main())
