"""The layers of rl_lightning import downward only, and no module imports another of the package
inside a function (the usual way to dodge an import cycle). docs/architecture.md draws the layers."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rl_lightning"

# Each layer may import the layers below it (and modules of its own layer's package).
LAYERS = [
    {"errors"},
    {"validation"},  # the validators of arguments and config fields, which every layer above uses
    {"envs", "networks", "cuda_graphs"},
    {"data", "config", "exploration"},
    {"evaluation", "export", "checkpointing"},
    {"callbacks", "plotting"},  # use an algorithm through its public methods, never import one
    {"algorithms"},
    {"tune"},  # rl-lightning tune: fits through a function the CLI passes in
    {"cli", "__init__"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
MODULES = sorted(PACKAGE.rglob("*.py"))


def component(module_path: Path) -> str:
    return module_path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imported_components(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rl_lightning"):
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("rl_lightning")]
        for name in names:
            parts = name.split(".")
            if len(parts) > 1:
                found.append((parts[1], node))
    return found


def test_every_component_has_a_layer():
    assert {component(p) for p in MODULES} <= set(RANK)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path):
    tree = ast.parse(path.read_text())
    mine = component(path)
    upward = [f"{name} (line {node.lineno})" for name, node in imported_components(tree) if RANK[name] > RANK[mine]]
    sideways = [
        f"{name} (line {node.lineno})"
        for name, node in imported_components(tree)
        if RANK[name] == RANK[mine] and name != mine
    ]
    assert not upward, f"{mine} imports a layer above it: {upward}"
    assert not sideways, f"{mine} imports a component of its own layer: {sideways}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_package_import_inside_a_function(path):
    tree = ast.parse(path.read_text())
    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
    local = sorted({node.lineno for f in functions for _, node in imported_components(f)})
    assert not local, f"rl_lightning imported inside a function at lines {local}"
