"""`python -m app.serve_cost`: the HTTP server's CPU cost per request (implemented in `app.tools.serve_cost`)."""

from app.tools.serve_cost import main

if __name__ == "__main__":
    raise SystemExit(main())
