"""Figures on the code's shape, as issue 26 asks for them: lines per file, the longest functions, and how much of
the code mypy checks strictly. One JSON object on stdout.

    .venv/bin/python scripts/code_figures.py [--top 10]

Counted: the project's own Python (every package, bench/, scripts/, manage.py), without tests and generated
migrations; a "line" is a physical line of the file. mypy's share reads pyproject.toml: a module under an
override with ignore_errors is not checked.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _sources() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    return [ROOT / p for p in listed if not p.startswith("tests/") and "/migrations/" not in p]


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in {"bench", "scripts"}:  # not packages: mypy names these files by their own names
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _unchecked() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    out: set[str] = set()
    for override in config.get("overrides", []):
        if override.get("ignore_errors"):
            modules = override["module"]
            out.update([modules] if isinstance(modules, str) else modules)
    return out


def _functions(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            found.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(ROOT)}:{node.name}"))
    return found


def figures(top: int) -> dict[str, object]:
    files = _sources()
    lines = {p: len(p.read_text().splitlines()) for p in files}
    counts = sorted(lines.values())
    unchecked = _unchecked()
    strict = [p for p in files if _module(p) not in unchecked]
    functions = sorted((f for p in files for f in _functions(p)), reverse=True)
    return {
        "files": len(files),
        "lines": sum(counts),
        "lines_per_file_median": statistics.median(counts),
        "lines_per_file_p90": counts[int(0.9 * (len(counts) - 1))],
        "files_over_300_lines": sorted(str(p.relative_to(ROOT)) for p in files if lines[p] > 300),
        "longest_functions": [f"{name} ({n} lines)" for n, name in functions[:top]],
        "mypy_strict_files": len(strict),
        "mypy_strict_lines": sum(lines[p] for p in strict),
        "mypy_strict_share_of_lines": round(sum(lines[p] for p in strict) / max(1, sum(counts)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="how many of the longest functions to list")
    print(json.dumps(figures(parser.parse_args().top)))


if __name__ == "__main__":
    main()
