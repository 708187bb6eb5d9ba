"""Issue 18: one import namespace, and layers that point one way.

Every module is imported as gpuforge.*; the folders are mapped to those names by pyproject.toml's
package-dir. These tests read the imports of every file (ast, lazy imports inside functions
included) and hold them against the layer order the README states:

    cli -> components -> bootstrap -> core -> common;  validate, policy -> core -> common
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"cli": "gpuforge", "common": "gpuforge.common", "core": "gpuforge.core",
           "components": "gpuforge.components", "bootstrap": "gpuforge.bootstrap",
           "validate": "gpuforge.validate", "policy": "gpuforge.policy"}
# What each layer may import besides itself.
ALLOWED = {
    "common": set(),
    "core": {"common"},
    "bootstrap": {"core", "common"},
    "validate": {"core", "common"},
    "policy": {"core", "common"},
    "components": {"bootstrap", "core", "common"},
    "cli": {"components", "bootstrap", "validate", "policy", "core", "common"},
}
OLD_NAMES = set(FOLDERS)  # the folders' own names: never imported as top-level packages


def _layer(module: str) -> str | None:
    for folder, name in sorted(FOLDERS.items(), key=lambda kv: -len(kv[1])):
        if module == name or module.startswith(name + "."):
            return folder
    return None


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _python_files(*tops: str) -> list[Path]:
    files: list[Path] = []
    for top in tops:
        p = ROOT / top
        files += [p] if p.is_file() else sorted(p.rglob("*.py"))
    return [f for f in files if "__pycache__" not in f.parts]


def test_layers_point_one_way() -> None:
    wrong = []
    for folder in FOLDERS:
        for path in _python_files(folder):
            for line, module in _imports(path):
                target = _layer(module)
                if target is not None and target != folder and target not in ALLOWED[folder]:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({folder} -> {target})")
    assert not wrong, "imports that run against the layer order:\n" + "\n".join(wrong)


def _module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
    return ".".join([FOLDERS[folder], *(parts[:-1] if parts[-1] == "__init__" else parts)])


def _file_graph() -> dict[str, set[str]]:
    """Module -> the gpuforge modules it imports, TYPE_CHECKING and lazy imports included
    (`from pkg import mod` counts as an import of pkg.mod when that is a module)."""
    files = {_module_name(p): p for folder in FOLDERS for p in _python_files(folder)}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            graph[mod] |= {n for n in names if n in files and n != mod}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    scc.append(w)
                    if w == v:
                        break
                if len(scc) > 1:
                    found.append(sorted(scc))
    return sorted(found)


def test_no_circle_of_files() -> None:
    """No two files import each other, directly or round a loop, not even for a type under
    TYPE_CHECKING (an import-graph drawing shows that arrow, and a reader follows it): a stage
    takes a small protocol (validate/stagehost.py), a shared type gets its own module."""
    assert _circles(_file_graph()) == []


def test_the_circle_finder_finds_a_type_checking_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _module_name(ROOT / "core" / "catalog" / "__init__.py") == "gpuforge.core.catalog"
    assert _module_name(ROOT / "cli" / "commands" / "validate.py") == "gpuforge.commands.validate"


def test_no_file_imports_a_folder_by_its_own_name() -> None:
    """`from validate.x import` would load a second copy of every class whenever the repository
    root is on sys.path (Pulumi runs __main__.py from there)."""
    wrong = []
    for path in _python_files(*FOLDERS, "tests", "bench", "scripts", "__main__.py"):
        for line, module in _imports(path):
            if module.split(".")[0] in OLD_NAMES:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_layer_rule_catches_a_back_import(tmp_path: Path) -> None:
    """The checker itself: a validate module importing a Pulumi component is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from gpuforge.components.cluster import GpuCluster\n")
    assert [m for _, m in _imports(bad)] == ["gpuforge.components.cluster"]
    assert _layer("gpuforge.components.cluster") == "components" not in ALLOWED["validate"]
    assert _layer("gpuforge.commands.validate") == "cli"
    assert _layer("gpuforge.validate.runner") == "validate"


@pytest.mark.parametrize("name", sorted(OLD_NAMES))
def test_the_folders_own_names_do_not_import_outside_the_checkout(name: str, tmp_path: Path) -> None:
    """Installed, only gpuforge is importable: no pythonpath or working-directory trick keeps
    `validate` or `components` importable (and so no second copy of a module)."""
    r = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 1 and "ModuleNotFoundError" in r.stderr, (r.returncode, r.stderr)
    r = subprocess.run([sys.executable, "-c", f"import {FOLDERS[name]}"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
