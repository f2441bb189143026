"""The line of GKE operations shared by namespaces in turn: the places it tells are the
order it serves in, a crowd in one namespace does not hold back another, and what stops
a bill goes before what starts one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dws_operator.controller.line import Entry, FairLine

CREATE, RELEASE = 1, 0


def entry(priority: int, minute: int, seq: int, pool: str) -> Entry:
    return Entry((priority, f"2026-11-23T10:{minute:02d}:00Z", seq), pool)


def served(line: FairLine) -> list[str]:
    order = []
    while (taken := line.take(lambda _: True)) is not None:
        order.append(taken.pool)
    return order


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 59)), min_size=1, max_size=30
    ),
    st.integers(0, 8),
)
def test_the_places_told_are_the_order_served(requests: list[tuple[str, int]], before: int) -> None:
    line = FairLine()
    # Some served earlier: the rotation remembers who went last.
    for seq in range(before):
        line.add("abc"[seq % 3], entry(CREATE, 0, seq, f"early-{seq}"))
    for _ in range(before):
        line.take(lambda _: True)
    tenants = {}
    for seq, (tenant, minute) in enumerate(requests, start=before):
        e = entry(CREATE, minute, seq, f"{tenant}-{seq}")
        tenants[e.pool] = (tenant, e)
        line.add(tenant, e)
    places = {pool: line.position(tenant, e.order) for pool, (tenant, e) in tenants.items()}
    first = [e.pool for e in line.first(3)]
    order = served(line)
    assert [places[pool] for pool in order] == list(range(1, len(order) + 1))
    assert first == order[:3]
    assert len(line) == 0


def test_a_crowd_in_one_namespace_does_not_hold_back_another() -> None:
    line = FairLine()
    for i in range(200):
        line.add("team-a", entry(CREATE, i % 60, i, f"a-{i}"))
    for i in range(5):
        line.add("team-b", entry(CREATE, 59, 200 + i, f"b-{i}"))
    assert line.position("team-b", (CREATE, "2026-11-23T10:59:00Z", 204)) == 10
    order = served(line)
    assert [order.index(f"b-{i}") for i in range(5)] == [1, 3, 5, 7, 9]
    # Within a namespace, first come, first served.
    crowd = [pool for pool in order if pool.startswith("a-")]
    assert crowd == sorted(crowd, key=lambda pool: (int(pool[2:]) % 60, int(pool[2:])))


def test_what_stops_a_bill_goes_first_whoever_asks_and_counts_as_a_turn() -> None:
    line = FairLine()
    line.add("a", entry(CREATE, 0, 0, "a-create"))
    line.add("b", entry(CREATE, 1, 1, "b-create"))
    line.add("b", entry(RELEASE, 5, 2, "b-release"))
    assert line.position("a", (CREATE, "2026-11-23T10:00:00Z", 0)) == 2
    # b was served last (its release), so a's create goes before b's.
    assert served(line) == ["b-release", "a-create", "b-create"]


def test_an_operation_not_ready_lets_the_next_ready_one_go() -> None:
    line = FairLine()
    line.add("a", entry(CREATE, 0, 0, "a-backing-off"))
    line.add("a", entry(CREATE, 1, 1, "a-ready"))
    taken = line.take(lambda e: e.pool != "a-backing-off")
    assert taken is not None
    assert taken.pool == "a-ready"
    assert line.remove("a", entry(CREATE, 1, 1, "a-ready")) == -1  # gone already
    assert len(line) == 1
