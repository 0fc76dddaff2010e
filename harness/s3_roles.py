"""The least S3 permissions of each role that touches an ``s3://`` state store.

One table, :data:`ROLES`, says which store operations each role performs on which keys
(relative to the state store's prefix) and so which S3 permissions it needs. From it:

* :func:`aws_policy`: the AWS IAM policy document of a role (the JSON in
  docs/security.md, whose blocks ``tests/test_security_docs.py`` checks against these);
* :func:`weed_actions`: the same grants as SeaweedFS identity actions
  (``Read``/``Write``/``List`` scoped to ``bucket/prefix*``), whose ``Write`` covers both
  ``s3:PutObject`` and ``s3:DeleteObject``, and whose wildcards only end a pattern (so a
  pattern with a ``*`` for the pipeline is written for one pipeline id);
* :func:`without`: a role with one permission taken away, to show that each is needed.

``integration_tests/test_s3_roles.py`` runs each role's real code paths against SeaweedFS
with exactly these grants, in both forms (SeaweedFS evaluates attached IAM policy
documents too), and each role with one permission removed.

The operations behind each grant (``StateStore`` methods, their S3 requests):

* get: ``GetObject``; the resolution of an ambiguous conditional write: ``HeadObject``
  (both ``s3:GetObject``). On AWS, without ``s3:ListBucket``, a GET of a missing key is
  refused (403) instead of answered 404, so a role that reads keys that may be absent
  needs ``s3:ListBucket`` as well.
* put, create (``If-None-Match: *``), compare-and-swap (``If-Match``): ``PutObject``
  (``s3:PutObject``; conditional writes need no other permission).
* list: ``ListObjectsV2`` with the key prefix (``s3:ListBucket`` on the bucket, with an
  ``s3:prefix`` condition).
* delete: ``DeleteObject``, ``DeleteObjects`` (``s3:DeleteObject`` for every key).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

LIST = "s3:ListBucket"
GET = "s3:GetObject"
PUT = "s3:PutObject"
DELETE = "s3:DeleteObject"
#: SeaweedFS's identity action for each S3 permission.
WEED_ACTION = {LIST: "List", GET: "Read", PUT: "Write", DELETE: "Write"}

#: What docs/security.md renders its policies for.
EXAMPLE_BUCKET = "my-bucket"
EXAMPLE_PREFIX = "gtbarrier"


@dataclass(frozen=True)
class Grant:
    """One S3 permission on keys matching ``keys`` (patterns relative to the state store's
    prefix; ``*`` matches any characters, ``/`` included, as in IAM resource ARNs), and
    why the role needs it."""

    action: str
    keys: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Role:
    """A process that uses the state store, and the grants it needs."""

    name: str
    title: str
    runs: str
    grants: tuple[Grant, ...]

    def actions(self) -> tuple[str, ...]:
        return tuple(g.action for g in self.grants)


ALL = ("*",)

DRIVER = Role(
    "driver",
    "Driver",
    "the Spark driver: the gtkafka source's planning (source start, epoch log), the barrier "
    "sink's commits and aborts, and the snapshot coordinator (fencing token, barrier claim, "
    "snapshots, resume point without ZooKeeper, recovery)",
    (
        Grant(LIST, ALL, "epochs, staged parts, snapshots and blobs are found by listing"),
        Grant(GET, ALL, "every record is read back (and a missing one must be a 404)"),
        Grant(PUT, ALL, "records are created and compare-and-swapped everywhere"),
        Grant(
            DELETE,
            ("*/staging/*", "*/snapshots/*", "*/snapshot-blobs/*"),
            "delivered or superseded staged parts, pruned snapshots and their blobs",
        ),
    ),
)
EXECUTOR = Role(
    "executor",
    "Executors",
    "Spark's executors: gtkafka read tasks (the batch record) and barrier write tasks "
    "(staged parts, dead-letter parts)",
    (
        Grant(PUT, ("*/staging/*", "*/batches/*"), "staged parts; batch records (create)"),
        Grant(GET, ("*/batches/*",), "a retried read task reads the batch record it finds"),
    ),
)
CLI_READ = Role(
    "cli-read",
    "CLI, read-only",
    "`gtbarrier status`, `gtbarrier epochs`, `gtbarrier sweep` without `--delete`",
    (
        Grant(LIST, ALL, "epochs and staged parts are found by listing"),
        Grant(GET, ALL, "the records (and a missing one must be a 404)"),
    ),
)
CLI_SWEEP = Role(
    "cli-sweep-delete",
    "CLI `sweep --delete`",
    "`gtbarrier sweep --delete`: what the read-only CLI does, then it takes the pipeline "
    "(the next fencing token, a driver claim of the barrier) and deletes the leftovers",
    (
        Grant(LIST, ALL, "staged parts are found by listing"),
        Grant(GET, ALL, "the records (and a missing one must be a 404)"),
        Grant(
            PUT,
            ("*/coordinator/driver.json", "*/barrier/state.json"),
            "the next fencing token; the barrier's driver claim",
        ),
        Grant(DELETE, ("*/staging/*",), "the leftover staged parts"),
    ),
)
ROLES: tuple[Role, ...] = (DRIVER, EXECUTOR, CLI_READ, CLI_SWEEP)


def role(name: str) -> Role:
    """The role named ``name``."""
    for r in ROLES:
        if r.name == name:
            return r
    raise KeyError(f"no role {name!r}; roles: {', '.join(r.name for r in ROLES)}")


def without(r: Role, action: str) -> Role:
    """``r`` without ``action`` (the grants of other actions unchanged)."""
    if action not in r.actions():
        raise ValueError(f"role {r.name} has no {action} to take away")
    grants = tuple(g for g in r.grants if g.action != action)
    return replace(r, name=f"{r.name}-without-{action.split(':')[1]}", grants=grants)


def _root(prefix: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def aws_policy(r: Role, bucket: str, prefix: str) -> dict[str, Any]:
    """The IAM policy document of ``r`` for the state store ``s3://bucket/prefix``."""
    root = _root(prefix)
    statements: list[dict[str, Any]] = []
    for g in r.grants:
        sid = g.action.split(":")[1]
        if g.action == LIST:
            statement: dict[str, Any] = {
                "Sid": sid,
                "Effect": "Allow",
                "Action": LIST,
                "Resource": f"arn:aws:s3:::{bucket}",
            }
            if root:  # a store at the bucket's root lists the whole bucket
                statement["Condition"] = {"StringLike": {"s3:prefix": [root + k for k in g.keys]}}
        else:
            resources = [f"arn:aws:s3:::{bucket}/{root}{k}" for k in g.keys]
            statement = {
                "Sid": sid,
                "Effect": "Allow",
                "Action": g.action,
                "Resource": resources[0] if len(resources) == 1 else resources,
            }
        statements.append(statement)
    return {"Version": "2012-10-17", "Statement": statements}


def aws_policy_json(r: Role, bucket: str = EXAMPLE_BUCKET, prefix: str = EXAMPLE_PREFIX) -> str:
    """:func:`aws_policy` as docs/security.md shows it."""
    return json.dumps(aws_policy(r, bucket, prefix), indent=2)


def weed_actions(r: Role, bucket: str, prefix: str, pipeline: str) -> list[str]:
    """``r``'s grants as SeaweedFS identity actions on ``bucket/prefix`` for ``pipeline``:
    ``Action:bucket/path*``, a prefix match (SeaweedFS wildcards only end a pattern, so
    the ``*`` standing for the pipeline becomes ``pipeline``, and an exact key gets a
    trailing ``*``)."""
    root = _root(prefix)
    actions: list[str] = []
    for g in r.grants:
        for k in g.keys:
            pattern = k if k == "*" else k.replace("*", pipeline, 1)
            if not pattern.endswith("*"):
                pattern += "*"
            if not root and pattern == "*":
                # the whole bucket: the bucket-wide form, which a listing without a prefix
                # (the key part empty) also matches
                action = f"{WEED_ACTION[g.action]}:{bucket}"
            else:
                action = f"{WEED_ACTION[g.action]}:{bucket}/{root}{pattern}"
            if action not in actions:
                actions.append(action)
    return [a for a in actions if not _covered(a, actions)]


def _covered(action: str, actions: list[str]) -> bool:
    """Another of ``actions`` with the same verb grants a prefix of ``action``'s path (the
    driver's ``Write`` everywhere makes its deletes' narrower ``Write`` redundant)."""
    verb, _, path = action.partition(":")
    for other in actions:
        other_verb, _, other_path = other.partition(":")
        # what ``other`` grants: a key prefix (``bucket/path*``) or the whole bucket
        granted = other_path.removesuffix("*") if other_path.endswith("*") else other_path + "/"
        if other != action and other_verb == verb and path.startswith(granted):
            return True
    return False


def weed_identity_json(
    r: Role, bucket: str = EXAMPLE_BUCKET, prefix: str = EXAMPLE_PREFIX, pipeline: str = "orders"
) -> str:
    """A SeaweedFS ``-s3.config`` identity of ``r`` as docs/security.md shows it."""
    identity = {
        "name": f"gtbarrier-{r.name}",
        "credentials": [{"accessKey": "<access key>", "secretKey": "<secret key>"}],
        "actions": weed_actions(r, bucket, prefix, pipeline),
    }
    return json.dumps(identity, indent=2)
