"""`python -m engine.profile`: where the GPU's time goes (implemented in `engine.tools.profile`)."""

from engine.tools.profile import main

if __name__ == "__main__":
    raise SystemExit(main())
