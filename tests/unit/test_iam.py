"""The custom IAM roles: every GKE and Compute method the operator calls has its permission
listed in dws_operator.iam, and nothing more is listed; the committed role files are the
generated ones; the README names the roles and every permission.

The calls are found by reading the source (no module is imported): the ClusterManager is
reached as `self.api` in gke/ (NodePoolClient) and as `gke_api` in the controller; Compute
through `ComputeApis` (gke/compute_rest.py), as `<...>.apis.<field>`, each field's class
read from its annotation. A client constructed anywhere else fails
`test_only_known_clients_are_made`, and a Compute resource or HTTP session made outside
compute_rest.py fails `test_compute_is_reached_only_through_compute_apis`, so a new way to
reach Google cannot slip past the scan.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from google.cloud import container_v1

from dws_operator import iam
from dws_operator.gke import compute_rest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "dws_operator"
ROLE_FILES = ROOT / "manifests" / "iam"
README = ROOT / "README.md"
COMPUTE_REST = PRODUCT / "gke" / "compute_rest.py"
#: Connection housekeeping on a client (closing its channel), not an API method.
NOT_RPC = {"transport"}
CLIENT_MODULES = {"container_v1": container_v1}


def compute_fields() -> dict[str, str]:
    """ComputeApis' fields and the Compute class each holds (from the annotations)."""
    tree = ast.parse(COMPUTE_REST.read_text())
    (apis,) = (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ComputeApis")
    return {
        node.target.id: ast.unparse(node.annotation).rsplit(".", 1)[-1]
        for node in apis.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def calls_in(source: str, fields: dict[str, str], *, in_gke: bool) -> set[str]:
    """The `<client class>.<method>` names `source` reaches on Google's clients."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or node.attr in NOT_RPC:
            continue
        holder = node.value
        if not isinstance(holder, ast.Attribute):
            continue
        owner = holder.value
        if holder.attr == "gke_api" or (
            in_gke and holder.attr == "api" and isinstance(owner, ast.Name) and owner.id == "self"
        ):
            found.add(f"{iam.CLUSTER_MANAGER}.{node.attr}")
        elif holder.attr in fields and isinstance(owner, ast.Attribute) and owner.attr == "apis":
            found.add(f"{fields[holder.attr]}.{node.attr}")
    return found


def product_sources() -> list[Path]:
    return sorted(PRODUCT.rglob("*.py"))


def operator_calls() -> set[str]:
    fields = compute_fields()
    found: set[str] = set()
    for path in product_sources():
        in_gke = path.parent == PRODUCT / "gke"
        found |= calls_in(path.read_text(), fields, in_gke=in_gke)
    return found


def test_the_scan_finds_the_calls_it_should() -> None:
    # Guards the scanner itself: were it to find nothing, the next test would pass empty.
    found = operator_calls()
    assert f"{iam.CLUSTER_MANAGER}.create_node_pool" in found
    assert "FutureReservations.cancel" in found
    assert "RegionOperations.wait" in found
    assert "Advice.calendar_mode" in found


def test_every_call_has_its_permission_listed_and_nothing_else_is() -> None:
    found, listed = operator_calls(), set(iam.calls())
    assert found - listed == set(), (
        "the operator calls these without a permission in dws_operator.iam (add it, with "
        f"Google's page for it, then run python hack/gen_manifests.py): {found - listed}"
    )
    assert listed - found == set(), f"listed but no longer called: {listed - found}"


def test_a_new_call_would_fail() -> None:
    # What the check above would see if a booking were deleted, or the ClusterManager's
    # ListOperations called: calls dws_operator.iam does not list.
    fields = compute_fields()
    deleting = "async def f(self):\n    return self._call(self.apis.bookings.delete, r)\n"
    listing = "async def f(self):\n    return await self.call(self.api.list_operations, r)\n"
    new = calls_in(deleting, fields, in_gke=True) | calls_in(listing, fields, in_gke=True)
    assert new == {
        f"{iam.FUTURE_RESERVATIONS}.delete",
        f"{iam.CLUSTER_MANAGER}.list_operations",
    }
    assert new.isdisjoint(iam.calls())
    # `self.api` outside gke/ is the Kubernetes API, not GKE's.
    assert calls_in("self.api.request(x)", fields, in_gke=False) == set()


def test_only_known_clients_are_made() -> None:
    known = {iam.CLUSTER_MANAGER, *compute_fields().values()}
    made: set[str] = set()
    for path in product_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            func = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in CLIENT_MODULES
                and func.attr.endswith("Client")
            ):
                made.add(func.attr)
    assert made, "found no client construction: the scan is broken"
    assert made <= known, f"a Google client the scan does not cover: {made - known}"


def test_compute_is_reached_only_through_compute_apis() -> None:
    # ComputeApis' fields are what the scan sees; a Compute resource, or the HTTP session
    # under them, made anywhere but compute_rest.py could call Compute unseen, as could a
    # Compute client library.
    made_here = {*compute_fields().values(), "ComputeSession", "AuthorizedSession"}
    found: list[str] = []
    for path in product_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                path != COMPUTE_REST
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name | ast.Attribute)
                and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
                in made_here
            ):
                found.append(f"{path.name}: {ast.unparse(node.func)}")
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
                found += [f"{path.name}: {n}" for n in names if "google.cloud.compute" in n]
    assert found == []
    assert set(compute_fields().values()) >= {iam.RESOURCE_POLICIES, iam.ADVICE}


def test_every_listed_call_exists_on_its_client() -> None:
    for call in iam.calls():
        client, method = call.split(".")
        module = container_v1 if client == iam.CLUSTER_MANAGER else compute_rest
        assert callable(getattr(getattr(module, client), method, None)), call


def test_roles_are_well_formed() -> None:
    ids = [role.id for role in iam.ROLES]
    assert len(set(ids)) == len(ids)
    for role in iam.ROLES:
        # gcloud's role ids: letters, digits, underscores and periods, 3 to 64.
        assert re.fullmatch(r"[A-Za-z0-9_.]{3,64}", role.id), role.id
        assert iam.permissions_of(role), f"{role.id} carries nothing"
    for permission in iam.PERMISSIONS:
        assert permission.role in ids, permission
        assert permission.calls, permission
        assert permission.source.startswith("https://"), permission
    # A permission sits in one role only, so each role grants exactly its feature's.
    owners: dict[str, set[str]] = {}
    for permission in iam.PERMISSIONS:
        owners.setdefault(permission.name, set()).add(permission.role)
    assert all(len(roles) == 1 for roles in owners.values()), owners


@pytest.mark.parametrize("role", iam.ROLES, ids=lambda role: role.id)
def test_committed_role_is_the_generated_one(role: iam.Role) -> None:
    path = ROLE_FILES / f"{role.id}.yaml"
    assert path.read_text() == iam.role_yaml(role), (
        f"{path.relative_to(ROOT)} is stale: run python hack/gen_manifests.py"
    )
    parsed = yaml.safe_load(path.read_text())
    assert parsed == {
        "title": role.title,
        "description": role.description,
        "stage": "GA",
        "includedPermissions": list(iam.permissions_of(role)),
    }


def test_no_other_role_files() -> None:
    assert {p.name for p in ROLE_FILES.iterdir()} == {f"{r.id}.yaml" for r in iam.ROLES}


def test_readme_names_the_roles_and_every_permission() -> None:
    text = README.read_text()
    section = text[text.index("## Install on GKE with Helm") :].split("\n## ", 1)[0]
    for role in iam.ROLES:
        assert role.id in section, role.id
    for permission in iam.PERMISSIONS:
        assert f"`{permission.name}`" in section, permission.name
    assert "roles/container.clusterAdmin" not in text
    assert "roles/compute.instanceAdmin" not in text
