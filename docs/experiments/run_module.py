"""Run a module's (or a script's) command line in this process, for the experiment wrappers that set an
engine constant first (`skinny_bench.py`, `pdl_bench.py`)."""

import runpy
import sys


def run(module: str, args: list[str]) -> None:
    sys.argv = [module, *args]
    if module.endswith(".py"):
        runpy.run_path(module, run_name="__main__")
    else:
        runpy.run_module(module, run_name="__main__")
