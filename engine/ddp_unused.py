"""`torchrun --standalone --nproc-per-node 2 -m engine.ddp_unused`: DDP unused-parameter cost (implemented in
`engine.tools.ddp_unused`)."""

from engine.tools.ddp_unused import main

if __name__ == "__main__":
    raise SystemExit(main())
