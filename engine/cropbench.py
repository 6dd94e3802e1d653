"""`python -m engine.cropbench`: crop timing, libvips against torch (implemented in `engine.tools.cropbench`)."""

from engine.tools.cropbench import main

if __name__ == "__main__":
    raise SystemExit(main())
