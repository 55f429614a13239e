"""The package layout: imports go down the stages only, and no module imports itself back.

Reads every module's imports with `ast`, function-local ones included, as written (nothing is
imported). The stage order is the one in docs/design.md.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dreamshard"

# Bottom to top. A module may import from its own stage and from stages below it.
STAGES = [
    ("errors", "files", "state", "progress", "report", "_moved"),
    ("tables",),
    ("placement",),
    ("costs",),
    ("learn",),
    ("planners",),
    ("tracking",),
    ("methods",),
    ("evaluation",),
    ("integrations",),
    ("cli",),
]


def module_name(path: Path) -> str:
    parts = ["dreamshard", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(path: Path, known: set[str]) -> set[str]:
    """The package's modules that `path` imports, at module level or inside functions."""
    name = module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `from pkg import name` names pkg
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("dreamshard"):
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imported(path, set(mods)) for name, path in mods.items()}


def stage_of(module: str) -> int:
    if module == "dreamshard":
        return len(STAGES)  # the package's lazy front door sits above everything
    first = module.split(".")[1]
    for rank, names in enumerate(STAGES):
        if first in names:
            return rank
    raise AssertionError(f"{module} is in no stage: add it to STAGES and docs/design.md")


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert circles(graph()) == []


def test_the_circle_finder_finds_a_planted_circle():
    edges = graph()
    edges["dreamshard.placement.tasks"] = edges["dreamshard.placement.tasks"] | {
        "dreamshard.cli.main"
    }
    assert any("dreamshard.placement.tasks" in c for c in circles(edges))


def test_imports_go_down_the_stages():
    upward = [
        f"{importer} -> {target}"
        for importer, targets in graph().items()
        for target in targets
        if target != "dreamshard" and stage_of(target) > stage_of(importer)
    ]
    assert upward == []


def test_only_tracking_imports_mlflow():
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        if any(n.split(".")[0] == "mlflow" for n in names):
            assert name == "dreamshard.tracking", name


def test_every_package_says_what_it_holds_and_may_import():
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc or "may import" in doc, init


def test_old_module_paths_still_import_with_a_warning():
    import importlib
    import sys
    import warnings

    from dreamshard._moved import MOVED

    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        warned = [w for w in caught if issubclass(w.category, DeprecationWarning)]
        assert any(new in str(w.message) for w in warned), old
    # the README's example, as written before the move
    from dreamshard.synthetic import generate_tables

    assert len(generate_tables("dlrm", 3, seed=0)) == 3


GPU_TASKS = PACKAGE.parent / "gpu_tasks"
# What the measurement programs may import from dreamshard: the tables and atomic files. The
# DMP program is a TorchRec training program, at the top of the stack as a user's would be:
# it also turns plans into ShardingPlans with the library's one conversion. Nothing in the
# library imports it.
GPU_TASKS_MAY_IMPORT = ("dreamshard.files", "dreamshard.tables")
PROGRAMS_MAY_IMPORT = {
    "dmp_step.py": ("dreamshard.placement", "dreamshard.integrations.torchrec_export"),
}


def absolute_imports(path: Path) -> set[str]:
    """Every module named by an absolute import in the file, function-local ones included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_measurement_programs_import_only_tables_and_files():
    for path in GPU_TASKS.glob("*.py"):
        allowed = GPU_TASKS_MAY_IMPORT + PROGRAMS_MAY_IMPORT.get(path.name, ())
        for name in absolute_imports(path):
            if name.split(".")[0] == "dreamshard":
                assert any(name == a or name.startswith(a + ".") for a in allowed), (path, name)


def test_the_library_never_imports_the_dmp_program():
    # it imports `integrations`: below it, only programs at the top (benchmarks) may import it
    for root in ("dreamshard", "gpu_tasks", "flows", "dashboard"):
        for path in (PACKAGE.parent / root).rglob("*.py"):
            assert "gpu_tasks.dmp_step" not in absolute_imports(path), path
