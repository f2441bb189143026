from __future__ import annotations

import re
import uuid

from hypothesis import given
from hypothesis import strategies as st

from dws_operator.api.base import NODE_POOL_NAME_PATTERN
from dws_operator.naming import default_node_pool_name

UID = "0f6c2c35-3b1e-4f9a-9c55-6a0d7e3b8a11"


def test_name_is_deterministic_and_readable() -> None:
    name = default_node_pool_name("llama-finetune", UID)
    assert name == default_node_pool_name("llama-finetune", UID)
    assert name.startswith("dws-llama-finetune-")
    assert re.fullmatch(NODE_POOL_NAME_PATTERN, name)


def test_different_objects_get_different_pools() -> None:
    assert default_node_pool_name("job", UID) != default_node_pool_name("job", str(uuid.uuid4()))


@given(st.text(max_size=300), st.uuids())
def test_always_a_valid_gke_name(request_name: str, uid: uuid.UUID) -> None:
    name = default_node_pool_name(request_name, str(uid))
    assert len(name) <= 40
    assert re.fullmatch(NODE_POOL_NAME_PATTERN, name), name
