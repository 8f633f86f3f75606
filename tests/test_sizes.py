"""Sizes a newcomer can read: no product module passes 500 lines, no function 60.

Product code is every Python file outside tests/: the package (common/llmb) and each recipe's
pretrain script. A function is counted from its `def` line to the last line of its body,
docstring and nested definitions included; a module by its lines. A module that grows past the
bound is split into one named for the capability it gained, a function into steps with names.
"""

from __future__ import annotations

import ast
from pathlib import Path

from paths import REPO

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def product_modules() -> list[Path]:
    return sorted([*(REPO / "common" / "llmb").rglob("*.py"),
                   *(p for p in REPO.glob("*/*.py") if p.parent.name != "tests")])


def test_the_product_modules_are_found():
    names = {p.relative_to(REPO).as_posix() for p in product_modules()}
    assert "common/llmb/analysis/timing.py" in names
    assert "llama3.1/pretrain_llama31.py" in names
    assert not any(name.startswith("tests/") for name in names)


def test_no_module_passes_500_lines():
    long = {p.relative_to(REPO).as_posix(): n for p in product_modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: split each by capability"


def long_functions(source: str) -> dict[str, int]:
    """Each function of `source` longer than the bound, by name (Class.method), with its lines."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        found[name] = lines
                name += "."
            visit(child, name)

    visit(ast.parse(source), "")
    return found


def test_the_function_count_sees_methods_and_nested_functions():
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    source = f"class A:\n    def m(self):\n{body.replace(chr(10), chr(10) + '    ')}\n" \
             f"        def inner():\n" + "\n".join(f"            y{i} = 1" for i in range(61))
    source = source.replace("\n    x", "\n        x")
    assert set(long_functions(source)) == {"A.m", "A.m.inner"}


def test_no_function_passes_60_lines():
    long = {f"{p.relative_to(REPO).as_posix()}: {name}": n for p in product_modules()
            for name, n in long_functions(p.read_text()).items()}
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines: split each into named steps"
