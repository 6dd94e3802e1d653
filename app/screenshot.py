"""`python -m app.screenshot`: README screenshot of the UI (implemented in `app.tools.screenshot`)."""

from app.tools.screenshot import main

if __name__ == "__main__":
    raise SystemExit(main())
