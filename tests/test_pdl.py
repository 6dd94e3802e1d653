"""Programmatic dependent launch (`engine.kernels.decode.PDL`): a kernel launched with it may start
while the kernel before it still runs, so it must wait (`dependent_launch`) before it touches memory.
The GPU runs are checked on the device (engine.verify, docs/experiments/one_image_check.py); these
tests check the rule in the source, and that the CPU never asks for it."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from engine.kernels import decode

KERNELS = Path(decode.__file__).parent
MEMORY = {"load", "store", "atomic_add", "inline_asm_elementwise"}


def _jit_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "triton.jit" for d in node.decorator_list):
            found[node.name] = node
    return found


def _calls_in_order(fn: ast.FunctionDef) -> list[tuple[int, int, str]]:
    calls = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            calls.append((node.lineno, node.col_offset, name))
    return sorted(calls)


def test_every_kernel_launched_with_pdl_waits_before_touching_memory():
    launched, checked = set(), set()
    jit = {}
    for path in sorted(KERNELS.glob("*.py")):
        tree = ast.parse(path.read_text())
        jit.update(_jit_functions(tree))
        for node in ast.walk(tree):  # kernel[grid](..., launch_pdl=...)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                    and any(k.arg == "launch_pdl" for k in node.keywords)):
                launched.add(ast.unparse(node.func.value))
                assert any(k.arg == "PDL" for k in node.keywords), f"{path.name}: {ast.unparse(node.func)} passes launch_pdl without PDL"
    assert {"_skinny_kernel", "_rope_kv_kernel", "_attn_chunk_kernel", "_attn_merge_kernel",
            "_residual_ln_kernel", "_choose_kernel", "_bins_kernel"} <= launched
    for name in launched:
        calls = [c for _, _, c in _calls_in_order(jit[name])]
        assert "dependent_launch" in calls, f"{name} is launched with PDL but never waits"
        wait = calls.index("dependent_launch")
        touching = [c for c in calls[:wait] if c in MEMORY]
        # jit helpers called before the wait must not touch memory either
        assert not touching, f"{name} touches memory ({touching}) before dependent_launch"
        assert not [c for c in calls[:wait] if c in jit and c != "dependent_launch"], f"{name} calls a kernel helper before waiting"
        checked.add(name)
    # every Triton kernel the engine launches is launched with PDL (a new one must decide, and wait)
    kernels = {n for n in jit if n.startswith("_") and n.endswith("_kernel")}
    assert kernels == checked, kernels ^ checked


def test_the_cpu_never_asks_for_pdl():
    assert not decode.pdl(torch.zeros(2))
