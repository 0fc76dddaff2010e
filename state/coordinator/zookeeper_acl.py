"""The ZooKeeper ACLs a pipeline's znodes must carry with ``zookeeper_auth`` (pure).

With credentials every znode the session creates gets ``CREATOR_ALL_ACL``: ZooKeeper's
``auth`` id, which the server records as the identity the client authenticated as, with
every permission. These functions say what that recorded ACL is (:func:`own_acl`), whether
a node's ACL is this identity's alone (:func:`acl_is_own`), whether the shared parent
``/gtbarrier`` lets a client without credentials delete or re-ACL under it
(:func:`shared_parent_admits_anybody`), and how an ACL is shown in a message, a digest's
hash hidden (:func:`shown_acl`). They read and change nothing:
:meth:`~state.coordinator.zookeeper_session.ZooKeeperSession.prepare_pipeline` applies
them to the nodes it reads.
"""

from __future__ import annotations

from kazoo.security import ACL, Id, Permissions, make_digest_acl_credential

from state.coordinator.config import ZooKeeperAuth

#: The ACL of the shared parent ``/gtbarrier`` that a session with credentials creates, or
#: makes of ZooKeeper's open ACL: anybody may create a pipeline's root under it (pipelines
#: of other identities, and without credentials, share it); nobody may list, delete or
#: re-ACL what is there (deleting a child needs DELETE on the parent, whatever the child's
#: own ACL), not even this identity: the parent is nobody's.
SHARED_PARENT_ACL: list[ACL] = [ACL(Permissions.CREATE, Id("world", "anyone"))]

# Ids that admit clients without credentials: anybody (world) or any address (ip).
_ANYBODY_SCHEMES = ("world", "ip")
_PERMISSION_LETTERS = (
    (Permissions.CREATE, "c"),
    (Permissions.DELETE, "d"),
    (Permissions.READ, "r"),
    (Permissions.WRITE, "w"),
    (Permissions.ADMIN, "a"),
)


def own_acl(auth: ZooKeeperAuth) -> list[ACL] | None:
    """The ACL ZooKeeper records for a node this identity creates with ``CREATOR_ALL_ACL``:
    for ``digest``, ``digest:<user>:<base64 sha1 of user:password>`` with every
    permission; None for another scheme, whose id only the server's provider knows."""
    if auth.scheme != "digest":
        return None
    user, _, password = auth.credentials().partition(":")
    return [ACL(Permissions.ALL, Id("digest", make_digest_acl_credential(user, password)))]


def acl_is_own(acl: list[ACL], own: list[ACL] | None, auth: ZooKeeperAuth | None) -> bool:
    """Whether ``acl`` is this identity's alone: exactly ``own`` (``digest``), or, for a
    scheme whose id cannot be known here, one entry of that scheme with every permission."""
    if own is not None:
        return list(acl) == own
    return (
        auth is not None
        and len(acl) == 1
        and acl[0].perms == Permissions.ALL
        and acl[0].id.scheme == auth.scheme
    )


def shared_parent_admits_anybody(acl: list[ACL]) -> bool:
    """Whether the shared parent lets a client without credentials (``world``, ``ip``)
    delete, write or re-ACL under it; creating and reading are shared by design."""
    harmful = Permissions.DELETE | Permissions.WRITE | Permissions.ADMIN
    return any(a.id.scheme in _ANYBODY_SCHEMES and a.perms & harmful for a in acl)


def shown_acl(acl: list[ACL]) -> str:
    """``acl`` as ZooKeeper's CLI shows it (``scheme:id:cdrwa``), a digest's hash hidden:
    ``digest:user:<hash hidden>`` (the hash of the password can be attacked offline)."""
    shown = []
    for entry in acl:
        if entry.id.scheme == "digest":
            ident = f"digest:{entry.id.id.partition(':')[0]}:<hash hidden>"
        else:
            ident = f"{entry.id.scheme}:{entry.id.id}"
        letters = "".join(c for bit, c in _PERMISSION_LETTERS if entry.perms & bit)
        shown.append(f"{ident}:{letters or '-'}")
    return "[" + ", ".join(shown) + "]"
