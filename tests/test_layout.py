"""The package layout: imports go down the stages only, and no module imports itself back.

Reads every module's imports with `ast`, function-local ones included, as written (nothing is
imported). The stage order is the one in docs/design.md.
"""

import ast
import re
import subprocess
from pathlib import Path

from dreamshard.placement.tasks import PlacementTask

PACKAGE = Path(__file__).resolve().parents[1] / "dreamshard"

# Bottom to top. A module may import from its own stage and from stages below it.
STAGES = [
    ("errors", "files", "state", "progress", "report", "lazy", "_moved"),
    ("tables",),
    ("placement",),
    ("costs",),
    ("learn",),
    ("planners",),
    ("tracking",),
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

    from dreamshard._moved import MOVED, MOVED_NAMES

    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        target = importlib.import_module(new)
        if old in MOVED_NAMES:  # a stand-in: the new module's names, and those that went elsewhere
            for name in (n for n in vars(target) if not n.startswith("__")):
                assert getattr(module, name) is getattr(target, name), (old, name)
            for name, home in MOVED_NAMES[old].items():
                assert getattr(module, name) is getattr(importlib.import_module(home), name)
        else:
            assert module is target, old
        warned = [w for w in caught if issubclass(w.category, DeprecationWarning)]
        assert any(new in str(w.message) for w in warned), old
    # the README's example, as written before the move
    from dreamshard.synthetic import generate_tables

    assert len(generate_tables("dlrm", 3, seed=0)) == 3


def test_code_written_before_the_registry_still_places(tmp_path):
    import warnings

    from dreamshard.tables.synthetic import generate_tables

    tables = generate_tables("dlrm", 12, seed=1)
    task = PlacementTask(tuple(tables), 3, 2 * max(t.bytes("fp16") for t in tables) * 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from dreamshard.methods import METHODS, place, resolve_model

        from dreamshard import PLANNERS

    assert set(PLANNERS) == {"random", "dim", "size", "lookup", "size_lookup"}
    assert {"dreamshard", "rnn", "torchrec", *PLANNERS} <= set(METHODS)
    assert PLANNERS["lookup"](task, 0).devices == place(task, "lookup", split="none").devices
    assert "shipped" in resolve_model(None).metadata  # no model given: the package's own


PROGRAMS = "gpu_tasks"  # what torchrun launches: at the top of the stack, beside the CLI


def absolute_imports(path: Path) -> set[str]:
    """Every module named by an absolute import in the file, function-local ones included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_the_library_flows_and_dashboard_never_import_the_programs():
    # the library starts them by module name under torchrun (`costs.torchrun`); the programs
    # import the library, so an import the other way would close a circle
    for root in ("dreamshard", "flows", "dashboard"):
        for path in (PACKAGE.parent / root).rglob("*.py"):
            found = {name for name in absolute_imports(path) if name.split(".")[0] == PROGRAMS}
            assert found == set(), path


def test_the_programs_folder_holds_programs_only():
    # every module but the package's own is a program torchrun starts (`main` under __main__)
    for path in (PACKAGE.parent / PROGRAMS).glob("*.py"):
        if path.name != "__init__.py":
            assert 'if __name__ == "__main__":' in path.read_text(), path


# --- the docs say where things are ----------------------------------------------------------

ROOT = PACKAGE.parent
PATH_TOKEN = re.compile(r"(?<![\w/.:-])((?:[\w-]+/)*[\w-]+\.(?:py|md))(?![\w/])")
# where a path a file names may be relative to
PATH_BASES = ("", "dreamshard", "docs", "dashboard", "benchmarks/results")


def named_paths(text: str) -> set[str]:
    """Paths of this repository a text names: `dir/file.py` or `dir/file.md` under a folder of
    the repository or a package of the library, and the top-level `README.md`-style docs."""
    folders = {p.name for p in ROOT.iterdir() if p.is_dir()} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir()
    }
    found = set()
    for match in PATH_TOKEN.finditer(text):
        token, stem = match.group(1), Path(match.group(1)).stem
        if re.search(r"--[\w-]+[ =]$", text[: match.start()]):
            continue  # an option's placeholder in a usage line (`--out REPORT.md`)
        if "/" in token and token.split("/")[0] in folders and not stem.isupper():
            found.add(token)  # an upper-case stem is a placeholder (benchmarks/NAME.py)
        elif "/" not in token and token.endswith(".md") and stem.isupper():
            found.add(token)
    return found


# a path named with the commit that holds it: "`benchmarks/results/X.md` at commit abc1234", or
# "... are in git history at commit abc1234" within the sentence that follows it
AT_COMMIT = re.compile(r"\bat\s+commits?\s+([0-9a-f]{7,40})\b")


def in_history(text: str, token: str) -> bool:
    """Whether `text` names `token` somewhere with a commit (AT_COMMIT, within 240 characters
    after it) whose tree holds it: a report retired from the tree but quoted from git history."""
    for match in re.finditer(re.escape(token), text):
        said = AT_COMMIT.search(text[match.end() : match.end() + 240])
        if said is None:
            continue
        found = subprocess.run(
            ["git", "cat-file", "-e", f"{said.group(1)}:{token}"], cwd=ROOT, capture_output=True
        )
        if found.returncode == 0:
            return True
    return False


def test_no_file_names_a_missing_file():
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]  # CHANGELOG.md is history
    for folder in ("dreamshard", "benchmarks", "tests", "flows", "dashboard", "gpu_tasks"):
        texts += (ROOT / folder).rglob("*.py")
    missing = [
        f"{path.relative_to(ROOT)}: {token}"
        for path in texts
        for text in [path.read_text()]
        for token in sorted(named_paths(text))
        if not any((ROOT / base / token).exists() for base in PATH_BASES)
        and not (path.parent / token).exists()
        and not in_history(text, token)
    ]
    assert missing == []


def test_a_path_from_history_needs_the_commit_that_holds_it():
    report = "benchmarks/results/{}.md".format("scale_study_rq5")  # spelt apart, as above
    assert in_history(f"`{report}` at commit ea3bb69: 1.94x", report)
    assert not in_history(f"`{report}` at commit a5064d5", report)  # the first commit: none yet
    assert not in_history(f"`{report}`, a report once", report)


def test_the_path_check_finds_a_missing_file():
    gone = "{}.md", "planners/{}.py"  # spelt apart, so that this file names neither
    text = f"see {gone[0].format('DESIGN')} and `{gone[1].format('gone')}`, --out REPORT.md, x/y.py"
    assert named_paths(text) == {gone[0].format("DESIGN"), gone[1].format("gone")}


def test_every_package_docstring_names_its_modules():
    for init in [PACKAGE / "__init__.py", *PACKAGE.glob("*/__init__.py")]:
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        here = init.parent
        names = [p.stem for p in here.glob("*.py") if p.stem != "__init__"]
        names += [p.name for p in here.iterdir() if (p / "__init__.py").is_file()]
        unnamed = [name for name in names if f"`{name}`" not in doc]
        assert unnamed == [], init


# --- the study wing (benchmarks/): a third of the library at most, small files, no tangles ----

STUDIES = ROOT / "benchmarks"
STUDY_SHARE, STUDY_FILE_LINES = 0.35, 250
# what a study may import of the wing: the contract, the runner, the records and the parts
STUDY_SHARED = {"benchmarks", "benchmarks.study", "benchmarks.runner", "benchmarks.record"}


def lines(paths) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths)


def test_the_studies_stay_a_third_of_the_library_in_small_files():
    study_files = sorted(STUDIES.rglob("*.py"))
    share = lines(study_files) / lines(PACKAGE.rglob("*.py"))
    assert share <= STUDY_SHARE, f"studies are {share:.0%} of the library's lines"
    long = [f"{p.relative_to(ROOT)}: {lines([p])}" for p in study_files]
    assert [entry for entry, p in zip(long, study_files) if lines([p]) > STUDY_FILE_LINES] == []


def test_no_study_imports_another_and_the_library_imports_none():
    for path in STUDIES.glob("*.py"):
        if path.stem in ("__init__", "__main__", "study", "runner", "record", "report"):
            continue
        wing = {n for n in absolute_imports(path) if n.split(".")[0] == "benchmarks"}
        others = {n for n in wing if n not in STUDY_SHARED and not n.startswith("benchmarks.parts")}
        assert others == set(), path
    for root in ("dreamshard", "flows", "dashboard", "gpu_tasks"):
        for path in (ROOT / root).rglob("*.py"):
            assert not {n for n in absolute_imports(path) if n.split(".")[0] == "benchmarks"}, path


def reached_from(starts: set[str], edges: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), list(starts)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges.get(name, ()))
    return seen


# a module named in a string: `lazy.load_object("module:attribute")`, the front door's names
LAZY_NAME = re.compile(r"[\"'](dreamshard(?:\.\w+)+)(?::\w+)?[\"']")


def test_no_library_module_is_reached_only_from_the_studies():
    """Every module of the library is reached from what users run (the CLI, the package's front
    door, the flows, the dashboard, the programs), following imports and the modules named in
    strings (the registry's "module:attribute"): a module only a study reaches belongs in
    benchmarks/parts/."""
    mods = modules()
    edges = graph()
    for name, path in mods.items():
        edges[name] = edges[name] | {m for m in LAZY_NAME.findall(path.read_text()) if m in mods}
    starts = {"dreamshard", "dreamshard.cli.main"}
    for root in ("flows", "dashboard", "gpu_tasks"):
        for path in (ROOT / root).rglob("*.py"):
            for name in absolute_imports(path):
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                starts |= {name} if name else set()
    packages = {name for name, path in mods.items() if path.name == "__init__.py"}
    assert sorted(set(mods) - packages - reached_from(starts, edges)) == []
