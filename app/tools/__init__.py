"""App-level tools: the bulk-annotation throughput benchmark and the README screenshot."""
