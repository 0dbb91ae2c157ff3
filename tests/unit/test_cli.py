"""tidegate.cli: the ``tidegate`` command."""

from __future__ import annotations

import gc
import logging
import re
import subprocess
import sys
import types

import pytest
from click.testing import CliRunner

import tidegate.server
from tidegate import __version__
from tidegate.cli import main
from tidegate.cli.serve import LOG_FORMAT
from tidegate.config import BROKER_CONFIG, BrokerConfig, ConfigError


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


class FakeBroker:
    """Stands in for tidegate.server.broker: records the config ``run`` was given."""

    def __init__(self, exit_code: int | None = 0, error: Exception | None = None) -> None:
        self.configs: list[BrokerConfig] = []
        self.exit_code = exit_code
        self.error = error
        #: the garbage collector's state as ``run`` was called
        self.gc_enabled: list[bool] = []

    def run(self, config: BrokerConfig) -> int | None:
        self.configs.append(config)
        self.gc_enabled.append(gc.isenabled())
        if self.error is not None:
            raise self.error
        return self.exit_code


@pytest.fixture
def install_broker(monkeypatch):
    def install(fake: FakeBroker) -> FakeBroker:
        module = types.ModuleType("tidegate.server.broker")
        module.run = fake.run
        monkeypatch.setitem(sys.modules, "tidegate.server.broker", module)
        monkeypatch.setattr(tidegate.server, "broker", module, raising=False)
        return fake

    return install


@pytest.fixture
def basic_config_calls(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: calls.append(kw))
    return calls


def test_version(runner):
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"tidegate, version {__version__}"


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "tidegate", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    assert __version__ in proc.stdout


def test_serve_help_documents_every_broker_key(runner):
    result = runner.invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    out = result.output
    assert out.startswith("Usage: tidegate serve [OPTIONS] [SERVER_PROPERTIES]")
    flat = re.sub(r"\s+", " ", out)
    for option in ("--config", "--override", "--log-level", "SERVER_PROPERTIES"):
        assert option in out
    for name, key in BROKER_CONFIG.items():
        assert f"\n  {name} (" in out, name
        default = "null" if key.default is None else key.default_string
        assert f"default {default}" in flat, name
        assert key.doc in flat, name
    assert "num.partitions (int, default 1, valid [1,...])" in out
    assert "The default number of partitions for new topics." in out


def test_invalid_value_exits_2_with_message_on_stderr(runner, install_broker):
    fake = install_broker(FakeBroker())
    result = runner.invoke(main, ["serve", "--override", "num.partitions=-3"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "tidegate: Invalid value -3 for configuration num.partitions: Value must be at least 1"
    )
    assert fake.configs == []  # the broker never started


def test_unknown_key_in_file_exits_2(runner, tmp_path, install_broker):
    install_broker(FakeBroker())
    props = tmp_path / "server.properties"
    props.write_text("log.dir.foo=/x\n", encoding="utf-8")
    result = runner.invoke(main, ["serve", str(props)])
    assert result.exit_code == 2
    assert result.stderr.startswith("tidegate: Unknown configuration 'log.dir.foo'")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--override", "num.partitions"], "expected key=value"),
        (["--override", "listeners=SSL://127.0.0.1:9093"], "needs ssl.keystore.location"),
        (["--config", "/nonexistent/server.properties"], "does not exist"),
    ],
)
def test_config_errors_exit_2(runner, install_broker, args, fragment):
    install_broker(FakeBroker())
    result = runner.invoke(main, ["serve", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith("tidegate: ")
    assert fragment in result.stderr


def test_serve_runs_broker_with_file_and_overrides(
    runner, tmp_path, install_broker, basic_config_calls
):
    fake = install_broker(FakeBroker(exit_code=0))
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=3\nnode.id=4\n", encoding="utf-8")
    result = runner.invoke(main, ["serve", str(props), "--override", "num.partitions=6"])
    assert result.exit_code == 0, result.output
    (config,) = fake.configs
    assert config.num_partitions == 6  # override wins over the file
    assert config.node_id == 4


def test_serve_accepts_config_flag(runner, tmp_path, install_broker, basic_config_calls):
    fake = install_broker(FakeBroker())
    props = tmp_path / "server.properties"
    props.write_text("node.id=9\n", encoding="utf-8")
    result = runner.invoke(main, ["serve", "--config", str(props)])
    assert result.exit_code == 0
    assert fake.configs[0].node_id == 9


def test_serve_rejects_two_different_properties_files(runner, tmp_path, install_broker):
    fake = install_broker(FakeBroker())
    result = runner.invoke(main, ["serve", "a.properties", "--config", "b.properties"])
    assert result.exit_code == 2
    assert "not both" in result.output
    assert fake.configs == []


def test_serve_exits_with_the_brokers_exit_code(runner, install_broker, basic_config_calls):
    install_broker(FakeBroker(exit_code=3))
    assert runner.invoke(main, ["serve"]).exit_code == 3


@pytest.mark.parametrize("error", [None, ConfigError("cluster.id mismatch")])
def test_serve_starts_the_broker_with_the_garbage_collector_off(runner, install_broker, basic_config_calls, error):
    """The broker turns it back on once it listens (tidegate.server.broker); when it
    returns or fails, serve does."""
    fake = install_broker(FakeBroker(error=error))
    assert gc.isenabled()
    runner.invoke(main, ["serve"])
    assert fake.gc_enabled == [False]
    assert gc.isenabled()


def test_importing_the_cli_imports_neither_the_broker_nor_its_config():
    """``tidegate --help`` and the admin commands do not pay for the broker's modules;
    ``serve`` imports them after turning the garbage collector off."""
    code = ("import sys, tidegate.cli; print(sorted(m for m in sys.modules if m.startswith(("
            "'tidegate.config', 'tidegate.server', 'tidegate.log', 'prometheus_client'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_config_error_raised_by_the_broker_exits_2(runner, install_broker, basic_config_calls):
    install_broker(FakeBroker(error=ConfigError("cluster.id mismatch")))
    result = runner.invoke(main, ["serve"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "tidegate: cluster.id mismatch"


def test_log_level_configures_logging(runner, install_broker, basic_config_calls):
    install_broker(FakeBroker())
    assert runner.invoke(main, ["serve"]).exit_code == 0
    assert runner.invoke(main, ["serve", "--log-level", "debug"]).exit_code == 0
    assert [c["level"] for c in basic_config_calls] == ["INFO", "DEBUG"]
    assert all(c["format"] == LOG_FORMAT and "asctime" in c["format"] for c in basic_config_calls)
    result = runner.invoke(main, ["serve", "--log-level", "chatty"])
    assert result.exit_code == 2


# ---- tidegate configs: argument handling (the broker side is in the integration tests) -----
def test_add_config_is_split_as_kafka_configs_splits_it():
    from tidegate.cli.configs import _parse_add_config

    assert _parse_add_config(
        "retention.ms=1000,cleanup.policy=[delete,compact], a = b ,"
        "follower.replication.throttled.replicas=[0:1,1:1],ssl.endpoint.identification.algorithm="
    ) == {
        "retention.ms": "1000",
        "cleanup.policy": "delete,compact",
        "a": "b",
        "follower.replication.throttled.replicas": "0:1,1:1",
        "ssl.endpoint.identification.algorithm": "",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--alter", "--entity-type", "topics", "--add-config", "a=1"],
         "--entity-name or --entity-default must be specified with each --entity-type for --alter"),
        (["--describe", "--entity-type", "topics", "--entity-type", "users"],
         "--entity-type topics cannot be combined with another."),
        (["--alter", "--entity-type", "topics", "--entity-default", "--add-config", "a=1"],
         "--entity-default is for brokers, users and clients."),
        (["--alter", "--all", "--entity-type", "brokers", "--entity-name", "1", "--add-config", "a=1"],
         "--all goes with --describe of topics, brokers or groups."),
        (["--alter", "--entity-type", "groups", "--entity-default", "--add-config", "a=1"],
         "--entity-default is for brokers, users and clients."),
        (["--alter", "--group", "g", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a=1"],
         "--entity-type topics cannot be combined with another."),
        (["--alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "novalue"],
         'Invalid entity config: all configs to be added must be in the format "key=val".'),
        (["--alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a b=1"],
         "Invalid character found for config key: a b"),
        (["--alter", "--entity-type", "topics", "--entity-name", "t"],
         "--alter needs --add-config or --delete-config."),
    ],
)
def test_configs_usage_errors(runner, args, message):
    result = runner.invoke(main, ["configs", "--bootstrap-server", "127.0.0.1:1", *args])
    assert result.exit_code == 2, result.output
    assert message in re.sub(r"\s+", " ", result.output)


# ---- tidegate consumer-groups / share-groups: Kafka's option checks, before connecting -------
_GROUP_TOOLS = ("consumer-groups", "share-groups")


def _group_tool(runner, tool, args):
    return runner.invoke(main, [tool, "--bootstrap-server", "127.0.0.1:1", *args])


@pytest.mark.parametrize("tool", _GROUP_TOOLS)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--describe", "--group", "g", "--all-groups"], 'Option "[group]" can\'t be used with option "[all-groups]"'),
        (["--list", "--group", "g"], 'Option "[group]" can\'t be used with option "[list]"'),
        (["--list", "--topic", "t"], 'Option "[topic]" can\'t be used with option "[list]"'),
        (["--describe", "--group", "g", "--topic", "t"], 'Option "[topic]" can\'t be used with option "[describe]"'),
        (["--list", "--members"], "Option(s) [members] are unavailable given other options on the command line"),
        (["--delete", "--group", "g", "--offsets"], "Option(s) [offsets] are unavailable given other options"),
        (["--list", "--verbose"], "Option(s) [verbose] are unavailable given other options on the command line"),
        (["--delete", "--group", "g", "--state"], "Option(s) [state] are unavailable given other options"),
        (["--describe", "--group", "g", "--state", "Stable"], "Option [describe] does not take a value for [state]"),
        (["--describe", "--group", "g", "--members", "--offsets"],
         "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
        (["--describe", "--group", "g", "--state", "--members"],
         "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
        (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
        (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options: [group], [topic]"),
        (["--delete-offsets", "--topic", "t"], "Option [delete-offsets] takes the following options: [group], [topic]"),
        (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute"],
         "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
        (["--list", "--delete", "--all-groups"], "Command must include exactly one action"),
    ],
)
def test_group_tools_refuse_what_kafkas_refuse(runner, tool, args, message):
    result = _group_tool(runner, tool, args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("consumer-groups", ["--delete", "--group", "g", "--topic", "t"],
         "The consumer does not support topic-specific offset deletion from a consumer group."),
        ("share-groups", ["--delete", "--group", "g", "--topic", "t"],
         "Option [delete] does not take the option: [topic]"),
        ("consumer-groups", ["--delete", "--group", "g", "--all-groups"],
         'Option "[group]" can\'t be used with option "[all-groups]"'),
        ("share-groups", ["--delete", "--group", "g", "--all-groups"],
         "Option [delete] takes either [group] or [all-groups], not both."),
        ("consumer-groups", ["--delete"], "Option [delete] takes one of these options: [all-groups], [group]"),
        ("share-groups", ["--delete"], "Option [delete] takes the options [group] or [all-groups]"),
        ("consumer-groups", ["--reset-offsets", "--group", "g", "--all-groups", "--all-topics", "--to-earliest"],
         'Option "[group]" can\'t be used with option "[all-groups]"'),
        ("consumer-groups", ["--reset-offsets", "--to-earliest", "--all-topics"],
         "Option [reset-offsets] takes one of these options: [all-groups], [group]"),
        ("share-groups", ["--reset-offsets", "--group", "g", "--to-earliest"],
         "Option [reset-offsets] takes the option: [execute] or [dry-run]"),
        ("share-groups", ["--reset-offsets", "--all-groups", "--to-earliest", "--dry-run"],
         "Option [reset-offsets] takes the option: [group]"),
        ("consumer-groups", ["--describe", "--group", "g", "--type"],
         "Option(s) [type] are unavailable given other options on the command line"),
    ],
)
def test_group_tools_messages_of_their_own(runner, tool, args, message):
    result = _group_tool(runner, tool, args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_consumer_groups_reset_without_execute_warns_as_kafka(runner):
    """kafka-consumer-groups.sh dry-runs a reset without --execute and says so on stderr
    (its text verbatim); with --dry-run it does not."""
    warning = ("WARN: No action will be performed as the --execute option is missing.In a future major release, "
               "the default behavior of this command will be to prompt the user before executing the reset rather "
               "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
               "command and want to keep the current default behavior without prompting.\n")
    args = ["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--timeout", "100"]
    assert _group_tool(runner, "consumer-groups", args).stderr.startswith(warning)
    assert "WARN" not in _group_tool(runner, "consumer-groups", [*args, "--dry-run"]).stderr


def test_share_groups_reset_needs_no_scope_and_waits_as_kafka(runner):
    """kafka-share-groups.sh resets every partition the group has a start offset for when
    no --topic is given, and waits 30 s for answers by default (the consumer tool 5 s)."""
    result = _group_tool(runner, "share-groups", ["--reset-offsets", "--group", "g", "--to-earliest", "--dry-run",
                                                  "--timeout", "100"])  # fmt: skip
    assert result.exit_code == 1 and "ECONNREFUSED" in result.stderr  # past the checks, to the broker
    defaults = {tool: next(p.default for p in main.commands[tool].params if p.name == "timeout_ms")
                for tool in _GROUP_TOOLS}  # fmt: skip
    assert defaults == {"consumer-groups": 5000, "share-groups": 30000}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "exactly one of --add, --remove and --list"),
        (["--add", "--list"], "exactly one of --add, --remove and --list"),
        (["--add", "--topic", "t"], "--allow-principal or --deny-principal"),
        (["--add", "--allow-principal", "User:a"], "Give a resource"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "expected TYPE:NAME"),
        (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
         "literal or prefixed"),
        (["--add", "--allow-principal", "User:a", "--consumer"], "need --topic"),
        (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t", "--operation", "Read"],
         "no --operation"),
        (["--add", "--allow-principal", "User:a", "--idempotent", "--topic", "t"], "--idempotent goes with"),
        (["--list", "--operation", "Nope"], "Invalid value for '--operation'"),
    ],
)
def test_acls_usage_errors_exit_2_before_connecting(runner, args, fragment):
    result = runner.invoke(main, ["acls", "--bootstrap-server", "127.0.0.1:1", *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_acls_operation_names_are_kafkas():
    from tidegate.cli.acls import _ACL_OPERATIONS, _acl_operation
    from tidegate.security.authorizer.acl import AclOperation

    assert {_acl_operation(name) for name in _ACL_OPERATIONS} == set(AclOperation) - {
        AclOperation.UNKNOWN, AclOperation.ANY}


def test_consumer_group_members_while_migrating_show_upgraded(capsys):
    """kafka-consumer-groups.sh 4.x: --members --verbose of a consumer group with members of
    both protocols adds UPGRADED (false for a classic member), epochs from the group."""
    from tidegate.cli.consumer_groups import _describe_members
    from tidegate.client.admin import GroupDescription, MemberDescription

    members = (
        MemberDescription("new-1", None, "app", "/10.0.0.1", (("t", 0), ("t", 1)), 5, (("t", 0),), True),
        MemberDescription("old-1", "i-1", "app", "/10.0.0.2", (("t", 2),), 4, (("t", 1), ("t", 2)), False),
    )
    desc = GroupDescription("g", 0, "Reconciling", "consumer", "uniform", members, (1, "h", 9092), "consumer", 6, 6)
    _describe_members(desc, verbose=True)
    out, err = capsys.readouterr()
    assert err == "\nWarning: Consumer group 'g' is rebalancing.\n"
    head, first, second = out.splitlines()[1:]
    assert head.split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                            "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT", "UPGRADED"]
    assert first.split() == ["g", "new-1", "/10.0.0.1", "app", "2", "5", "t:0,1", "6", "t:0", "true"]
    assert second.split() == ["g", "old-1", "i-1", "/10.0.0.2", "app", "1", "4", "t:2", "6", "t:1,2", "false"]
    assert head.index("CURRENT-EPOCH") == first.index("5 ")  # the columns line up
