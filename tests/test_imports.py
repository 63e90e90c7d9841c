"""The import graph of numloss, read statically: no circles, and the core never imports upward.

Every module of the package is parsed (ast, nothing is imported) and every import is an edge:
module level, inside functions and methods (lazy imports), `importlib.import_module("numloss...")`
with a literal name. `from pkg import name` is an edge to `pkg.name` when that is a module, else to
`pkg` (its `__init__`). Imports under `if TYPE_CHECKING:` never run; they are edges for the
layering rule (the core must not even name the glue's types) but not for circles (a function may
name, for the type checker, the type it takes from the module that owns it).

* no circle: the graph of executed imports is acyclic (a circle is a module holding two jobs);
* layering: no module of `numloss.losses`, `numloss.digits` or `numloss.fused` (the core, what
  `import numloss` loads) imports, directly or through other modules, the Trainer glue, the
  pipelines or the command line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

CORE = ("numloss.losses", "numloss.digits", "numloss.fused")
ABOVE_THE_CORE = (
    "numloss.hf",
    "numloss.patch",
    "numloss.trl",
    "numloss.heads",
    "numloss.step_counts",
    "numloss.train",
    "numloss.evaluate",
    "numloss.compare",
    "numloss.data",
    "numloss.models",
    "numloss.cli",
    "numloss.config",
    "numloss.demo",
)


@dataclass
class Graph:
    modules: dict[str, Path]
    #: executed imports (module level and lazy), module -> {module: line}
    runtime: dict[str, dict[str, int]] = field(default_factory=dict)
    #: imports under `if TYPE_CHECKING:`
    typing_only: dict[str, dict[str, int]] = field(default_factory=dict)

    def edges(self, with_typing: bool) -> dict[str, set[str]]:
        return {
            m: set(self.runtime.get(m, {})) | (set(self.typing_only.get(m, {})) if with_typing else set())
            for m in self.modules
        }


def _module_names(root: Path, package: str) -> dict[str, Path]:
    names = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_of(name: str, path: Path, modules: dict[str, Path]) -> tuple[dict[str, int], dict[str, int]]:
    """(executed imports, TYPE_CHECKING imports) of module `name`, each {module: first line}."""
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    runtime: dict[str, int] = {}
    typing_only: dict[str, int] = {}

    def add(target: str | None, line: int, into: dict[str, int]) -> None:
        # the longest prefix of `target` that is a module of the package
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            into.setdefault(target, line)

    def visit(node: ast.AST, into: dict[str, int]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    visit_statement(statement, typing_only)
                for statement in child.orelse:
                    visit_statement(statement, into)
                continue
            visit_statement(child, into)

    def visit_statement(node: ast.AST, into: dict[str, int]) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, into)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                add(submodule if submodule in modules else source, node.lineno, into)
        elif isinstance(node, ast.Call):
            callee = node.func
            called = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            if called in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    add(first.value, node.lineno, into)
        visit(node, into)

    visit(ast.parse(path.read_text(), filename=str(path)), runtime)
    return runtime, typing_only


def import_graph(root: Path = SRC, package: str = "numloss") -> Graph:
    """The import graph of every module of `package` under `root`, parsed, nothing imported."""
    graph = Graph(_module_names(root, package))
    for name, path in graph.modules.items():
        graph.runtime[name], graph.typing_only[name] = _imports_of(name, path, graph.modules)
    return graph


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def _describe(graph: Graph, component: list[str]) -> str:
    lines = []
    for module in component:
        for target, line in sorted(graph.runtime[module].items()):
            if target in component:
                lines.append(f"{module} -> {target} ({graph.modules[module].relative_to(SRC)}:{line})")
    return "; ".join(lines)


def reachable(edges: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Every module reachable from `start`, with one path to it."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop()
        for child in sorted(edges[node]):
            if child not in paths:
                paths[child] = paths[node] + [child]
                frontier.append(child)
    return paths


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


# -- the package -----------------------------------------------------------------------------------

GRAPH = import_graph()


def test_the_graph_sees_the_whole_package():
    assert len(GRAPH.modules) > 50
    for module in ("numloss.hf", "numloss.patch", "numloss.heads", "numloss.losses.base",
                   "numloss.compare.runner", "numloss.compare.report", "numloss.evaluate.api"):
        assert module in GRAPH.modules
    # lazy imports are read: numloss.train imports NumericTrainer inside a function
    assert "numloss.hf" in GRAPH.runtime["numloss.train"]


def test_no_import_circles():
    cycles = find_cycles(GRAPH.edges(with_typing=False))
    assert not cycles, "import circles: " + " | ".join(_describe(GRAPH, c) for c in cycles)


@pytest.mark.parametrize("module", sorted(m for m in GRAPH.modules if _in(m, CORE)))
def test_the_core_imports_nothing_above_it(module):
    """Also lazily and for the type checker: the objectives do not know the Trainer glue."""
    paths = reachable(GRAPH.edges(with_typing=True), module)
    upward = {target: path for target, path in paths.items() if _in(target, ABOVE_THE_CORE)}
    assert not upward, f"{module} reaches " + "; ".join(" -> ".join(p) for p in upward.values())


@pytest.mark.parametrize("a, b", [
    ("numloss.hf", "numloss.patch"),
    ("numloss.compare.runner", "numloss.compare.report"),
    ("numloss.evaluate.api", "numloss.evaluate.report"),
])
def test_the_pairs_that_were_circles_are_one_way_even_for_the_type_checker(a, b):
    edges = GRAPH.edges(with_typing=True)
    assert not (b in reachable(edges, a) and a in reachable(edges, b)), f"{a} and {b} reach each other"


def test_hf_and_patch_share_the_head_helpers_instead_of_importing_each_other():
    assert "numloss.hf" not in reachable(GRAPH.edges(with_typing=True), "numloss.patch")
    assert "numloss.heads" in GRAPH.runtime["numloss.patch"] and "numloss.heads" in GRAPH.runtime["numloss.hf"]


# -- the checker itself can fail ---------------------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_lazy_relative_and_importlib_circles_and_typing_edges(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg.b import g\n",
        "pkg/b.py": "from . import c\ng = 1\n",
        "pkg/c.py": "import importlib\ndef h():\n    importlib.import_module('pkg.a')\n",
        "pkg/sub/__init__.py": "from pkg.sub.x import y\n",
        "pkg/sub/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\ny = 1\n",
        "pkg/d.py": "from pkg import sub\nfrom pkg.sub import y\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert find_cycles(graph.edges(with_typing=False)) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert graph.typing_only["pkg.sub.x"] == {"pkg.a": 3} and "pkg.a" not in graph.runtime["pkg.sub.x"]
    assert set(graph.runtime["pkg.d"]) == {"pkg.sub"}
    assert reachable(graph.edges(with_typing=True), "pkg.sub.x")["pkg.c"] == ["pkg.sub.x", "pkg.a", "pkg.b", "pkg.c"]


def test_import_numloss_loads_no_trainer_stack():
    """`import numloss` (the losses, the patch) loads neither transformers nor accelerate nor the glue."""
    import subprocess
    import sys

    code = "import sys, numloss; print(sorted(m for m in ('transformers', 'accelerate', 'numloss.hf', 'trl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
