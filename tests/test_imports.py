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

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), runtime)
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
    # lazy imports are read: numloss.train.run imports NumericTrainer inside a function
    assert "numloss.hf" in GRAPH.runtime["numloss.train.run"]


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


# -- the install: the core on torch alone, everything else behind its extra ----------------------------

ROOT = SRC.parent
#: what `pip install numloss` alone gives: these import nothing an extra installs
IMPORTABLE_CORE = ("numloss", "numloss.losses", "numloss.fused", "numloss.patch", "numloss.digits",
                   "numloss.heads", "numloss.step_counts", "numloss.extras", "numloss.cli", "numloss.package_data",
                   # standard-library helpers the parts share
                   "numloss.atomic", "numloss.textio", "numloss.checks")
CORE_MODULES = (*IMPORTABLE_CORE, "numloss.__main__")
#: package prefix -> the extra its modules need (the longest prefix decides; the core needs none)
MODULE_EXTRA = {
    "numloss.hf": "hf", "numloss.diagnostics": "hf", "numloss.train": "hf", "numloss.config": "hf", "numloss.data": "hf",
    "numloss.models": "hf", "numloss.rundir": "hf", "numloss.checkpoints": "hf", "numloss.bench_cli": "hf",
    "numloss.yamlio": "hf", "numloss.identity": "hf", "numloss.interrupt": "hf",
    "numloss.trl": "trl",
    "numloss.evaluate": "eval",
    "numloss.compare": "compare", "numloss.demo": "compare",
}
#: import names that a package of an extra brings with it (not listed in pyproject.toml themselves)
COMES_WITH = {"huggingface_hub": "transformers", "safetensors": "transformers", "jinja2": "transformers",
              "pyarrow": "datasets", "yaml": "pyyaml", "annotated_types": "pydantic"}
ALWAYS = {"torch", "numpy"}


def module_extra(module: str) -> str | None:
    """The extra `module` needs (None: the core)."""
    if module in CORE_MODULES or _in(module, ("numloss.losses",)):
        return None
    matches = [prefix for prefix in MODULE_EXTRA if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} belongs to no extra: add it to MODULE_EXTRA or CORE_MODULES in tests/test_imports.py"
    return MODULE_EXTRA[max(matches, key=len)]


def pyproject_extras() -> dict[str, list[str]]:
    """[project.optional-dependencies] of pyproject.toml, requirement strings per extra."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def requirement_name(requirement: str) -> str:
    import re

    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()


def closure(extras: dict[str, list[str]], extra: str) -> set[str]:
    """`extra` and every extra it stacks on through `numloss[...]` requirements."""
    import re

    found, todo = set(), [extra]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        for requirement in extras[name]:
            if (m := re.fullmatch(r"numloss\[([a-z0-9,]+)\]", requirement.strip())):
                todo += m.group(1).split(",")
    return found


def installed_imports(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The import names an install with `extra` provides (its stacked extras' packages included)."""
    dists = {requirement_name(r) for name in closure(extras, extra) for r in extras[name]} - {"numloss"}
    names = {d.replace("-", "_") for d in dists}
    return names | ALWAYS | {module for module, dist in COMES_WITH.items() if dist in dists}


def _needs_blocks(tree: ast.AST) -> dict[int, str]:
    """Line of each import inside `with needs(EXTRA, ...):` -> EXTRA (numloss.extras.needs)."""
    lines: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if (isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) == "needs"
                        and call.args and isinstance(call.args[0], ast.Constant)):
                    for statement in node.body:
                        lines |= {n.lineno: call.args[0].value for n in ast.walk(statement)
                                  if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def _guarded(tree: ast.AST) -> set[int]:
    """Lines of imports inside `try:` blocks that catch ImportError: optional by design."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            h.type is not None and any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError")
                                       for n in ast.walk(h.type))
            for h in node.handlers
        ):
            for statement in node.body:
                lines |= {n.lineno for n in ast.walk(statement) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def third_party_imports(path: Path, under_needs: dict[str, tuple[str, int]] | None = None) -> dict[str, int]:
    """Top-level package -> first line of every import of a package outside numloss and the
    standard library in `path` (module level and inside functions), leaving out the optional ones
    (inside a `try` that catches ImportError) and those inside `with needs(EXTRA, ...)`, which go
    to `under_needs` as package -> (EXTRA, line)."""
    import sys

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    guarded, needs = _guarded(tree), _needs_blocks(tree)
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in guarded:
            continue
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
        for name in names:
            top = name.partition(".")[0]
            if top in sys.stdlib_module_names or top in ("numloss", "__future__"):
                continue
            if node.lineno in needs:
                if under_needs is not None:
                    under_needs.setdefault(top, (needs[node.lineno], node.lineno))
            else:
                found.setdefault(top, node.lineno)
    return found


def test_the_extras_stack_as_numloss_extras_declares_and_the_core_needs_torch_alone():
    import tomllib

    from numloss.extras import INCLUDES

    extras = pyproject_extras()
    for extra in INCLUDES:
        assert closure(extras, extra) == set(INCLUDES[extra]), extra
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {requirement_name(r) for r in core} == {"torch", "numpy"}


def test_requirements_are_ranges_not_exact_pins():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for name, rs in project["optional-dependencies"].items()
                                              if name != "test" for r in rs]
    assert not [r for r in requirements if "==" in r.partition(";")[0]], "pin ranges, not versions (== only in [test])"


def test_every_module_imports_only_what_its_extra_installs():
    """Each module's third-party imports (module level and lazy) come with its extra; a module of
    one extra imports numloss modules of that extra, the extras it stacks on, or the core."""
    from numloss.extras import EXTRA_OF

    extras = pyproject_extras()
    problems = []
    for module, path in GRAPH.modules.items():
        extra = module_extra(module)
        allowed = installed_imports(extras, extra) if extra else ALWAYS
        under_needs: dict[str, tuple[str, int]] = {}
        for package, line in third_party_imports(path, under_needs).items():
            if package not in EXTRA_OF and package not in ALWAYS:
                problems.append(f"{module}:{line} imports {package}, which numloss.extras.EXTRA_OF does not name")
            elif package not in allowed:
                problems.append(f"{module}:{line} imports {package}, not installed by [{extra or 'core'}]")
        for package, (named, line) in under_needs.items():
            if package not in installed_imports(extras, named):
                problems.append(f"{module}:{line} imports {package} under needs({named!r}), which does not install it")
        for target, line in GRAPH.runtime[module].items():
            needed = module_extra(target)
            if needed and (extra is None or needed not in closure(extras, extra)):
                problems.append(f"{module}:{line} ([{extra or 'core'}]) imports {target} ([{needed}])")
    assert not problems, "\n".join(problems)


def test_each_package_named_in_extra_of_is_installed_by_that_extra():
    from numloss.extras import EXTRA_OF

    extras = pyproject_extras()
    wrong = {package: extra for package, extra in EXTRA_OF.items()
             if extra in extras and package not in installed_imports(extras, extra)}
    assert not wrong, wrong


def test_the_checker_sees_lazy_imports_and_skips_guarded_ones(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\nimport torch\ndef f():\n    from transformers import Trainer\n"
                    "try:\n    import vllm\nexcept ImportError:\n    vllm = None\n"
                    "with needs('trl', 'x'):\n    import trl\n")
    under_needs: dict[str, tuple[str, int]] = {}
    assert third_party_imports(path, under_needs) == {"torch": 2, "transformers": 4}
    assert under_needs == {"trl": ("trl", 10)}
    assert module_extra("numloss.evaluate.sandbox.bwrap") == "eval" and module_extra("numloss.losses.del") is None
    assert "transformers" not in installed_imports({"core": []}, "core")


def test_importing_the_core_loads_no_package_an_extra_installs():
    """`import numloss` and the core modules load nothing beyond torch and what torch loads itself."""
    import subprocess
    import sys

    from numloss.extras import EXTRA_OF

    code = ("import sys; torch_loads = {m.partition('.')[0] for m in sys.modules}; import torch; "
            "torch_loads |= {m.partition('.')[0] for m in sys.modules}; "
            f"import {', '.join(IMPORTABLE_CORE)}; "
            "print(sorted({m.partition('.')[0] for m in sys.modules} - torch_loads))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    loaded = set(eval(out.stdout.strip()))  # a printed list of names
    assert "numloss" in loaded
    assert not loaded & set(EXTRA_OF), f"the core loads {sorted(loaded & set(EXTRA_OF))}"
    assert not [m for m in loaded if m.startswith("numloss.") and module_extra(m)], loaded


def test_a_missing_extra_is_one_line_naming_it(monkeypatch, capsys):
    import importlib
    import sys

    from numloss.cli import main
    from numloss.extras import MissingExtraError, needs, require

    monkeypatch.setitem(sys.modules, "transformers", None)  # as in an install without [hf]
    with pytest.raises(MissingExtraError) as caught:
        with needs("trl", "numloss.trl"):
            import transformers  # noqa: F401
    assert str(caught.value).startswith("numloss.trl needs transformers, which is not installed: install numloss with its [trl] extra")
    assert "\n" not in str(caught.value)
    with pytest.raises(MissingExtraError, match=r"needs vllm, which is not installed: install numloss with its \[vllm\] extra"):
        require("eval", "numloss eval --backend vllm", "vllm")  # not part of [eval]: its own extra
    monkeypatch.delitem(sys.modules, "numloss.hf", raising=False)
    with pytest.raises(MissingExtraError, match=r"^numloss.hf needs transformers.*\[hf\] extra"):
        importlib.import_module("numloss.hf")
    for module in [m for m in list(sys.modules) if m.startswith(("numloss.train", "numloss.models", "numloss.config"))]:
        # a re-import binds the fresh module on its parent package too (`import numloss.config as c`
        # reads that attribute): put the old one back with the sys.modules entry, or later tests
        # hold two ConfigError classes
        parent, _, name = module.rpartition(".")
        if hasattr(sys.modules.get(parent), name):
            monkeypatch.setattr(sys.modules[parent], name, getattr(sys.modules[parent], name))
        monkeypatch.delitem(sys.modules, module)
    assert main(["train", "configs/tiny.yaml"]) == 2
    err = capsys.readouterr().err
    # the feature named is where the import failed (numloss train, or numloss.models in a process whose
    # transformers submodules stay cached from earlier tests): one line naming the package and the extra
    assert err.count("\n") == 1 and "needs transformers, which is not installed" in err and "[hf] extra" in err, err


def test_numloss_evaluate_loads_its_parts_on_first_use():
    """Every public name of numloss.evaluate resolves to its submodule's object, and a process that
    imports only the sandbox (an evaluator's helper, a test's evaluator) does not load transformers."""
    import importlib
    import subprocess
    import sys

    import numloss.evaluate as evaluate

    for module, names in evaluate._PUBLIC.items():
        for name in names:
            assert getattr(evaluate, name) is getattr(importlib.import_module(f"numloss.evaluate.{module}"), name)
    assert set(evaluate.__all__) <= set(dir(evaluate))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        evaluate.nothing_here  # noqa: B018
    code = "import sys, numloss.evaluate.sandbox; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "False", out.stderr


def test_every_commands_help_loads_no_torch_and_no_package_of_an_extra():
    """`import numloss`, `numloss --help` and `numloss <command> --help` parse their options before
    loading any model, data or torch code: one process runs every help and lists what it loaded."""
    import subprocess
    import sys

    from numloss.cli import COMMANDS
    from numloss.extras import EXTRA_OF

    code = ("import contextlib, io, sys; before = {m.partition('.')[0] for m in sys.modules}\n"
            "import numloss; from numloss.cli import main\n"
            f"for argv in [[]] + [[c] for c in {sorted(COMMANDS)!r}]:\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "        try:\n"
            "            main(argv + ['--help'])\n"
            "        except SystemExit:\n"
            "            pass\n"
            "    assert 'usage: numloss' in out.getvalue(), argv\n"
            "print(sorted({m.partition('.')[0] for m in sys.modules} - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    loaded = set(eval(out.stdout.strip().splitlines()[-1]))
    heavy = {"transformers", "datasets", "accelerate", "peft", "trl", "scipy", "statsmodels", "matplotlib", "sympy"}
    assert heavy <= set(EXTRA_OF), "the list names packages of the extras"
    assert not loaded & (heavy | {"torch", "numpy"}), f"a --help loads {sorted(loaded & (heavy | {'torch', 'numpy'}))}"


def test_numloss_loads_its_public_names_on_first_use():
    """`numloss.X` is the object of the submodule that defines it, `numloss.patch` is the function
    even once the submodule `numloss.patch` is imported, and the losses' names are all there."""
    import sys

    import numloss
    import numloss.losses
    import numloss.patch  # noqa: F401 - the submodule (`as` would read the package's attribute)

    patch_module = sys.modules["numloss.patch"]
    assert numloss.patch is patch_module.patch and numloss.unpatch is patch_module.unpatch
    assert set(numloss.losses.__all__) <= set(numloss.__all__) <= set(dir(numloss))
    for name in numloss.__all__:
        assert getattr(numloss, name) is not None
    assert numloss.build_loss is numloss.losses.build_loss
