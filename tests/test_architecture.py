"""The layers of rl_lightning import downward only, and no module imports another of the package
inside a function (the usual way to dodge an import cycle). docs/architecture.md draws the layers."""

import ast
import re
from pathlib import Path

import gymnasium as gym
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rl_lightning"

# Each layer may import the layers below it (and modules of its own layer's package).
LAYERS = [
    {"errors"},
    {"validation"},  # the validators of arguments and config fields, which every layer above uses
    {"envs", "networks", "cuda_graphs", "optim", "config", "seeding"},
    {"data", "exploration"},
    {"evaluation", "export", "checkpointing", "training_log"},
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


def test_no_module_outside_envs_branches_on_an_env_backend():
    """One env-backend interface: what differs between gymnasium, torch and envpool envs is decided in
    ``envs/`` (``make_vector_env``, ``steps_on_device``, ``eval_env_config``, ``frame_stack``), so a new
    backend touches only ``envs/``."""
    pattern = re.compile(
        r"backend\s*(==|!=|\bin\b|\bnot in\b)\s*[\"'(]|isinstance\([^)]*(TorchVectorEnv|EnvpoolVectorEnv)|is_atari\("
    )
    offenders = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in MODULES
        if component(path) != "envs"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, offenders


def test_only_the_registry_knows_the_backends():
    """``make.py`` looks every backend up in ``envs/backends.py``'s ``BACKENDS`` and its code names none
    (no backend's name as a string, no backend's env class or module): a fourth backend is one new
    module implementing ``EnvBackend`` and one registry line."""
    from rl_lightning.envs.backend import EnvBackend
    from rl_lightning.envs.backends import BACKENDS

    tree = ast.parse((PACKAGE / "envs" / "make.py").read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & set(BACKENDS), f"make.py names backends {strings & set(BACKENDS)}"
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    backend_specific = {"TorchVectorEnv", "EnvpoolVectorEnv", "AsyncVectorEnv", "SyncVectorEnv", "make_torch_env"}
    assert not names & backend_specific, names & backend_specific
    assert modules & {f"rl_lightning.envs.{m}" for m in ("torch", "envpool_backend", "gymnasium_backend")} == set()
    for name, backend in BACKENDS.items():
        assert isinstance(backend, EnvBackend) and backend.name == name
    assert len({type(b).__module__ for b in BACKENDS.values()}) == len(BACKENDS), "one module per backend"


def test_every_algorithm_builds_an_experience_side_on_the_one_protocol():
    from rl_lightning import EnvConfig
    from rl_lightning.data.experience import ExperienceSide
    from tests.helpers import ALGORITHMS

    for cls in ALGORITHMS:
        env = "CartPole-v1" if gym.spaces.Discrete in cls.action_spaces else "Pendulum-v1"
        model = cls(env=EnvConfig(env, num_envs=1))
        model.build_for_env()
        assert isinstance(model.experience, ExperienceSide), cls.__name__


def test_the_base_class_reads_no_algorithm_hyperparameter_by_name():
    source = (PACKAGE / "algorithms" / "base.py").read_text()
    assert not re.findall(r"hparams(\.get\(|\[|\.)\s*[\"']?\w", source.replace("self.hparams)", "")), (
        "RLModule must not read an algorithm's hyperparameters (hparams.x / hparams.get('x'))"
    )


# ------------------------------------------------------------------------ outside the package
# Test modules share fixtures and helpers through tests/conftest.py and tests/helpers.py, never by
# importing each other; benchmark scripts share theirs through benchmarks/common.py only.
TESTS = Path(__file__).resolve().parent
TEST_MODULES = sorted(TESTS.rglob("*.py"))
BENCHMARKS = PACKAGE.parent / "benchmarks"
BENCHMARK_SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def imported_names(tree: ast.AST) -> list[tuple[str, int]]:
    """``(module, line)`` for every module an import names: ``import a.b``, ``from a import b`` (``a``
    and ``a.b``: ``b`` may be a module), relative ones with their dots (``from . import b``: ``.b``),
    and ``importlib.import_module`` / ``__import__`` of a literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.append((base, node.lineno))
            sep = "." if node.module else ""
            found += [(f"{base}{sep}{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if func in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.args[0].value, node.lineno))
    return found


def names_a_test_module(name: str) -> bool:
    """``tests.test_x``, ``.test_x`` (relative, from inside tests/) or ``test_x`` (tests/ on sys.path)."""
    parts = name.lstrip(".").split(".")
    if not name.startswith(".") and parts[0] == "tests":
        parts = parts[1:]
    return bool(parts) and parts[0].startswith("test_")


@pytest.mark.parametrize("path", TEST_MODULES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path):
    tree = ast.parse(path.read_text())
    found = sorted({f"{name} (line {line})" for name, line in imported_names(tree) if names_a_test_module(name)})
    assert not found, f"imports a test module (share it through tests/helpers.py or conftest.py): {found}"


@pytest.mark.parametrize("path", BENCHMARK_SCRIPTS, ids=lambda p: p.name)
def test_benchmark_scripts_import_no_other_script_than_common(path):
    others = {p.stem for p in BENCHMARK_SCRIPTS} - {"common", path.stem}
    tree = ast.parse(path.read_text())
    found = set()
    for name, line in imported_names(tree):
        parts = name.lstrip(".").split(".")
        module = parts[1] if parts[0] == "benchmarks" and len(parts) > 1 else parts[0]
        if module in others:
            found.add(f"{name} (line {line})")
    assert not found, f"imports another benchmark script (share it through benchmarks/common.py): {sorted(found)}"
