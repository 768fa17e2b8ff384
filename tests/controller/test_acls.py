"""controller.acls: Kafka's ACL validation, filter matching and StandardAuthorizer decisions.

Examples pin Kafka's rules one by one; the properties compare the indexed decision
with a scan of every ACL written straight from StandardAuthorizerData's rules.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.acls import (
    AclError,
    AclFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    AuthorizerRules,
    PatternType,
    ResourceType,
    StandardAcl,
    authorize,
    authorize_by_resource_type,
    matching_ids,
    validate_new_acl,
)

O, R, P, A = AclOperation, ResourceType, PatternType, AclPermissionType  # noqa: E741
ALICE, BOB = "User:alice", "User:bob"
NO_RULES = AuthorizerRules()


def acl(name: str, op: AclOperation, perm: AclPermissionType = A.ALLOW, principal: str = ALICE, host: str = "*",
        pattern: PatternType = P.LITERAL, rt: ResourceType = R.TOPIC) -> StandardAcl:
    return StandardAcl(rt, name, pattern, principal, host, op, perm)


def allowed(acls: list[StandardAcl], op: AclOperation, name: str, principal: str = ALICE, host: str = "10.0.0.1",
            rules: AuthorizerRules = NO_RULES, rt: ResourceType = R.TOPIC) -> bool:
    return authorize(AclIndex.build(acls), rules, principal, host, op, rt, name).allowed


def test_no_acl_denies_unless_allow_everyone() -> None:
    assert not allowed([], O.READ, "t")
    assert allowed([], O.READ, "t", rules=AuthorizerRules(allow_if_no_acl=True))
    # An ACL on the resource for someone else: the default rule no longer applies.
    assert not allowed([acl("t", O.READ, principal=BOB)], O.READ, "t", rules=AuthorizerRules(allow_if_no_acl=True))


def test_super_user_beats_deny() -> None:
    rules = AuthorizerRules(super_users=frozenset({ALICE}))
    assert allowed([acl("t", O.ALL, A.DENY)], O.WRITE, "t", rules=rules)


def test_deny_beats_allow() -> None:
    assert allowed([acl("t", O.WRITE)], O.WRITE, "t")
    assert not allowed([acl("t", O.WRITE), acl("t", O.WRITE, A.DENY, principal="User:*")], O.WRITE, "t")
    assert not allowed([acl("*", O.ALL), acl("t", O.ALL, A.DENY, pattern=P.PREFIXED)], O.READ, "topic")


def test_implied_operations_only_for_allow() -> None:
    for op in (O.READ, O.WRITE, O.DELETE, O.ALTER):
        assert allowed([acl("t", op)], O.DESCRIBE, "t")
    assert not allowed([acl("t", O.CREATE)], O.DESCRIBE, "t")
    assert allowed([acl("t", O.ALTER_CONFIGS)], O.DESCRIBE_CONFIGS, "t")
    assert not allowed([acl("t", O.READ)], O.WRITE, "t")
    # A DENY of READ does not deny DESCRIBE.
    assert allowed([acl("t", O.DESCRIBE), acl("t", O.READ, A.DENY)], O.DESCRIBE, "t")
    assert not allowed([acl("t", O.DESCRIBE), acl("t", O.ALL, A.DENY)], O.DESCRIBE, "t")


def test_patterns_and_hosts() -> None:
    acls = [acl("tenant-a.", O.ALL, pattern=P.PREFIXED)]
    assert allowed(acls, O.WRITE, "tenant-a.orders")
    assert not allowed(acls, O.WRITE, "tenant-b.orders")
    assert not allowed(acls, O.WRITE, "tenant-a")
    assert allowed([acl("*", O.READ)], O.READ, "anything")
    assert not allowed([acl("*", O.READ, pattern=P.PREFIXED)], O.READ, "anything")  # "*" prefix is literal
    assert allowed([acl("t", O.READ, host="10.0.0.1")], O.READ, "t", host="10.0.0.1")
    assert not allowed([acl("t", O.READ, host="10.0.0.1")], O.READ, "t", host="10.0.0.2")
    assert allowed([acl("t", O.READ, principal="User:*")], O.READ, "t", principal=BOB)
    assert not allowed([acl("t", O.READ, rt=R.GROUP)], O.READ, "t")


def test_by_resource_type() -> None:
    def may(acls: list[StandardAcl]) -> bool:
        return authorize_by_resource_type(AclIndex.build(acls), AuthorizerRules(), ALICE, "h", O.WRITE, R.TOPIC)

    assert not may([])
    assert may([acl("t", O.WRITE)])
    assert not may([acl("t", O.WRITE), acl("t", O.WRITE, A.DENY)])
    assert not may([acl("t", O.WRITE), acl("*", O.WRITE, A.DENY)])
    assert not may([acl("ab", O.WRITE), acl("a", O.WRITE, A.DENY, pattern=P.PREFIXED)])
    assert may([acl("ab", O.WRITE), acl("b", O.WRITE, A.DENY, pattern=P.PREFIXED)])


def test_validation_messages() -> None:
    validate_new_acl(acl("t", O.READ))
    cases = [
        (acl("t", O.ANY), "Invalid operation ANY"),
        (acl("t", O.READ, A.ANY), "Invalid permissionType ANY"),
        (acl("t", O.READ, pattern=P.MATCH), "Invalid patternType MATCH"),
        (acl("t", O.READ, rt=R.ANY), "Invalid resourceType ANY"),
        (acl("other", O.ALTER, rt=R.CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (acl("", O.READ), "Invalid empty resource name"),
        (acl("t", O.READ, principal="alice"), "Could not parse principal"),
    ]
    for bad, message in cases:
        with pytest.raises(AclError, match=message):
            validate_new_acl(bad)


def test_filters() -> None:
    lit, pre, wild = acl("orders", O.READ), acl("ord", O.READ, pattern=P.PREFIXED), acl("*", O.WRITE)
    acls = {uuid.UUID(int=i): a for i, a in enumerate([lit, pre, wild])}

    def matched(f: AclFilter) -> list[StandardAcl]:
        return [acls[i] for i in matching_ids(acls, f)]

    assert set(matched(AclFilter())) == {lit, pre, wild}
    assert matched(AclFilter(resource_name="orders")) == [lit]
    assert set(matched(AclFilter(resource_name="orders", pattern_type=P.MATCH))) == {lit, pre, wild}
    assert matched(AclFilter(resource_name="ord", pattern_type=P.PREFIXED)) == [pre]
    assert matched(AclFilter(operation=O.WRITE)) == [wild]
    assert matched(AclFilter(principal=BOB)) == []
    with pytest.raises(AclError):
        AclFilter(pattern_type=P.UNKNOWN).validate()


# ---------------------------------------------------------------- properties

NAMES = st.sampled_from(["a", "ab", "abc", "b", "ba", "*", "abd"])
ACLS = st.builds(
    StandardAcl,
    st.sampled_from([R.TOPIC, R.GROUP]), NAMES, st.sampled_from([P.LITERAL, P.PREFIXED]),
    st.sampled_from([ALICE, BOB, "User:*"]), st.sampled_from(["*", "h1", "h2"]),
    st.sampled_from([op for op in AclOperation if op not in (O.UNKNOWN, O.ANY)]),
    st.sampled_from([A.ALLOW, A.DENY]),
)
IMPLIES = {O.DESCRIBE: {O.DESCRIBE, O.READ, O.WRITE, O.DELETE, O.ALTER},
           O.DESCRIBE_CONFIGS: {O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS}}


def reference(acls: list[StandardAcl], rules: AuthorizerRules, principal: str, host: str, op: AclOperation,
              rt: ResourceType, name: str) -> bool:
    if principal in rules.super_users:
        return True
    on_resource = [a for a in acls if a.resource_type == rt and (
        (a.pattern_type == P.LITERAL and a.resource_name in (name, "*"))
        or (a.pattern_type == P.PREFIXED and name.startswith(a.resource_name)))]
    if not on_resource:
        return rules.allow_if_no_acl
    mine = [a for a in on_resource if a.principal in (principal, "User:*") and a.host in ("*", host)]
    if any(a.permission == A.DENY and a.operation in (O.ALL, op) for a in mine):
        return False
    return any(a.permission == A.ALLOW and (a.operation in (O.ALL, op) or a.operation in IMPLIES.get(op, ()))
               for a in mine)


@settings(max_examples=300, deadline=None)
@given(st.lists(ACLS, max_size=12), st.sampled_from([ALICE, BOB, "User:carol"]), st.sampled_from(["h1", "h2"]),
       st.sampled_from([op for op in AclOperation if op not in (O.UNKNOWN, O.ANY, O.ALL)]),
       st.sampled_from([R.TOPIC, R.GROUP]), NAMES, st.booleans(), st.booleans())
def test_indexed_decision_equals_scan(acls: list[StandardAcl], principal: str, host: str, op: AclOperation,
                                      rt: ResourceType, name: str, allow_if_none: bool, bob_super: bool) -> None:
    rules = AuthorizerRules(frozenset({BOB}) if bob_super else frozenset(), allow_if_none)
    got = authorize(AclIndex.build(acls), rules, principal, host, op, rt, name)
    assert got.allowed == reference(acls, rules, principal, host, op, rt, name)
    if got.acl is not None:
        assert got.acl in acls


@settings(max_examples=200, deadline=None)
@given(st.lists(ACLS, max_size=12), st.sampled_from([ALICE, BOB]), st.sampled_from([O.READ, O.WRITE]))
def test_by_resource_type_only_when_some_name_is_allowed(acls: list[StandardAcl], principal: str,
                                                          op: AclOperation) -> None:
    """If some concrete topic is authorized, the by-type answer is yes; a yes names an ALLOW ACL."""
    rules = AuthorizerRules()
    index = AclIndex.build(acls)
    by_type = authorize_by_resource_type(index, rules, principal, "h1", op, R.TOPIC)
    if by_type:
        assert any(a.permission == A.ALLOW and a.resource_type == R.TOPIC for a in acls)
    names = {a.resource_name for a in acls if a.pattern_type == P.LITERAL and a.resource_name != "*"}
    if any(authorize(index, rules, principal, "h1", op, R.TOPIC, n).allowed for n in names) and not any(
            a.permission == A.DENY and a.resource_type == R.TOPIC for a in acls):
        assert by_type


def test_records_replay_into_the_image_and_snapshot() -> None:
    from controller.image import MetadataImage
    from controller.snapshot import image_from_records, image_records
    from controller.state import InvalidRecordError, apply
    from wire.generated.metadata.rec_018_access_control_entry_record import AccessControlEntryRecord
    from wire.generated.metadata.rec_019_remove_access_control_entry_record import (
        RemoveAccessControlEntryRecord,
    )

    one, two = uuid.UUID(int=1), uuid.UUID(int=2)
    image = apply(MetadataImage(), AccessControlEntryRecord(
        id=one, resource_type=2, resource_name="t", pattern_type=4, principal=ALICE, host="*", operation=3,
        permission_type=3), 0)
    image = apply(image, AccessControlEntryRecord(
        id=two, resource_type=3, resource_name="g", pattern_type=3, principal=BOB, host="h", operation=2,
        permission_type=2), 1)
    assert image.acls[one] == acl("t", O.READ, pattern=P.PREFIXED)
    assert image_from_records(image_records(image), image.offset).acls == image.acls
    image = apply(image, RemoveAccessControlEntryRecord(id=one), 2)
    assert list(image.acls) == [two]
    with pytest.raises(InvalidRecordError):
        apply(image, RemoveAccessControlEntryRecord(id=one), 3)
