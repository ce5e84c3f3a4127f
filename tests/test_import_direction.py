"""The tree's imports point one way: benchmarks → launch → configs → environments → agentrl_jax
(CONTRIBUTING.md, "Layout"), nothing but a launcher imports `launch/`, and no module of the
package imports, at load time, a module that imports it back."""

from __future__ import annotations

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("agentrl_jax", "environments", "configs", "launch", "benchmarks")   # low to high


def _modules(folder: str) -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted((REPO / folder).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: pathlib.Path, *, load_time_only: bool) -> set[str]:
    """The modules `path` imports (every import, or those run when it loads: not inside a
    function, nor under `if TYPE_CHECKING`)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if load_time_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if load_time_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(
                    child.test):
                continue
            if isinstance(child, ast.Import):
                names.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                names.add(child.module)
                names.update(f"{child.module}.{a.name}" for a in child.names)
            visit(child)

    visit(tree)
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_one_above_it(layer):
    above = LAYERS[LAYERS.index(layer) + 1:]
    wrong = sorted(f"{name} imports {imported}"
                   for name, path in _modules(layer).items()
                   for imported in _imports(path, load_time_only=False)
                   if imported.split(".")[0] in above)
    assert not wrong, "\n".join(wrong)


def test_nothing_but_a_launcher_imports_launch():
    wrong = sorted(f"{name} imports {imported}"
                   for layer in LAYERS if layer != "launch"
                   for name, path in _modules(layer).items()
                   for imported in _imports(path, load_time_only=False)
                   if imported.split(".")[0] == "launch")
    assert not wrong, "\n".join(wrong)


def test_the_package_has_no_import_cycle():
    modules = _modules("agentrl_jax")
    graph = {name: {m for m in _imports(path, load_time_only=True) if m in modules and m != name}
             for name, path in modules.items()}
    # A package's __init__ importing its own submodules is how packages are made, not a cycle.
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    cycles = []
    state: dict[str, int] = {}

    def walk(name: str, trail: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                cycles.append(" → ".join(trail[trail.index(nxt):] + [name, nxt])
                              if nxt in trail else f"{name} → {nxt}")
            elif nxt not in state:
                walk(nxt, [*trail, name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [])
    assert not cycles, "\n".join(cycles)
