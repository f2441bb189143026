"""A fresh namespace per test, in whichever test cluster the fixture serves."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from kubernetes import client as k8s


@contextlib.contextmanager
def fresh_namespace(api: k8s.ApiClient, prefix: str) -> Iterator[str]:
    """Creates `<prefix>-<random>`, yields its name, and deletes it afterwards."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    core = k8s.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name)
