"""Rule ids: every refusal and behaviour of the emulators names its row in RULES.md.

A refusal is made by `ApiError` (GKE, gRPC) or `ComputeApiError` (Compute, HTTP), or by
a helper that forwards a `rule` parameter to them (`status.invalid`, `compute_rules.
invalid`, ...): each such call passes `rule="ID"` as a string literal. A behaviour (what
the emulator or the simulator does rather than refuses) is marked on the function that
does it with `@behaviour("ID", ...)`. RULES.md (next to this module) holds one table row
per id with its source; `check` compares the two both ways and is run by
tests/gke/test_emulator_rules_table.py.

Pure: `check` reads the files it is given, nothing else.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = [
    "REFUSALS",
    "RULES_MD",
    "RULE_ID",
    "Row",
    "Use",
    "behaviour",
    "check",
    "compare",
    "rows_in_table",
    "scanned_files",
    "uses_in_sources",
]

F = TypeVar("F", bound=Callable[..., object])

RULES_MD = Path(__file__).with_name("RULES.md")
#: The emulators (GKE and Compute) and the simulator's GKE-side behaviours.
SCANNED_DIRS = (Path(__file__).parent, Path(__file__).parent.parent / "simulator")
#: The error types a refusal is made of; each construction names its rule.
REFUSALS = frozenset({"ApiError", "ComputeApiError"})
#: GKE- (ClusterManager), CE- (Compute Engine), SIM- (the simulator's GKE side) or
#: EMU- (the emulator's own machinery, e.g. injected faults), then upper-case words.
RULE_ID = re.compile(r"^(GKE|CE|SIM|EMU)(-[A-Z0-9]+)+$")
#: The code column of a row whose rule is not in code yet (another branch adds it).
PLANNED = "planned"
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
#: A source names a URL, a repository issue or PR (`owner/repo#123`) or a repository file.
_SOURCE = re.compile(r"https?://|[\w.-]+/[\w.-]+#\d+|[\w.-]+/[\w.-]+[: ,]+[\w./-]+\.\w+")
ASSUMPTION = "our assumption"


def behaviour(*ids: str) -> Callable[[F], F]:
    """Mark a function as doing what RULES.md's rows `ids` describe (read by `check`)."""

    def mark(function: F) -> F:
        setattr(function, "__rule_ids__", ids)  # noqa: B010  # F is a bound TypeVar
        return function

    return mark


@dataclass(frozen=True)
class Use:
    """A rule id where the code uses it."""

    rule: str
    path: str
    line: int


@dataclass(frozen=True)
class Row:
    """One row of RULES.md's table."""

    rule: str
    what: str
    source: str
    read: str
    code: str
    line: int

    @property
    def files(self) -> frozenset[str]:
        return frozenset(part.strip(" `") for part in self.code.split(",") if part.strip(" `"))


def scanned_files(dirs: Iterable[Path] = SCANNED_DIRS) -> list[Path]:
    return sorted(p for d in dirs for p in d.glob("*.py"))


def _called(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = function.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}


def _forwarders(trees: Iterable[ast.Module]) -> set[str]:
    """The functions that take a `rule` and hand it on: calling one makes a refusal."""
    names = set(REFUSALS)
    for tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and "rule" in _params(node)
                and not node.name.startswith("__")
            ):
                names.add(node.name)
    return names


def _enclosing_params(parents: list[ast.AST]) -> set[str]:
    for parent in reversed(parents):
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            return _params(parent)
    return set()


def uses_in_sources(sources: dict[str, str]) -> tuple[list[Use], list[str]]:
    """The rule ids used in `sources` (path -> Python text), and the refusals without one."""
    trees = {path: ast.parse(text, path) for path, text in sources.items()}
    forwarders = _forwarders(trees.values())
    uses: list[Use] = []
    problems: list[str] = []
    for path, tree in trees.items():
        _visit(path, tree, [], forwarders, uses, problems)
    return uses, problems


def _visit(
    path: str,
    node: ast.AST,
    parents: list[ast.AST],
    forwarders: set[str],
    uses: list[Use],
    problems: list[str],
) -> None:
    if isinstance(node, ast.Call):
        _check_call(path, node, parents, forwarders, uses, problems)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and _called(decorator) == "behaviour":
                for arg in decorator.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        uses.append(Use(arg.value, path, decorator.lineno))
                    else:
                        problems.append(f"{path}:{decorator.lineno}: @behaviour takes literals")
    for child in ast.iter_child_nodes(node):
        _visit(path, child, [*parents, node], forwarders, uses, problems)


def _check_call(
    path: str,
    node: ast.Call,
    parents: list[ast.AST],
    forwarders: set[str],
    uses: list[Use],
    problems: list[str],
) -> None:
    name = _called(node)
    if name not in forwarders:
        return
    rule = next((k.value for k in node.keywords if k.arg == "rule"), None)
    where = f"{path}:{node.lineno}"
    if rule is None:
        problems.append(f"{where}: {name}(...) refuses without rule=: give it a RULES.md id")
    elif isinstance(rule, ast.Constant) and isinstance(rule.value, str):
        uses.append(Use(rule.value, path, node.lineno))
    elif not (isinstance(rule, ast.Name) and rule.id in _enclosing_params(parents)):
        problems.append(f"{where}: {name}(rule=...) must be a string literal (or a forwarded rule)")


def rows_in_table(markdown: str) -> tuple[list[Row], list[str]]:
    """The rows of the table(s) whose first cell is a rule id, and malformed rows."""
    rows: list[Row] = []
    problems: list[str] = []
    for number, line in enumerate(markdown.splitlines(), 1):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rule = cells[0].strip("`")
        if not RULE_ID.match(rule):
            continue
        if len(cells) != 5:
            problems.append(f"RULES.md:{number}: {rule}: want 5 cells, got {len(cells)}")
            continue
        what, source, read, code = cells[1:]
        rows.append(Row(rule, what, source, read, code, line=number))
    return rows, problems


def _row_problems(row: Row) -> list[str]:
    where = f"RULES.md:{row.line}: {row.rule}"
    problems = []
    if not row.what:
        problems.append(f"{where}: say what is refused or done")
    if ASSUMPTION not in row.source.lower():
        if not _SOURCE.search(row.source):
            problems.append(
                f"{where}: the source names no URL, owner/repo#N or repository file; "
                f"give one or write {ASSUMPTION!r}"
            )
        if not _DATE.search(row.read) and "not re-read" not in row.read:
            problems.append(f"{where}: give the date the source was read (YYYY-MM-DD)")
    if not row.files:
        problems.append(f"{where}: name the module(s) in the code column, or {PLANNED!r}")
    return problems


def compare(uses: list[Use], rows: list[Row]) -> list[str]:
    """Every id in code has exactly one row and every row an id in code (or is planned)."""
    problems: list[str] = []
    by_rule: dict[str, list[Row]] = {}
    for row in rows:
        by_rule.setdefault(row.rule, []).append(row)
        problems.extend(_row_problems(row))
    for rule, same in by_rule.items():
        if len(same) > 1:
            problems.append(f"RULES.md: {rule} has {len(same)} rows")
    used: dict[str, set[str]] = {}
    for use in uses:
        if not RULE_ID.match(use.rule):
            problems.append(
                f"{use.path}:{use.line}: {use.rule!r} is not a rule id ({RULE_ID.pattern})"
            )
        used.setdefault(use.rule, set()).add(Path(use.path).name)
        if use.rule not in by_rule:
            problems.append(f"{use.path}:{use.line}: {use.rule} has no row in RULES.md")
    for rule, same in by_rule.items():
        row = same[0]
        files = used.get(rule)
        if files is None:
            if row.files != {PLANNED}:
                problems.append(f"RULES.md:{row.line}: {rule} is used nowhere in code")
        elif row.files != files:
            problems.append(
                f"RULES.md:{row.line}: {rule}'s code column says {', '.join(sorted(row.files))}; "
                f"the code uses it in {', '.join(sorted(files))}"
            )
    return problems


def check(files: Iterable[Path] | None = None, table: Path = RULES_MD) -> list[str]:
    """Everything wrong between the code's rule ids and RULES.md; empty when they agree."""
    paths = scanned_files() if files is None else list(files)
    sources = {str(p): p.read_text(encoding="utf-8") for p in paths}
    uses, problems = uses_in_sources(sources)
    rows, malformed = rows_in_table(table.read_text(encoding="utf-8"))
    return problems + malformed + compare(uses, rows)
