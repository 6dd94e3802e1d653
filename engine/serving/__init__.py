"""The serving core: the `Engine` step loop and public API, the scheduler (queues, KV rows,
commit, zombies), sequences, skills (prompts, validation, results) and the engine's limits."""
