"""`python -m engine.bench`: decode-step benchmark (implemented in `engine.tools.bench`)."""

from engine.tools.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
