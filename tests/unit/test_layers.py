"""The layers' import contract, read from the source (no module is imported): the pure
core (API models, catalog and chip math, planning, zones, validation, the reconcile
decision and its preview) reaches only the standard library and pydantic, never the
shell (kopf, Kubernetes, gRPC, Google's clients, HTTP) nor the controller."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[2] / "operator"
PURE_CORE = (
    "dws_operator.api",
    "dws_operator.catalog",
    "dws_operator.planning",
    "dws_operator.zones",
    "dws_operator.validation",
    "dws_operator.workload",
    "dws_operator.multislice",
    "dws_operator.reconcile.decide",
    "dws_operator.reconcile.preview",
)
#: What the core may import from outside the standard library.
ALLOWED_THIRD_PARTY = {"pydantic"}
#: Parts of the product that do I/O.
SHELL = ("dws_operator.controller", "dws_operator.cli", "dws_operator.gke")


def source_of(module: str) -> Path | None:
    path = OPERATOR.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    file = path.with_suffix(".py")
    return file if file.is_file() else None


def imported_by(module: str) -> set[str]:
    """Every module `module` names in an import statement (functions' own included)."""
    source = source_of(module)
    assert source is not None, module
    package = module if source.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            found.add(base)
            for alias in node.names:
                if source_of(f"{base}.{alias.name}") is not None:
                    found.add(f"{base}.{alias.name}")
    return found


def reached_from(start: str) -> dict[str, str]:
    """Every module `start` reaches through the product's own modules (and the packages
    they live in), each with the module that imported it."""
    reached: dict[str, str] = {}
    todo = [(start, start)]
    while todo:
        module, by = todo.pop()
        if module in reached:
            continue
        reached[module] = by
        if not module.startswith("dws_operator") or source_of(module) is None:
            continue
        parts = module.split(".")
        todo.extend((".".join(parts[:i]), module) for i in range(1, len(parts)))
        todo.extend((name, module) for name in imported_by(module))
    return reached


def test_the_walk_finds_what_the_shell_imports() -> None:
    # The contract below means something only if the walk sees the shell's I/O.
    assert "kopf" in {m.split(".")[0] for m in reached_from("dws_operator.controller.handlers")}
    assert "google.cloud" in reached_from("dws_operator.gke.client")


@pytest.mark.parametrize("module", PURE_CORE)
def test_the_pure_core_reaches_no_io(module: str) -> None:
    reached = reached_from(module)
    outside = {
        name: by
        for name, by in reached.items()
        if not name.startswith("dws_operator")
        and name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] not in ALLOWED_THIRD_PARTY
        and name != "__future__"
    }
    assert outside == {}
    shell = {name: by for name, by in reached.items() if name.startswith(SHELL)}
    assert shell == {}
