"""The house rules, checked on the source: no import cycles, no reaching into another module's
underscore names, and serving code never imports training code or tools (issue #13)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "grammars", "app")
SERVING = ("engine.serving", "engine.worker", "engine.model", "engine.kernels", "grammars")
NOT_FOR_SERVING = ("engine.training", "engine.tools", "app")
# Private names of other libraries that the code uses on purpose (documented escape hatches).
# Documented library names that start with an underscore (os._exit, namedtuple's, the enum's, and
# sys._current_frames, which engine.tools.stacks samples).
LIBRARY_PRIVATES = {"_exit", "_asdict", "_replace", "_fields", "_make", "_thread", "_name_", "_value_",
                    "_current_frames",
                    # torch's GEMM with a bias + GELU epilogue (cuBLASLt), the only spelling of that op
                    # (engine.model.layers.linear_gelu); in torch since 1.13, on torch 2.11 and 2.13
                    "_addmm_activation"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(*roots: str) -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            out[module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
    return out


MODULES = sources(*PACKAGES)
TESTS = sources("tests")


def imported(name: str, tree: ast.Module, *, top_level_only: bool) -> set[str]:
    """Project modules that `name` imports (resolving relative imports and `from pkg import mod`)."""
    package = name if (ROOT / name.replace(".", "/") / "__init__.py").exists() else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in MODULES}


def test_no_import_cycles():
    graph = {name: imported(name, tree, top_level_only=True) - {name} for name, (_, tree) in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_serving_code_never_imports_training_or_tools():
    bad = []
    for name, (_, tree) in MODULES.items():
        if name.startswith(SERVING):
            for dep in imported(name, tree, top_level_only=False):
                if dep.startswith(NOT_FOR_SERVING):
                    bad.append(f"{name} imports {dep}")
    assert not bad, bad


def defined_privates(tree: ast.Module) -> set[str]:
    """Underscore names a module defines itself: functions, classes, attributes it assigns."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_")}


def private_uses(tree: ast.Module) -> list[tuple[int, str]]:
    own = defined_privates(tree)
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES + ("tests",):
            uses += [(node.lineno, a.name) for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if node.attr not in own and node.attr not in LIBRARY_PRIVATES:
                uses.append((node.lineno, node.attr))
    return uses


@pytest.mark.parametrize("group", ["package", "tests"])
def test_no_module_uses_another_modules_underscore_names(group):
    modules = MODULES if group == "package" else TESTS
    bad = [f"{path.relative_to(ROOT)}:{line}: {attr}" for name, (path, tree) in modules.items()
           for line, attr in private_uses(tree)]
    assert not bad, "\n".join(bad)


def test_the_checks_can_fail():
    """The AST checks themselves: a planted violation of each rule is caught."""
    planted = ast.parse("import engine.model.image as im\nx = im._geometry\nfrom engine.serving.engine import _x\n")
    assert {a for _, a in private_uses(planted)} == {"_geometry", "_x"}
    own = ast.parse("class A:\n    def _f(self):\n        return self._g\n    def h(self):\n        self._g = 1\n        return self._f()\n")
    assert private_uses(own) == []
