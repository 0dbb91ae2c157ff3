"""The StandardAuthorizer's decisions, sans-IO: the cases Kafka's StandardAuthorizerTest
pins (kafka-transactions-compaction-acls.md section 4.5), binding filters, the
deduplicated audit log on an injected clock, principals from TLS DNs, the ACL file."""

from __future__ import annotations

import logging

import pytest

from tidegate.clock import MockClock
from tidegate.security.authorizer.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    all_operations_bits,
)
from tidegate.security.authorizer.acl_store import AclStore
from tidegate.security.authorizer.principal import SslPrincipalMapper
from tidegate.security.authorizer.standard_authorizer import (
    AUDIT_INTERVAL_MS,
    StandardAuthorizer,
    parse_super_users,
)
from tidegate.server.authorization import java_host_address

Op = AclOperation
T = ResourceType.TOPIC
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED


def acl(principal, op, name, pattern=LIT, perm=ALLOW, host="*", rtype=T):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authz(*acls, allow_everyone=False, super_users=frozenset(), clock=None):
    a = StandardAuthorizer(super_users, allow_everyone, clock=clock or MockClock())
    a.load(acls)
    return a


def allowed(a, principal, op, name, host="10.0.0.1", rtype=T):
    return a.authorize(principal, host, op, rtype, name)


@pytest.mark.parametrize("text", ["User:bob;User:alice ", ";  User:bob  ;  User:alice "])
def test_super_users_parsing(text):
    assert parse_super_users(text) == {"User:bob", "User:alice"}


def test_super_users_blank_and_invalid():
    assert parse_super_users("  ") == frozenset()
    assert parse_super_users(None) == frozenset()
    with pytest.raises(ValueError):
        parse_super_users("bob;:alice")


@pytest.mark.parametrize("everyone", [True, False])
def test_allow_everyone_if_no_acl_found_only_where_a_resource_has_no_acl(everyone):
    a = authz(acl("User:Alice", Op.READ, "topic1"), allow_everyone=everyone)
    assert not allowed(a, "User:Bob", Op.READ, "topic1")  # topic1 has an ACL: decided by it
    assert allowed(a, "User:Bob", Op.READ, "topic2") is everyone
    assert allowed(a, "User:Alice", Op.READ, "topic1")


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_read_write_delete_alter_imply_describe(op):
    a = authz(acl("User:alice", op, "foo_", PRE))
    assert allowed(a, "User:alice", Op.DESCRIBE, "foo_bar")
    assert not allowed(a, "User:alice", Op.DESCRIBE_CONFIGS, "foo_bar")


def test_create_implies_nothing_and_alter_configs_implies_describe_configs():
    a = authz(acl("User:alice", Op.CREATE, "foo_", PRE), acl("User:alice", Op.ALTER_CONFIGS, "bar"))
    assert not allowed(a, "User:alice", Op.DESCRIBE, "foo_bar")
    assert allowed(a, "User:alice", Op.DESCRIBE_CONFIGS, "bar")
    assert not allowed(a, "User:alice", Op.DESCRIBE, "bar")


def test_a_deny_implies_nothing():
    a = authz(acl("User:alice", Op.READ, "foo", perm=DENY), acl("User:alice", Op.DESCRIBE, "foo"))
    assert allowed(a, "User:alice", Op.DESCRIBE, "foo")
    assert not allowed(a, "User:alice", Op.READ, "foo")


def test_deny_all_beats_allow():
    a = authz(
        acl("User:alice", Op.ALL, "foo", LIT, DENY),
        acl("User:alice", Op.READ, "foo", PRE, ALLOW),
        acl("User:*", Op.ALL, "foo", LIT, DENY),
        acl("User:*", Op.DESCRIBE, "foo", PRE, ALLOW),
    )
    for op in (Op.WRITE, Op.READ, Op.DESCRIBE):
        assert not allowed(a, "User:alice", op, "foo")
    assert allowed(a, "User:alice", Op.READ, "foobar")
    assert allowed(a, "User:bob", Op.DESCRIBE, "foobaz")
    assert not allowed(a, "User:bob", Op.READ, "foobaz")


def test_host_matching():
    a = authz(acl("User:alice", Op.READ, "foo", perm=DENY, host="192.168.1.1"), acl("User:alice", Op.READ, "foo"))
    assert not allowed(a, "User:alice", Op.READ, "foo", host="192.168.1.1")
    assert allowed(a, "User:alice", Op.READ, "foo", host="192.168.1.2")


def test_prefixes_literals_and_wildcard():
    a = authz(
        acl("User:bob", Op.ALL, "f", PRE),
        acl("User:bob", Op.ALL, "foobar", LIT),
        acl("User:alice", Op.ALL, "fooa", PRE),
        acl("User:carol", Op.WRITE, "*", LIT),
    )
    assert allowed(a, "User:bob", Op.WRITE, "foobarr")
    assert not allowed(a, "User:bob", Op.READ, "goobar")
    assert allowed(a, "User:alice", Op.DESCRIBE, "fooa")
    assert allowed(a, "User:carol", Op.WRITE, "anything")
    # every topic now has an ACL (the literal *): others are denied even with allow-everyone
    assert not allowed(a, "User:dave", Op.WRITE, "anything")


def test_before_the_initial_load_only_super_users_pass():
    a = StandardAuthorizer(frozenset({"User:admin"}), clock=MockClock())
    assert a.authorize("User:admin", "h", Op.WRITE, T, "t")
    assert not a.authorize("User:alice", "h", Op.WRITE, T, "t")
    a.load([acl("User:alice", Op.WRITE, "t")])
    assert a.authorize("User:alice", "h", Op.WRITE, T, "t")


def test_super_user_passes_whatever_the_acls():
    a = authz(acl("User:*", Op.ALL, "t", perm=DENY), super_users=frozenset({"User:admin"}))
    assert allowed(a, "User:admin", Op.ALTER, "t")


def test_authorize_by_resource_type():
    # Kafka: any applicable ALLOW of the type not covered by an applicable DENY
    a = authz(acl("User:alice", Op.WRITE, "orders-", PRE))
    assert a.authorize_by_resource_type("User:alice", "h", Op.WRITE, T)
    assert not a.authorize_by_resource_type("User:bob", "h", Op.WRITE, T)
    covered = authz(acl("User:alice", Op.WRITE, "orders-x"), acl("User:alice", Op.WRITE, "orders-", PRE, DENY))
    assert not covered.authorize_by_resource_type("User:alice", "h", Op.WRITE, T)
    same = authz(acl("User:alice", Op.WRITE, "x"), acl("User:alice", Op.ALL, "x", perm=DENY))
    assert not same.authorize_by_resource_type("User:alice", "h", Op.WRITE, T)
    star_deny = authz(acl("User:alice", Op.WRITE, "y"), acl("User:*", Op.WRITE, "*", perm=DENY))
    assert not star_deny.authorize_by_resource_type("User:alice", "h", Op.WRITE, T)
    assert authz(allow_everyone=True).authorize_by_resource_type("User:x", "h", Op.WRITE, T)


def test_authorized_operations_bits():
    assert all_operations_bits(T) == 3576
    assert all_operations_bits(ResourceType.GROUP) == 3400
    assert all_operations_bits(ResourceType.CLUSTER) == 8096
    a = authz(acl("User:alice", Op.READ, "t"))
    assert a.authorized_operations("User:alice", "h", T, "t") == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert a.authorized_operations("User:bob", "h", T, "t") == 0


def test_filters():
    acls = [
        acl("User:a", Op.READ, "foo"),
        acl("User:a", Op.READ, "*"),
        acl("User:a", Op.READ, "fo", PRE),
        acl("User:b", Op.WRITE, "foo", PRE, DENY),
        acl("User:a", Op.READ, "g", rtype=ResourceType.GROUP),
    ]

    def f(name, pattern, rtype=ResourceType.ANY, principal=None, op=Op.ANY, perm=AclPermissionType.ANY):
        return AclBindingFilter(rtype, name, pattern, principal, None, op, perm)

    assert [x for x in acls if f("foo", PatternType.MATCH).matches(x)] == acls[:4]
    assert [x for x in acls if f("foo", PatternType.ANY).matches(x)] == [acls[0], acls[3]]
    assert [x for x in acls if f("foo", LIT).matches(x)] == [acls[0]]
    assert [x for x in acls if f(None, PRE).matches(x)] == [acls[2], acls[3]]
    assert [x for x in acls if f(None, PatternType.ANY, rtype=ResourceType.GROUP).matches(x)] == [acls[4]]
    assert [x for x in acls if f(None, PatternType.ANY, perm=DENY).matches(x)] == [acls[3]]
    assert [x for x in acls if f(None, PatternType.ANY, principal="User:b").matches(x)] == [acls[3]]


def test_create_is_idempotent_and_delete_returns_what_it_removed():
    a = authz()
    x = acl("User:a", Op.READ, "t")
    assert a.create(x) and not a.create(x)
    assert list(a.acls) == [x]
    everything = AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, None, None, Op.ANY, AclPermissionType.ANY)
    assert a.delete([everything, everything]) == [[x], []]
    assert not allowed(a, "User:a", Op.READ, "t")


@pytest.mark.parametrize(
    ("binding", "reason"),
    [
        (AclBinding(ResourceType.ANY, "t", LIT, "User:a", "*", Op.READ, ALLOW), "resourceType"),
        (AclBinding(T, "t", PatternType.MATCH, "User:a", "*", Op.READ, ALLOW), "patternType"),
        (AclBinding(T, "t", LIT, "User:a", "*", Op.ANY, ALLOW), "operation"),
        (AclBinding(T, "t", LIT, "User:a", "*", Op.READ, AclPermissionType.ANY), "permissionType"),
        (AclBinding(T, "", LIT, "User:a", "*", Op.READ, ALLOW), "empty"),
        (AclBinding(ResourceType.CLUSTER, "c", LIT, "User:a", "*", Op.ALTER, ALLOW), "kafka-cluster"),
        (AclBinding(T, "t", LIT, "alice", "*", Op.READ, ALLOW), "colon"),
    ],
)
def test_invalid_bindings(binding, reason):
    assert reason in binding.invalid_reason()


def test_denials_are_logged_once_per_minute_per_principal_resource_operation(caplog):
    clock = MockClock()
    a = authz(clock=clock)
    caplog.set_level(logging.INFO, logger="tidegate.authorizer")

    def denials():
        return len([r for r in caplog.records if r.name == "tidegate.authorizer"])

    for _ in range(3):
        assert not a.authorize("User:a", "h", Op.WRITE, T, "t", api="PRODUCE")
    assert denials() == 1
    a.authorize("User:a", "h", Op.READ, T, "t", api="FETCH")  # another operation
    a.authorize("User:b", "h", Op.WRITE, T, "t", api="PRODUCE")  # another principal
    assert denials() == 3
    clock.set_milliseconds(AUDIT_INTERVAL_MS - 1)
    a.authorize("User:a", "h", Op.WRITE, T, "t", api="PRODUCE")
    assert denials() == 3
    clock.set_milliseconds(AUDIT_INTERVAL_MS)
    a.authorize("User:a", "h", Op.WRITE, T, "t", api="PRODUCE")
    assert denials() == 4
    assert a.denied_by_api == {"PRODUCE": 6, "FETCH": 1}
    # authorized-operations checks are neither logged nor counted
    a.authorized_operations("User:z", "h", T, "t")
    assert denials() == 4 and sum(a.denied_by_api.values()) == 7


def test_ssl_principal_mapping_rules():
    m = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
        "DEFAULT"
    )
    assert m.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert m.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US") == "duke@javasoft"
    assert m.name("cn=duke,OU=x") == "DUKE"
    assert m.name("O=Acme") == "O=Acme"
    assert SslPrincipalMapper(None).name("CN=a,O=b") == "CN=a,O=b"
    with pytest.raises(ValueError):
        SslPrincipalMapper("RULE:nope")
    with pytest.raises(ValueError):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")  # no rule matches


def test_java_host_address():
    assert java_host_address("127.0.0.1") == "127.0.0.1"
    assert java_host_address("::1") == "0:0:0:0:0:0:0:1"
    assert java_host_address("fe80::12:ab") == "fe80:0:0:0:0:0:12:ab"
    assert java_host_address("::ffff:10.1.2.3") == "10.1.2.3"


def test_acl_store_round_trip(tmp_path):
    store = AclStore(tmp_path)
    assert store.load() == []
    acls = [acl("User:a", Op.READ, "t"), acl("User:*", Op.ALL, "p-", PRE, DENY, host="10.0.0.1")]
    store.save(acls)
    assert AclStore(tmp_path).load() == acls
    assert not (tmp_path / "acls.json.tmp").exists()
    AclStore(None).save(acls)  # no data dir: nothing is written
