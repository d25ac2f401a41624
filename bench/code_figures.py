"""The code's shape in a few numbers, for a refactor's before and after: functions over six
parameters, the longest function, signatures that take the lake as a string, the command
module's length, the front pages' lengths, and the layout (import cycles, upward imports).

    .venv/bin/python bench/code_figures.py            # on the checkout
    .venv/bin/python bench/code_figures.py --at HEAD~3  # on a commit, read from git

It parses the code with ``ast`` itself: it imports nothing from intent_spark, and the layout
check is the layout test's, run by pytest, so a figure here cannot follow a bug there.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("intent_spark", "models")


def files_at(commit: str | None) -> dict[str, str]:
    """Path -> text of the package files and the front pages, in the checkout or at a commit."""
    if commit is None:
        paths = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
        found = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in paths}
        for page in ("README.md", "BENCHMARKS.md"):
            found[page] = (ROOT / page).read_text(encoding="utf-8")
        return found
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", commit], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    wanted = [n for n in names if (n.split("/")[0] in PACKAGES and n.endswith(".py"))]
    wanted += [n for n in ("README.md", "BENCHMARKS.md") if n in names]
    return {
        n: subprocess.run(
            ["git", "show", f"{commit}:{n}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        for n in wanted
    }


def annotation(arg: ast.arg) -> str:
    return ast.unparse(arg.annotation) if arg.annotation is not None else ""


def figures(files: dict[str, str]) -> dict[str, object]:
    over_six, longest, lake_str, lake_obj = [], ("", 0), [], []
    for path, text in files.items():
        if not path.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            params = [a for a in params if a.arg not in ("self", "cls")]
            if len(params) > 6:
                over_six.append(f"{path}:{node.lineno} {node.name} ({len(params)})")
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > longest[1]:
                longest = (f"{path}:{node.lineno} {node.name}", length)
            for a in params:
                if a.arg == "lake":
                    kind = annotation(a)
                    (lake_obj if kind == "Lake" else lake_str).append(
                        f"{path}:{node.lineno} {node.name}: {kind}"
                    )
    cycle = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/pipeline/test_layout.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return {
        "functions over six parameters": len(over_six),
        "longest function": f"{longest[1]} lines ({longest[0]})",
        "lake as a string (str or unannotated)": len(lake_str),
        "lake as a Lake": len(lake_obj),
        "commands.py lines": files.get("intent_spark/pipeline/commands.py", "").count("\n"),
        "README.md lines": files.get("README.md", "").count("\n"),
        "BENCHMARKS.md lines": files.get("BENCHMARKS.md", "").count("\n"),
        "layout test (no cycle, no upward import)": "passed" if cycle.returncode == 0 else "FAILED",
        "_over_six": over_six,
        "_lake_str": lake_str,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", help="a commit (default: the checkout; the layout test runs on the checkout)")
    parser.add_argument("--list", action="store_true", help="also list the functions behind the counts")
    args = parser.parse_args()
    found = figures(files_at(args.at))
    for key, value in found.items():
        if not key.startswith("_"):
            print(f"{key}: {value}")
    if args.list:
        for key in ("_over_six", "_lake_str"):
            print(f"\n{key[1:]}:")
            print("\n".join(f"  {line}" for line in found[key]))  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    sys.exit(main())
