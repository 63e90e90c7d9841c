"""The import graph and the extras.

The graph's rules (no import circles between siblings; the core, `numloss.losses`, `numloss.digits`
and `numloss.fused`, never imports the layers above it) are import-linter contracts in
pyproject.toml's [tool.importlinter], which `make test` runs (`lint-imports`). Here, on grimp's
graph (import-linter's own), what those contracts do not say: no circle through a package's
`__init__`, each module's imports against the extra that installs them, and, by running them,
that `import numloss` needs torch alone and no `--help` loads torch.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
import tomllib

from numloss.extras import EXTRA_OF, INCLUDES

SRC = Path(__file__).resolve().parents[1] / "src"
PROJECT = tomllib.loads((SRC.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
#: the imports that run (lazy ones included, `if TYPE_CHECKING:` ones not), third-party packages
#: as their top-level names
GRAPH = grimp.build_graph("numloss", include_external_packages=True, exclude_type_checking_imports=True)
OWN = sorted(m for m in GRAPH.modules if m.partition(".")[0] == "numloss")
#: package prefix -> the extra its modules need (the longest prefix decides); every other module is
#: the core, what `pip install numloss` alone gives, and imports nothing an extra installs
MODULE_EXTRA = {
    "numloss.hf": "hf", "numloss.diagnostics": "hf", "numloss.train": "hf", "numloss.config": "hf", "numloss.data": "hf",
    "numloss.models": "hf", "numloss.rundir": "hf", "numloss.checkpoints": "hf", "numloss.bench_cli": "hf",
    "numloss.yamlio": "hf", "numloss.identity": "hf", "numloss.interrupt": "hf",
    "numloss.trl": "trl",
    "numloss.evaluate": "eval",
    "numloss.compare": "compare", "numloss.demo": "compare",
}
#: the imports of a package beyond their module's extra, each optional by design: inside
#: `with needs(EXTRA, ...)` (a missing package is one line naming EXTRA) or a `try` that catches
#: ImportError
OPTIONAL = {("numloss.digits", "tokenizers"), ("numloss.heads", "accelerate"), ("numloss.step_counts", "accelerate"),
            ("numloss.data.gym", "reasoning_gym"), ("numloss.evaluate.generate", "vllm")}
#: import names that a package of an extra brings with it (not listed in pyproject.toml themselves)
COMES_WITH = {"huggingface_hub": "transformers", "safetensors": "transformers", "jinja2": "transformers",
              "pyarrow": "datasets", "yaml": "pyyaml", "annotated_types": "pydantic"}
ALWAYS = {"torch", "numpy"}
#: a process with this environment imports numloss from this checkout and nothing from the user's
CLEAN = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}


def module_extra(module: str) -> str | None:
    """The extra `module` needs (None: the core)."""
    matches = [prefix for prefix in MODULE_EXTRA if module == prefix or module.startswith(prefix + ".")]
    return MODULE_EXTRA[max(matches, key=len)] if matches else None


#: the core's modules (`numloss.__main__` runs the command line when imported)
CORE = [m for m in OWN if module_extra(m) is None and m != "numloss.__main__"]


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()


def closure(extra: str) -> set[str]:
    """`extra` and every extra it stacks on through `numloss[...]` requirements (a cycle: RecursionError)."""
    stacked = [m.group(1).split(",") for r in EXTRAS[extra] if (m := re.fullmatch(r"numloss\[([a-z0-9,]+)\]", r.strip()))]
    return {extra}.union(*(closure(name) for names in stacked for name in names))


def test_the_extras_stack_as_numloss_extras_declares_and_each_installs_its_packages():
    """INCLUDES and EXTRA_OF say what pyproject.toml's extras install; the core needs torch alone;
    requirements are ranges, not exact pins (== only in [test])."""
    for extra in INCLUDES:
        assert closure(extra) == set(INCLUDES[extra]), extra
    assert {requirement_name(r) for r in PROJECT["dependencies"]} == ALWAYS
    for package, extra in EXTRA_OF.items():
        dists = {requirement_name(r) for name in closure(extra) for r in EXTRAS[name]}
        assert package in {d.replace("-", "_") for d in dists} or COMES_WITH.get(package) in dists, package
    pinned = [r for r in PROJECT["dependencies"] + [r for name, rs in EXTRAS.items() if name != "test" for r in rs]
              if "==" in r.partition(";")[0]]
    assert not pinned, "pin ranges, not versions"


def test_every_module_imports_only_what_its_extra_installs():
    """Each module's imports (module level and lazy) of third-party packages and of numloss's
    modules come with its extra, the extras that extra stacks on, or the core; a third-party
    package outside EXTRA_OF would get no one-line error naming its extra."""
    problems = []
    for module in OWN:
        extra = module_extra(module)
        for target in GRAPH.find_modules_directly_imported_by(module):
            top = target.partition(".")[0]
            if top in sys.stdlib_module_names or top in ALWAYS or (module, target) in OPTIONAL:
                continue
            line = GRAPH.get_import_details(importer=module, imported=target)[0]["line_number"]
            needed = module_extra(target) if top == "numloss" else EXTRA_OF.get(target)
            if top != "numloss" and needed is None:
                problems.append(f"{module}:{line} imports {target}, which numloss.extras.EXTRA_OF does not name")
            elif needed and (extra is None or needed not in INCLUDES[extra]):
                problems.append(f"{module}:{line} ([{extra or 'core'}]) imports {target} ([{needed}])")
    assert not problems, "\n".join(problems)


def test_no_import_circle_even_through_a_package_init():
    """acyclic_siblings compares siblings; a circle through a package's `__init__` (p -> p.a -> p)
    is found here: an import `a -> b` where `b` also reaches `a`."""
    circles = [(a, b) for a in OWN for b in GRAPH.find_modules_directly_imported_by(a)
               if b.startswith("numloss") and GRAPH.chain_exists(importer=b, imported=a)]
    assert not circles


def test_help_loads_no_torch_the_core_torch_alone_and_a_missing_extra_is_one_line(monkeypatch):
    """One process without [hf] (transformers cannot be imported): `import numloss`, `numloss --help`
    and `numloss <command> --help` parse their options before loading any model, data or torch
    code; then the core modules load nothing beyond torch and what torch loads itself; the sandbox
    (an evaluator's helper) imports without transformers; `import numloss.hf` and `numloss train`
    say in one line that [hf] is missing. Here: needs() and require() name the extra that installs
    the package."""
    from numloss.cli import COMMANDS
    from numloss.extras import MissingExtraError, needs, require

    monkeypatch.setitem(sys.modules, "transformers", None)  # as in an install without [hf]
    with pytest.raises(MissingExtraError) as caught:
        with needs("trl", "numloss.trl"):
            import transformers  # noqa: F401
    assert str(caught.value).startswith("numloss.trl needs transformers, which is not installed: install numloss with its [trl] extra")
    assert "\n" not in str(caught.value)
    with pytest.raises(MissingExtraError, match=r"needs vllm, which is not installed: install numloss with its \[vllm\] extra"):
        require("eval", "numloss eval --backend vllm", "vllm")  # not part of [eval]: its own extra
    code = ("import contextlib, io, sys\n"
            "sys.modules['transformers'] = None\n"
            "def loaded(): return {m.partition('.')[0] for m, module in sys.modules.items() if module is not None}\n"
            "before = loaded()\n"
            "import numloss; from numloss.cli import main\n"
            f"for argv in [[]] + [[c] for c in {sorted(COMMANDS)!r}]:\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
            "        main(argv + ['--help'])\n"
            "    assert 'usage: numloss' in out.getvalue(), argv\n"
            "print(sorted(loaded() - before))\n"
            "import torch; before = loaded()\n"
            f"import {', '.join(CORE)}\n"
            "print(sorted(loaded() - before))\n"
            "import numloss.evaluate.sandbox\n"
            "from numloss.extras import MissingExtraError\n"
            "try:\n    import numloss.hf\nexcept MissingExtraError as error:\n    print(error)\n"
            "sys.exit(main(['train', 'configs/tiny.yaml']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=CLEAN, cwd=SRC.parent)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("numloss train needs transformers, which is not installed") and "[hf] extra" in out.stderr
    *_, helps, core, hf = out.stdout.splitlines()
    assert re.match(r"numloss.hf needs transformers, which is not installed: .*\[hf\] extra", hf), hf
    helps, core = eval(helps), eval(core)  # printed lists
    heavy = {"transformers", "datasets", "accelerate", "peft", "trl", "scipy", "statsmodels", "matplotlib", "sympy"}
    assert heavy <= set(EXTRA_OF), "the list names packages of the extras"
    assert not set(helps) & (heavy | ALWAYS), f"a --help loads {sorted(set(helps) & (heavy | ALWAYS))}"
    assert not set(core) & set(EXTRA_OF), f"the core loads {sorted(set(core) & set(EXTRA_OF))}"


def test_numloss_and_numloss_evaluate_load_their_public_names_on_first_use():
    """`numloss.X` and `numloss.evaluate.X` are the objects of the submodules that define them,
    `numloss.patch` is the function even once the submodule `numloss.patch` is imported, and the
    losses' names are all there."""
    import numloss
    import numloss.evaluate as evaluate
    import numloss.losses
    import numloss.patch  # noqa: F401 - the submodule (`as` would read the package's attribute)

    for module, names in evaluate._PUBLIC.items():
        for name in names.split():
            assert getattr(evaluate, name) is getattr(importlib.import_module(f"numloss.evaluate.{module}"), name)
    contract = "ProgramResult SandboxLimits SandboxUnavailable isolation run_program run_programs"
    assert set(contract.split()) <= set(evaluate._PUBLIC["sandbox"].split()), "the sandbox's names (docs/sandbox.md)"
    assert set(evaluate.__all__) <= set(dir(evaluate))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        evaluate.nothing_here  # noqa: B018
    patch_module = sys.modules["numloss.patch"]
    assert numloss.patch is patch_module.patch and numloss.unpatch is patch_module.unpatch
    assert set(numloss.losses.__all__) <= set(numloss.__all__) <= set(dir(numloss))
    for name in numloss.__all__:
        assert getattr(numloss, name) is not None
    assert numloss.build_loss is numloss.losses.build_loss
