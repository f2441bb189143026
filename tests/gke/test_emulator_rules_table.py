"""Every emulator refusal and behaviour has a sourced row in emulator/RULES.md (issue 31).

The real check runs `ruleids.check()` over the emulator and simulator; the other tests
feed the checker made-up code and tables to prove it fails when it should.
"""

from __future__ import annotations

import grpc
import pytest

from dws_workshop.emulator import ruleids
from dws_workshop.emulator.compute_api import ComputeApiError
from dws_workshop.emulator.compute_rules import validate_name
from dws_workshop.emulator.rules import validate_name as validate_pool_name
from dws_workshop.emulator.status import ApiError

HEADER = "| id | what | source | read | module |\n|---|---|---|---|---|\n"


def table(*rows: str) -> str:
    return HEADER + "".join(f"{row}\n" for row in rows)


def problems(code: str, markdown: str) -> list[str]:
    uses, found = ruleids.uses_in_sources({"fake.py": code})
    rows, malformed = ruleids.rows_in_table(markdown)
    return found + malformed + ruleids.compare(uses, rows)


SOURCED = "| `GKE-FAKE` | refused | GKE answer quoted in owner/repo#1 | 2026-11-27 | fake.py |"
INVALID_HELPER = (
    "def invalid(field, message, *, rule):\n    return ApiError(1, message, rule=rule)\n\n"
)


def test_every_rule_in_code_has_a_sourced_row_and_every_row_is_used() -> None:
    assert ruleids.check() == []


def test_the_scan_covers_the_emulators_and_the_simulator() -> None:
    names = {p.name for p in ruleids.scanned_files()}
    assert {"rules.py", "placement.py", "compute_rules.py", "queued.py"} <= names
    uses, unmarked = ruleids.uses_in_sources(
        {str(p): p.read_text() for p in ruleids.scanned_files()}
    )
    assert unmarked == []
    assert len({u.rule for u in uses}) > 50


def test_a_refusal_without_a_row_fails() -> None:
    code = INVALID_HELPER + "def check():\n    raise invalid('f', 'no', rule='GKE-NEW-RULE')\n"
    found = problems(code, table())
    assert any("GKE-NEW-RULE has no row in RULES.md" in p for p in found), found


def test_a_refusal_without_a_rule_id_fails() -> None:
    code = INVALID_HELPER + "def check():\n    raise invalid('f', 'no')\n"
    found = problems(code, table())
    assert any("invalid(...) refuses without rule=" in p for p in found), found


def test_an_error_built_directly_without_a_rule_id_fails() -> None:
    found = problems("def check():\n    raise ApiError(3, 'no')\n", table())
    assert any("ApiError(...) refuses without rule=" in p for p in found), found


def test_a_rule_id_must_be_a_literal() -> None:
    code = INVALID_HELPER + "R = 'GKE-FAKE'\ndef check():\n    raise invalid('f', 'no', rule=R)\n"
    found = problems(code, table(SOURCED))
    assert any("must be a string literal" in p for p in found), found


def test_a_row_without_code_fails_unless_planned() -> None:
    found = problems("x = 1\n", table(SOURCED))
    assert any("GKE-FAKE is used nowhere in code" in p for p in found), found
    planned = SOURCED.replace("fake.py", "planned")
    assert problems("x = 1\n", table(planned)) == []


def test_a_planned_row_whose_code_landed_must_name_its_module() -> None:
    code = INVALID_HELPER + "def check():\n    raise invalid('f', 'no', rule='GKE-FAKE')\n"
    found = problems(code, table(SOURCED.replace("fake.py", "planned")))
    assert any("code column says planned" in p for p in found), found


def test_a_row_without_a_source_fails_and_our_assumption_passes() -> None:
    code = "@behaviour('SIM-FAKE')\ndef act():\n    pass\n"
    unsourced = "| `SIM-FAKE` | does it | the docs say so | 2026-11-27 | fake.py |"
    found = problems(code, table(unsourced))
    assert any("names no URL" in p for p in found), found
    undated = "| `SIM-FAKE` | does it | https://example.com/doc | | fake.py |"
    assert any("give the date" in p for p in problems(code, table(undated)))
    assumed = "| `SIM-FAKE` | does it | our assumption | — | fake.py |"
    assert problems(code, table(assumed)) == []


def test_a_sourced_refusal_with_its_row_passes() -> None:
    code = INVALID_HELPER + "def check():\n    raise invalid('f', 'no', rule='GKE-FAKE')\n"
    assert problems(code, table(SOURCED)) == []


def test_a_duplicate_row_fails() -> None:
    code = INVALID_HELPER + "def check():\n    raise invalid('f', 'no', rule='GKE-FAKE')\n"
    found = problems(code, table(SOURCED, SOURCED))
    assert any("GKE-FAKE has 2 rows" in p for p in found), found


def test_the_errors_carry_their_rule_at_run_time() -> None:
    with pytest.raises(ApiError) as caught:
        validate_pool_name("Not_A_Name")
    assert caught.value.rule == "GKE-POOL-NAME"
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(ComputeApiError) as compute:
        validate_name("resource.name", "")
    assert compute.value.rule == "CE-NAME"


def test_behaviour_marks_the_function() -> None:
    @ruleids.behaviour("SIM-FAKE", "SIM-OTHER")
    def act() -> int:
        return 1

    assert act() == 1
    assert getattr(act, "__rule_ids__", None) == ("SIM-FAKE", "SIM-OTHER")
