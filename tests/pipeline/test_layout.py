"""The folder layout is the architecture: each subpackage of ``intent_spark`` imports only the
packages below it (docs/architecture.md's module map), and no modules import each other in a
cycle, counting imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

ROOT = REPO_ROOT
PACKAGE = ROOT / "intent_spark"
# Lowest first: a package may import only packages of a lower rank (and itself). ``models`` (the
# reference models, top level) sits between ``split`` and ``train``: only ``train`` builds them.
RANKS = {
    "core": 0,
    "plugin": 1,
    "lake": 2,
    "generate": 3,
    "ingest": 3,
    "split": 4,
    "models": 5,
    "train": 6,
    "evaluate": 7,
    "exchange": 7,
    "checks": 8,
    "report": 9,
    "pipeline": 10,
    "cli": 11,
}
# A package that may import only these, whatever their rank: a reference model is built on the
# public plug-in module alone, as a third party's is; the lake (tables, files, session, tracking)
# knows nothing of models or batches.
ONLY = {"models": {"plugin"}, "lake": {"core"}}
# A package that only these may import: the stages never name a model, the registry does.
IMPORTED_ONLY_BY = {"models": {"train"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``intent_spark``/``models`` import anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from intent_spark.core import schema`: the module is intent_spark.core.schema
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] in ("intent_spark", "models")]


def package_of(module: str) -> str | None:
    """The layer of a module (``intent_spark.split.cells`` -> ``split``, ``models.sasrec`` ->
    ``models``); None for one outside both."""
    parts = module.split(".")
    if parts[0] == "models":
        return "models"
    if parts[0] != "intent_spark" or len(parts) < 2:
        return None
    return parts[1]


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    found.update({module_name(p): p for p in (ROOT / "models").rglob("*.py")})
    return found


def test_every_module_sits_in_a_ranked_package():
    flat = sorted(
        name for name in modules() if name.startswith("intent_spark.") and package_of(name) not in RANKS
    )
    assert flat == [], f"modules outside the layered packages: {flat}"


def upward_imports(known: dict[str, Path]) -> list[str]:
    """``file:line: what`` for each import of a package of the same or a higher rank, or outside
    its ``ONLY`` list."""
    found = []
    for name, path in known.items():
        here = package_of(name)
        for line, target in imports_of(path):
            there = package_of(target)
            if here is None or there is None or there == here or there not in RANKS:
                continue
            where = f"{path.relative_to(path.parents[len(name.split('.')) - 1])}:{line}"
            if here in ONLY and there not in ONLY[here]:
                found.append(f"{where}: {here} imports {target}: only {sorted(ONLY[here])}")
            elif there in IMPORTED_ONLY_BY and here not in IMPORTED_ONLY_BY[there]:
                found.append(f"{where}: {here} imports {target}: only {sorted(IMPORTED_ONLY_BY[there])} may")
            elif RANKS[there] >= RANKS[here]:
                found.append(f"{where}: {here} imports {target} ({there})")
    return found


def test_imports_go_only_downward():
    upward = upward_imports(modules())
    assert upward == [], "\n".join(upward)


def test_the_layout_check_sees_the_imports_that_break_it(tmp_path):
    """The checker itself, on modules written here: the lake and the report importing a
    reference model, one importing the lake, and one importing the plug-in module (allowed)."""
    files = {
        "intent_spark.lake.shelf": "def f():\n    from models.interface import Catalogue\n",
        "models.bad": "import numpy\nfrom intent_spark.lake.tables import read_table\n",
        "models.good": "from intent_spark.plugin import Catalogue, train_steps\n",
        "intent_spark.report.page": "import models.sasrec\n",
    }
    known = {}
    for name, text in files.items():
        path = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        known[name] = path
    assert upward_imports(known) == [
        "intent_spark/lake/shelf.py:2: lake imports models.interface: only ['core']",
        "intent_spark/lake/shelf.py:2: lake imports models.interface.Catalogue: only ['core']",
        "models/bad.py:2: models imports intent_spark.lake.tables: only ['plugin']",
        "models/bad.py:2: models imports intent_spark.lake.tables.read_table: only ['plugin']",
        "intent_spark/report/page.py:1: report imports models.sasrec: only ['train'] may",
    ]


def _graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = set()
        for _, target in imports_of(path):
            while target and target not in known:  # `from pkg import symbol` names the module pkg
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                targets.add(target)
        edges[name] = targets
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = find_cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_mlflow_is_imported_by_the_tracking_module_only():
    users = [
        str(path.relative_to(ROOT))
        for name, path in modules().items()
        if name != "intent_spark.lake.tracking"
        and any(
            isinstance(node, ast.Import | ast.ImportFrom)
            and any(
                (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0] == "mlflow"
                for alias in node.names
            )
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    ]
    assert users == []
