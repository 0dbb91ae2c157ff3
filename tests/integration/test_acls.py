"""ACLs with real clients: a broker with the StandardAuthorizer, SASL_PLAINTEXT (SCRAM)
and SASL_SSL listeners, users alice, bob and the super user admin. ACLs are managed
with the clients' own admin ACL APIs (confluent-kafka AdminClient, kafka-python
KafkaAdminClient) and apply to the next request of every connection.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.conftest import free_port
from tests.integration.clients import USERS, run_async, write_users

pytestmark = pytest.mark.timeout(120)

USERS3 = {**USERS, "admin": "admin-secret"}
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
MECH = "SCRAM-SHA-256"


def overrides(tmp_path, pki) -> dict:
    names = ("SASL_PLAINTEXT", "SASL_SSL", "SSL", "PLAINTEXT")
    return {
        "listeners": ",".join(f"{n}://127.0.0.1:{free_port()}" for n in names),
        "sasl.credentials.file": str(write_users(tmp_path / "users.json", USERS3)),
        "ssl.keystore.location": str(pki["server"]),
        "ssl.truststore.location": str(pki["ca"]),
        "ssl.client.auth": "requested",
        # the test client certificate is CN=writer,OU=clients,O=Tidegate Tests
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": 0,
    }


@pytest.fixture(scope="module")
def broker(module_broker_factory, tmp_path_factory, pki):
    return module_broker_factory(overrides(tmp_path_factory.mktemp("acl-users"), pki))


def conf(broker, user: str, protocol: str = "SASL_PLAINTEXT", pki=None, **extra) -> dict:
    """confluent-kafka settings for ``user`` on ``protocol``."""
    out = {"bootstrap.servers": broker.listener(protocol), "security.protocol": protocol,
           "sasl.mechanism": MECH, "sasl.username": user, "sasl.password": USERS3[user], **extra}
    if protocol == "SASL_SSL":
        out["ssl.ca.location"] = str(pki["ca"])
    return out


def kp_conf(broker, user: str, pki, protocol: str = "SASL_SSL") -> dict:
    """kafka-python settings for ``user``."""
    out = {"bootstrap_servers": broker.listener(protocol), "security_protocol": protocol,
           "sasl_mechanism": MECH, "sasl_plain_username": user, "sasl_plain_password": USERS3[user]}
    if protocol == "SASL_SSL":
        out["ssl_cafile"] = str(pki["ca"])
    return out


def name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def admin(broker, user="admin") -> AdminClient:
    return AdminClient(conf(broker, user, log_level=0))


def create_topics(broker, *names: str) -> None:
    client = admin(broker)  # kept alive until its futures resolve
    for f in client.create_topics([NewTopic(n, 1) for n in names]).values():
        f.result(15)


def allow(principal, op, resource, rtype=ResourceType.TOPIC, pattern=ResourcePatternType.LITERAL,
          perm=AclPermissionType.ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, resource, pattern, principal, "*", op, perm)


def add(broker, *bindings: AclBinding) -> None:
    client = admin(broker)
    for f in client.create_acls(list(bindings)).values():
        assert f.result(15) is None


def produce_errors(c: dict, *topics: str) -> dict:
    """{topic: error code or None} of one record sent to each topic."""
    results: dict = {}
    p = Producer({**c, "message.timeout.ms": 8000, "log_level": 0})
    for t in topics:
        p.produce(t, b"v", on_delivery=lambda err, msg, t=t: results.__setitem__(t, err and err.code()))
    p.flush(15)
    assert set(results) == set(topics), results
    return results


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_deny_by_default_then_a_prefixed_allow_opens_orders_but_not_payments(broker, pki, protocol):
    prefix = name("orders-") + "-"  # a prefix of this test's own (the broker is shared)
    orders, payments = prefix + "eu", name("payments-")
    create_topics(broker, orders, payments)
    alice = conf(broker, "alice", protocol, pki)
    assert produce_errors(alice, orders) == {orders: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    add(broker, allow("User:alice", AclOperation.WRITE, prefix, pattern=ResourcePatternType.PREFIXED))
    assert produce_errors(alice, orders, payments) == {
        orders: None, payments: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    # bob has no ACL: still denied
    assert produce_errors(conf(broker, "bob", protocol, pki), orders) == {
        orders: KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_deny_beats_allow_with_kafka_python_over_sasl_ssl(broker, pki):
    from kafka import KafkaProducer
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KRT
    from kafka.errors import NoError, TopicAuthorizationFailedError

    prefix = name("ledger-")
    open_topic, locked = prefix + "open", prefix + "locked"
    create_topics(broker, open_topic, locked)
    ka = KafkaAdminClient(**kp_conf(broker, "admin", pki), request_timeout_ms=15_000)
    try:
        acls = [
            ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                ResourcePattern(KRT.TOPIC, prefix, ACLResourcePatternType.PREFIXED)),
            ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                ResourcePattern(KRT.TOPIC, locked, ACLResourcePatternType.LITERAL)),
        ]
        result = ka.create_acls(acls)
        assert len(result["succeeded"]) == 2 and not result["failed"]
        found, error = ka.describe_acls(ACLFilter(
            principal="User:bob", host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KRT.TOPIC, locked, ACLResourcePatternType.MATCH)))
        assert {(a.permission_type, a.resource_pattern.resource_name) for a in found} == {
            (ACLPermissionType.ALLOW, prefix), (ACLPermissionType.DENY, locked)}
        assert error is NoError
    finally:
        ka.close()
    producer = KafkaProducer(**kp_conf(broker, "bob", pki), retries=0, max_block_ms=10_000)
    try:
        assert producer.send(open_topic, b"v").get(timeout=15).offset == 0
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(locked, b"v").get(timeout=15)
    finally:
        producer.close(timeout=5)


def test_super_user_and_metadata_hides_unauthorized_topics(broker, pki):
    from kafka.admin import KafkaAdminClient

    seen, hidden = name("visible-"), name("hidden-")
    create_topics(broker, seen, hidden)
    ka = KafkaAdminClient(**kp_conf(broker, "alice", pki), request_timeout_ms=15_000)
    try:
        assert not {seen, hidden} & set(ka.list_topics())
        # applied live: the same connection sees the topic once the ACL exists
        add(broker, allow("User:alice", AclOperation.DESCRIBE, seen))
        topics = set(ka.list_topics())
        assert seen in topics and hidden not in topics
    finally:
        ka.close()
    everything = admin(broker).list_topics(timeout=15).topics
    assert {seen, hidden} <= set(everything)


def test_tls_certificate_principal_through_the_mapping_rules_and_anonymous(broker, pki):
    topic = name("tls-")
    create_topics(broker, topic)
    tls = {"bootstrap.servers": broker.listener("SSL"), "security.protocol": "SSL",
           "ssl.ca.location": str(pki["ca"]), "ssl.certificate.location": str(pki["client_cert"]),
           "ssl.key.location": str(pki["client_key"])}
    anonymous = {"bootstrap.servers": broker.listener("PLAINTEXT")}
    assert produce_errors(tls, topic) == {topic: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    add(broker, allow("User:writer", AclOperation.WRITE, topic))
    assert produce_errors(tls, topic) == {topic: None}
    assert produce_errors(anonymous, topic) == {topic: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    add(broker, allow("User:ANONYMOUS", AclOperation.WRITE, topic))
    assert produce_errors(anonymous, topic) == {topic: None}


def test_acl_admin_apis_need_cluster_alter_and_describe(broker, pki):
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ACLResourcePatternType as Pat
    from kafka.admin import ResourceType as KRT
    from kafka.errors import ClusterAuthorizationFailedError

    binding = allow("User:bob", AclOperation.READ, name("t-"))
    client = admin(broker, "alice")
    (f,) = client.create_acls([binding]).values()
    with pytest.raises(KafkaException) as exc:
        f.result(15)
    assert exc.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    ka = KafkaAdminClient(**kp_conf(broker, "alice", pki), request_timeout_ms=15_000)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            ka.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                       ResourcePatternFilter(KRT.ANY, None, Pat.ANY)))
    finally:
        ka.close()


def test_consumer_group_needs_read_on_group_and_topic(broker):
    topic, group = name("events-"), name("readers-")
    create_topics(broker, topic)
    assert produce_errors(conf(broker, "admin"), topic) == {topic: None}
    add(broker, allow("User:alice", AclOperation.READ, topic))

    def consume() -> tuple[list[bytes], set[int]]:
        c = Consumer({**conf(broker, "alice"), "group.id": group, "auto.offset.reset": "earliest",
                      "log_level": 0, "session.timeout.ms": 6000})
        got, errors = [], set()
        try:
            c.subscribe([topic])
            for _ in range(40):
                m = c.poll(0.25)
                if m is None:
                    continue
                if m.error():
                    errors.add(m.error().code())
                    if m.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                        break
                else:
                    got.append(m.value())
                    break
        finally:
            c.close()
        return got, errors

    got, errors = consume()
    assert got == [] and KafkaError.GROUP_AUTHORIZATION_FAILED in errors
    add(broker, allow("User:alice", AclOperation.READ, group, rtype=ResourceType.GROUP))
    got, errors = consume()
    assert got == [b"v"], errors


def test_transactional_id_needs_write(broker):
    topic, txn = name("txn-topic-"), name("txn-")
    create_topics(broker, topic)
    add(broker, allow("User:bob", AclOperation.WRITE, topic))
    settings = {**conf(broker, "bob"), "transactional.id": txn, "log_level": 0}
    p = Producer(settings)
    with pytest.raises(KafkaException) as exc:
        p.init_transactions(15)
    assert exc.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    add(broker, allow("User:bob", AclOperation.WRITE, txn, rtype=ResourceType.TRANSACTIONAL_ID))
    p = Producer(settings)
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, b"in-txn")
    p.commit_transaction(15)
    consumer = Consumer({**conf(broker, "admin"), "group.id": name("g-"), "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "log_level": 0})
    try:
        consumer.subscribe([topic])
        got = None
        for _ in range(40):
            m = consumer.poll(0.25)
            if m is not None and not m.error():
                got = m.value()
                break
        assert got == b"in-txn"
    finally:
        consumer.close()


def test_aiokafka_producer_consumer_and_admin_with_acls(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic
    from aiokafka.errors import TopicAuthorizationFailedError

    topic, group = name("aio-"), name("aio-group-")
    sasl = {"bootstrap_servers": broker.listener("SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": MECH, "sasl_plain_username": "alice", "sasl_plain_password": USERS3["alice"]}
    add(
        broker,
        allow("User:alice", AclOperation.CREATE, "aio-", pattern=ResourcePatternType.PREFIXED),
        allow("User:alice", AclOperation.WRITE, topic),
        allow("User:alice", AclOperation.READ, topic),
        allow("User:alice", AclOperation.READ, group, rtype=ResourceType.GROUP),
    )

    async def scenario() -> tuple[list[bytes], list[int]]:
        client = AIOKafkaAdminClient(**sasl, request_timeout_ms=15_000)
        await client.start()
        try:
            created = await client.create_topics([AioNewTopic(topic, 1, 1), AioNewTopic(name("other-"), 1, 1)])
            errors = [t[1] for t in created.topic_errors]  # (name, error_code, message)
        finally:
            await client.close()
        producer = AIOKafkaProducer(**sasl)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aio")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **sasl, group_id=group, auto_offset_reset="earliest")
        await consumer.start()
        try:
            msg = await asyncio.wait_for(consumer.getone(), 20)
            await consumer.commit()
        finally:
            await consumer.stop()
        return [msg.value], errors

    got, errors = run_async(scenario())
    assert errors == [0, TopicAuthorizationFailedError.errno]
    assert got == [b"aio"]


def test_acls_survive_a_restart_and_removal_applies_live(broker_factory, tmp_path, pki):
    b = broker_factory(overrides(tmp_path, pki))
    topic = name("kept-")
    create_topics(b, topic)
    add(b, allow("User:alice", AclOperation.WRITE, "kept-", pattern=ResourcePatternType.PREFIXED))
    b.restart()
    assert produce_errors(conf(b, "alice"), topic) == {topic: None}
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    client = admin(b)
    (deleted,) = client.delete_acls([everything]).values()
    assert len(deleted.result(15)) == 1
    assert client.describe_acls(everything).result(15) == []
    assert produce_errors(conf(b, "alice"), topic) == {topic: KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_tidegate_acls_cli_with_command_config_over_sasl_ssl(broker, pki, tmp_path):
    """`tidegate acls` (kafka-acls.sh) adds, lists and removes ACLs; alice's access
    follows at once."""
    import subprocess
    import sys

    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        f"ssl.truststore.location={pki['ca']}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="admin" password="{USERS3["admin"]}";\n'
    )

    def acls(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tidegate", "acls", "--bootstrap-server", broker.listener("SASL_SSL"),
             "--command-config", str(props), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    prefix = name("cli-")
    topic = prefix + "x"
    create_topics(broker, topic)
    r = acls("--add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Describe",
             "--topic", prefix, "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    assert f"ResourcePattern(resourceType=TOPIC, name={prefix}, patternType=PREFIXED)" in r.stdout
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in r.stdout
    assert produce_errors(conf(broker, "alice"), topic) == {topic: None}
    r = acls("--list", "--topic", topic, "--resource-pattern-type", "match")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("principal=User:alice") == 2
    r = acls("--remove", "--force", "--topic", prefix, "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    assert "Removed ACLs" in r.stdout
    assert produce_errors(conf(broker, "alice"), topic) == {topic: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    group = name("cli-group-")
    r = acls("--add", "--allow-principal", "User:bob", "--consumer", "--topic", topic, "--group", group)
    assert r.returncode == 0, r.stderr
    r = acls("--list", "--principal", "User:bob", "--topic", topic, "--group", group)
    assert r.returncode == 0, r.stderr
    assert sorted(line.split("operation=")[1].split(",")[0] for line in r.stdout.splitlines()
                  if "principal=User:bob" in line) == ["DESCRIBE", "READ", "READ"]
    # a user without CLUSTER ALTER is refused with Kafka's error
    props.write_text(props.read_text().replace(USERS3["admin"], USERS3["bob"]).replace('"admin"', '"bob"'))
    r = acls("--add", "--allow-principal", "User:bob", "--topic", "*")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr
    r = acls("--add", "--topic", "t")
    assert r.returncode == 2 and "--allow-principal" in r.stderr


def test_tidegate_producer_idempotent_with_write_on_a_topic_only(broker):
    """tidegate's own (idempotent) producer: InitProducerId needs IDEMPOTENT_WRITE on the
    cluster or WRITE on some topic; WRITE on the topic is enough for everything."""
    from tests.integration.clients import produce
    from tidegate.producer.errors import ClusterAuthorizationError

    topic = name("own-")
    create_topics(broker, topic)
    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECH, "sasl.username": "bob",
                "sasl.password": USERS3["bob"], "enable.idempotence": True, "delivery.timeout.ms": 10_000,
                "request.timeout.ms": 5_000}
    errors: list = []
    produce(broker.listener("SASL_PLAINTEXT"), topic, [b"a"], client="tidegate", conf=security, errors=errors,
            timeout=15)
    # no ACL on the topic: refused at InitProducerId (CLUSTER_AUTHORIZATION_FAILED) when bob
    # may write no topic at all, else at the topic (other tests here give bob other topics)
    assert len(errors) == 1, errors
    assert isinstance(errors[0], ClusterAuthorizationError) or errors[0].code == 29, errors
    add(broker, allow("User:bob", AclOperation.WRITE, topic))
    delivered = produce(broker.listener("SASL_PLAINTEXT"), topic, [b"a", b"b"], client="tidegate",
                        conf=security, timeout=15)
    assert [d.offset for d in delivered] == [0, 1]
