"""The import graph and the extras.

The graph's rules (no import circles; the core, `numloss.losses`, `numloss.digits` and
`numloss.fused`, never imports the layers above it, lazily or for the type checker) are
import-linter contracts in pyproject.toml's [tool.importlinter]; `make test` runs `lint-imports`
and so does this file, which also shows that a broken contract fails it. The rest checks each
module's imports against the extra that installs them.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
import tomllib

SRC = Path(__file__).resolve().parents[1] / "src"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(SRC.parent / "pyproject.toml")],
                          capture_output=True, text=True, cwd=src, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})


def test_the_import_contracts_hold():
    result = _lint_imports(SRC)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_lazy_upward_import_in_the_core_breaks_both_contracts(tmp_path):
    """The core importing the Trainer glue inside a function is upward and closes a circle."""
    src = tmp_path / "a copy"
    shutil.copytree(SRC / "numloss", src / "numloss", ignore=shutil.ignore_patterns("__pycache__"))
    with open(src / "numloss" / "fused.py", "a", encoding="utf-8") as fused:
        fused.write("\n\ndef _upward():\n    from numloss import hf  # noqa: F401\n")
    result = _lint_imports(src)
    assert result.returncode == 1 and "Contracts: 0 kept, 2 broken." in result.stdout, result.stdout + result.stderr
    assert "numloss.fused -> numloss.hf" in result.stdout


def circles(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Every import `a -> b` where `b` also reaches `a`."""
    return [(a, b) for a in sorted(graph.modules) for b in sorted(graph.find_modules_directly_imported_by(a))
            if graph.chain_exists(importer=b, imported=a)]


def test_no_circle_among_the_imports_that_run_even_through_a_package_init():
    """acyclic_siblings compares siblings; a circle through a package's `__init__` is found here."""
    assert not circles(GRAPH)
    graph = grimp.ImportGraph()
    for a, b in [("p", "p.a"), ("p.a", "p.b"), ("p.b", "p")]:
        graph.add_import(importer=a, imported=b)
    assert circles(graph) == [("p", "p.a"), ("p.a", "p.b"), ("p.b", "p")]


# -- the install: the core on torch alone, everything else behind its extra ----------------------------

ROOT = SRC.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
#: every module of numloss -> its file
MODULES = {".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"): p
           for p in sorted((SRC / "numloss").rglob("*.py"))}
#: the imports that run (lazy ones included, `if TYPE_CHECKING:` ones not)
GRAPH = grimp.build_graph("numloss", exclude_type_checking_imports=True)
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
    if module in CORE_MODULES or module.startswith("numloss.losses"):
        return None
    matches = [prefix for prefix in MODULE_EXTRA if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} belongs to no extra: add it to MODULE_EXTRA or CORE_MODULES in tests/test_imports.py"
    return MODULE_EXTRA[max(matches, key=len)]


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()


def closure(extras: dict[str, list[str]], extra: str) -> set[str]:
    """`extra` and every extra it stacks on through `numloss[...]` requirements."""
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
    from numloss.extras import INCLUDES

    for extra in INCLUDES:
        assert closure(EXTRAS, extra) == set(INCLUDES[extra]), extra
    assert {requirement_name(r) for r in PROJECT["dependencies"]} == {"torch", "numpy"}


def test_requirements_are_ranges_not_exact_pins():
    requirements = PROJECT["dependencies"] + [r for name, rs in EXTRAS.items()
                                              if name != "test" for r in rs]
    assert not [r for r in requirements if "==" in r.partition(";")[0]], "pin ranges, not versions (== only in [test])"


def test_every_module_imports_only_what_its_extra_installs():
    """Each module's third-party imports (module level and lazy) come with its extra; a module of
    one extra imports numloss modules of that extra, the extras it stacks on, or the core."""
    from numloss.extras import EXTRA_OF

    problems = []
    for module, path in MODULES.items():
        extra = module_extra(module)
        allowed = installed_imports(EXTRAS, extra) if extra else ALWAYS
        under_needs: dict[str, tuple[str, int]] = {}
        for package, line in third_party_imports(path, under_needs).items():
            if package not in EXTRA_OF and package not in ALWAYS:
                problems.append(f"{module}:{line} imports {package}, which numloss.extras.EXTRA_OF does not name")
            elif package not in allowed:
                problems.append(f"{module}:{line} imports {package}, not installed by [{extra or 'core'}]")
        for package, (named, line) in under_needs.items():
            if package not in installed_imports(EXTRAS, named):
                problems.append(f"{module}:{line} imports {package} under needs({named!r}), which does not install it")
        for target in GRAPH.find_modules_directly_imported_by(module):
            line = GRAPH.get_import_details(importer=module, imported=target)[0]["line_number"]
            needed = module_extra(target)
            if needed and (extra is None or needed not in closure(EXTRAS, extra)):
                problems.append(f"{module}:{line} ([{extra or 'core'}]) imports {target} ([{needed}])")
    assert not problems, "\n".join(problems)


def test_each_package_named_in_extra_of_is_installed_by_that_extra():
    from numloss.extras import EXTRA_OF

    wrong = {package: extra for package, extra in EXTRA_OF.items()
             if extra in EXTRAS and package not in installed_imports(EXTRAS, extra)}
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
    import numloss.evaluate as evaluate

    for module, names in evaluate._PUBLIC.items():
        for name in names.split():
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
    import numloss
    import numloss.losses
    import numloss.patch  # noqa: F401 - the submodule (`as` would read the package's attribute)

    patch_module = sys.modules["numloss.patch"]
    assert numloss.patch is patch_module.patch and numloss.unpatch is patch_module.unpatch
    assert set(numloss.losses.__all__) <= set(numloss.__all__) <= set(dir(numloss))
    for name in numloss.__all__:
        assert getattr(numloss, name) is not None
    assert numloss.build_loss is numloss.losses.build_loss
