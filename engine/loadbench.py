"""`python -m engine.loadbench`: whole-request load benchmark (implemented in `engine.tools.loadbench`).

The import stays under `__main__`: a client process that `engine.tools.loadclients` spawns
imports this module again (as `__mp_main__`) and must not load torch and the engine."""

if __name__ == "__main__":
    from engine.tools.loadbench import main

    raise SystemExit(main())
