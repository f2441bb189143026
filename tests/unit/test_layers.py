"""The layers' import contract, read from the source (no module is imported): the pure
core (API models, catalog and chip math, planning, zones, validation, every module of
the reconcile decision) reaches only the standard library and pydantic, never the
shell (kopf, Kubernetes, gRPC, Google's clients, HTTP) nor the controller; nothing
outside `reconcile/` reaches past its package's exports; `plan` loads no Compute."""

from __future__ import annotations

import ast
import subprocess
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
    "dws_operator.naming",
    "dws_operator.estimate",
    *sorted(
        f"dws_operator.reconcile.{path.stem}"
        for path in (OPERATOR / "dws_operator" / "reconcile").glob("*.py")
        if path.stem != "__init__"
    ),
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


def test_every_reconcile_module_is_in_the_core() -> None:
    assert {"dws_operator.reconcile.decide", "dws_operator.reconcile.facts"} <= set(PURE_CORE)
    assert len([m for m in PURE_CORE if m.startswith("dws_operator.reconcile.")]) >= 10


def product_modules() -> list[str]:
    return sorted(
        ".".join(path.relative_to(OPERATOR).with_suffix("").parts).removesuffix(".__init__")
        for package in ("dws_operator", "dws_workshop")
        for path in (OPERATOR / package).rglob("*.py")
    )


def modules_named(module: str) -> set[str]:
    """The modules `module`'s import statements name as modules (`from a.b import c`
    names `a.b`, whatever `c` is)."""
    source = source_of(module)
    assert source is not None, module
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_nothing_outside_reconcile_reaches_its_internals() -> None:
    # The shell (and the workshop) use what `dws_operator.reconcile` exports: the modules
    # behind it can be split and renamed without touching them.
    reaching = {
        module: sorted(
            name for name in modules_named(module) if name.startswith("dws_operator.reconcile.")
        )
        for module in product_modules()
        if not module.startswith("dws_operator.reconcile")
    }
    assert {module: names for module, names in reaching.items() if names} == {}
    assert len(reaching) > 50  # the walk saw the product


def test_plan_loads_no_compute_client() -> None:
    # `plan` runs where no Google library is wanted; Compute's alone costs ~93 MiB.
    code = (
        "import sys, dws_operator.cli.plan;"
        "print(sorted(m for m in sys.modules if m.startswith(('google.cloud.compute', 'kopf'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout.strip()
    assert loaded == "[]"


def test_the_reconciler_writes_status_only_where_passes_count_it() -> None:
    # `dws_reconcile_status_writes` counts each pass's writes in `_patch_status` (the
    # status write's module): a status written any other way would go uncounted (a
    # second write per pass unseen).
    controller = OPERATOR / "dws_operator" / "controller"
    calls = {
        path.name: count
        for path in sorted(controller.glob("*.py"))
        if (
            count := sum(
                isinstance(node, ast.Attribute) and node.attr == "patch_status"
                for node in ast.walk(ast.parse(path.read_text()))
            )
        )
    }
    assert calls == {"status_write.py": 1}
    assert "patch_status" not in (controller / "observe.py").read_text()


KIT = sorted(
    f"dws_operator.kubekit.{path.stem}"
    for path in (OPERATOR / "dws_operator" / "kubekit").glob("*.py")
    if path.stem != "__init__"
)
#: Words of the operator's domain the generic Kubernetes kit must not know.
DOMAIN_WORDS = ("TrainingRequest", "trainingrequest", "Kueue", "kueue", "dws-", "DWS_", "node pool")


def test_the_kit_is_found() -> None:
    assert {"dws_operator.kubekit.transport", "dws_operator.kubekit.leader"} <= set(KIT)


@pytest.mark.parametrize("module", KIT)
def test_the_kubernetes_kit_knows_nothing_of_the_operator(module: str) -> None:
    """The kit (login, transport, work queue, fence, leader election, Events) reaches
    only itself and rfc3339 of the product, and names none of its domain."""
    ours = {
        name
        for name in reached_from(module)
        if name.startswith("dws_operator") and name != "dws_operator"
    }
    assert ours <= {*KIT, "dws_operator.kubekit", "dws_operator.rfc3339"}, ours
    source = source_of(module)
    assert source is not None
    text = source.read_text()
    assert [w for w in DOMAIN_WORDS if w in text] == []
