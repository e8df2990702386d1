"""The layers of DESIGN.md's package table hold: import-linter's contracts in pyproject.toml, no import cycle, and
the cost model loads without the search or the launcher."""

import os
import subprocess
import sys

import grimp
import networkx as nx
from importlinter.cli import lint_imports

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("autodist", "cost_models", "placement", "launcher")


def test_the_import_contracts_are_kept():
    """Every contract of ``[tool.importlinter]`` (the report names the import that breaks one)."""
    assert lint_imports(config_filename=os.path.join(REPO, "pyproject.toml"), no_cache=True, no_logo=True) == 0


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    imports = nx.DiGraph((m, i) for m in graph.modules for i in graph.find_modules_directly_imported_by(m))
    cycles = [sorted(c) for c in nx.strongly_connected_components(imports) if len(c) > 1]
    assert not cycles


def test_importing_the_cost_model_loads_neither_the_search_nor_the_launcher():
    code = "import sys, cost_models; print(sorted({m.split('.')[0] for m in sys.modules} & {'placement', 'launcher'}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_every_folder_of_code_is_a_package_the_contracts_see():
    """A folder of modules without ``__init__.py`` is a namespace package that import-linter does not analyse:
    its imports would break the layers unseen (cost_models/fitting did, importing the simulator and the API)."""
    unseen = []
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(REPO, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if any(f.endswith(".py") for f in files) and "__init__.py" not in files:
                unseen.append(os.path.relpath(folder, REPO))
    assert not unseen
