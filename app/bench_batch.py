"""`python -m app.bench_batch`: bulk-annotation throughput (implemented in `app.tools.bench_batch`)."""

from app.tools.bench_batch import main

if __name__ == "__main__":
    raise SystemExit(main())
