"""The role policies of docs/security.md: rendered from ``harness/s3_roles.py``, least
privilege by construction, and shown in the document exactly as the tests grant them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.s3_roles import (
    CLI_READ,
    CLI_SWEEP,
    DELETE,
    DRIVER,
    EXECUTOR,
    GET,
    LIST,
    PUT,
    ROLES,
    aws_policy,
    aws_policy_json,
    weed_actions,
    weed_identity_json,
    without,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "security.md"


def test_each_role_has_only_what_its_operations_need() -> None:
    assert DRIVER.actions() == (LIST, GET, PUT, DELETE)
    assert EXECUTOR.actions() == (PUT, GET)  # no listing, no deletion
    assert CLI_READ.actions() == (LIST, GET)  # nothing written
    assert CLI_SWEEP.actions() == (LIST, GET, PUT, DELETE)
    [put] = [g for g in CLI_SWEEP.grants if g.action == PUT]
    assert put.keys == ("*/coordinator/driver.json", "*/barrier/state.json")
    [delete] = [g for g in CLI_SWEEP.grants if g.action == DELETE]
    assert delete.keys == ("*/staging/*",)


def test_the_aws_policy_scopes_objects_to_the_prefix_and_listing_by_condition() -> None:
    doc = aws_policy(EXECUTOR, "b", "pre/fix")
    assert doc["Version"] == "2012-10-17"
    put, get = doc["Statement"]
    assert put["Resource"] == [
        "arn:aws:s3:::b/pre/fix/*/staging/*",
        "arn:aws:s3:::b/pre/fix/*/batches/*",
    ]
    assert get == {
        "Sid": "GetObject",
        "Effect": "Allow",
        "Action": GET,
        "Resource": "arn:aws:s3:::b/pre/fix/*/batches/*",
    }
    listing = aws_policy(CLI_READ, "b", "pre/fix")["Statement"][0]
    assert listing["Resource"] == "arn:aws:s3:::b"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["pre/fix/*"]}}
    at_root = aws_policy(CLI_READ, "b", "")["Statement"]
    assert "Condition" not in at_root[0] and at_root[1]["Resource"] == "arn:aws:s3:::b/*"


def test_seaweedfs_actions_end_in_their_only_wildcard() -> None:
    assert weed_actions(EXECUTOR, "b", "pre", "p1") == [
        "Write:b/pre/p1/staging/*",
        "Write:b/pre/p1/batches/*",
        "Read:b/pre/p1/batches/*",
    ]
    assert weed_actions(CLI_SWEEP, "b", "pre", "p1") == [
        "List:b/pre/*",
        "Read:b/pre/*",
        "Write:b/pre/p1/coordinator/driver.json*",
        "Write:b/pre/p1/barrier/state.json*",
        "Write:b/pre/p1/staging/*",
    ]
    assert weed_actions(CLI_READ, "b", "", "p1") == ["List:b", "Read:b"]
    # SeaweedFS's Write is puts and deletes: the driver's narrower deletes fold into it
    assert weed_actions(DRIVER, "b", "pre", "p1") == [
        "List:b/pre/*",
        "Read:b/pre/*",
        "Write:b/pre/*",
    ]
    assert weed_actions(DRIVER, "b", "", "p1") == ["List:b", "Read:b", "Write:b"]


def test_without_takes_one_permission_away() -> None:
    less = without(DRIVER, DELETE)
    assert less.actions() == (LIST, GET, PUT) and less.name == "driver-without-DeleteObject"
    with pytest.raises(ValueError, match="no s3:DeleteObject"):
        without(CLI_READ, DELETE)


def blocks(text: str, marker: str) -> list[str]:
    pattern = rf"<!-- {re.escape(marker)} -->\s*```json\n(.*?)```"
    return [m.strip() for m in re.findall(pattern, text, re.DOTALL)]


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_the_document_shows_each_policy_as_the_tests_grant_it(role: object) -> None:
    from harness.s3_roles import Role

    assert isinstance(role, Role)
    text = DOC.read_text()
    assert blocks(text, f"aws-policy:{role.name}") == [aws_policy_json(role)]
    assert blocks(text, f"seaweedfs-identity:{role.name}") == [weed_identity_json(role)]
    json.loads(aws_policy_json(role))  # valid JSON, as AWS takes it
