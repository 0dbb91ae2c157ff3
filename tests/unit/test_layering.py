"""The package shape holds: a strict order of layers, no import cycles, and the sans-IO
core never imports the shell.

Reads every module's imports with ``ast``: those at the top of the module, those inside
functions (an import moved into a function is still a dependency) and those under ``if
TYPE_CHECKING:`` (a type named in a signature is a dependency too; the few that point up
are listed in :data:`TYPE_ONLY_UPWARD`, each with its reason, and that list may only
shrink).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Modules that make up the asyncio shell (and the CLI and tools on top of it).
SHELL = {
    "tidegate.network.socket_server",
    "tidegate.network.transport_layer",
    "tidegate.server.broker",
    "tidegate.cli",
    "tidegate.top",
    "tidegate.__main__",
}
#: The sans-IO core: it may not import asyncio or the shell.
CORE_PACKAGES = ("tidegate.server", "tidegate.coordinator", "tidegate.log", "tidegate.protocol")
CORE_EXEMPT = SHELL | {"tidegate.scheduler"}  # the scheduler's asyncio half lives beside its interface

#: The package order, lowest first. A module belongs to the layer of the longest entry
#: that is its name or a package above it (``tidegate.server.timer`` is in the layer of
#: that entry, ``tidegate.server.kafka_apis`` in the layer of ``tidegate.server``), and it
#: may import only modules of its own layer or of lower ones. Every module must belong to
#: a layer: a new package is placed here when it is made.
LAYERS: tuple[tuple[str, ...], ...] = (
    # Kafka's common/utils: byte encodings (varints), atomic file replacement, topic
    # names; and Kafka's common/message, the message classes generated from kio's schemas
    # (tidegate.errors takes its ErrorCode from them). The package root holds only the
    # version. None of them imports anything else of tidegate.
    ("tidegate", "tidegate.utils", "tidegate.protocol.messages"),
    # Kafka's Time and its error classes: used everywhere, built on nothing.
    ("tidegate.clock", "tidegate.errors"),
    # the scheduler interface (and its asyncio implementation) on the clock.
    ("tidegate.scheduler",),
    # Kafka's common/record and common/compress: what the log, the wire codec, the
    # producer and the consumer all read and write.
    ("tidegate.record",),
    # Kafka's common/metrics arithmetic (Sensor, Rate, QuotaUtils): quotas, the memory
    # pool and the producer count with it.
    ("tidegate.metrics", "tidegate.metrics.stats"),
    # Kafka's server-common: the hierarchical timing wheel and DelayedOperationPurgatory
    # (org.apache.kafka.server.util.timer, org.apache.kafka.server.purgatory), which the
    # coordinators park their operations in as the server does, and the share-state
    # Persister interface with the share coordinator's checks
    # (org.apache.kafka.server.share.persister), which the share coordinator implements.
    # They sit in server/ beside their users but depend on nothing there.
    ("tidegate.server.timer", "tidegate.server.purgatory", "tidegate.server.share.persister"),
    # the wire: kio codec, the hand-written Produce/Fetch paths, API versions.
    ("tidegate.protocol",),
    # the broker's hot-path request and topic counters (Kafka's RequestMetrics), which the
    # socket server and ReplicaManager count into; no Prometheus here.
    ("tidegate.metrics.request_metrics",),
    # the ACL model, StandardAuthorizer and the SSL principal mapping (Kafka's
    # common.acl, metadata.authorizer, common.security.ssl): pure, below the broker config
    # that validates authorizer.class.name, super.users and the principal rules with them.
    ("tidegate.security.authorizer",),
    # storage: segments, indexes, LogValidator, producer state, the cleaner. Kafka's
    # storage module; its LogConfig is what the broker config resolves topics into.
    ("tidegate.log",),
    # Kafka's KafkaConfig: the key table, listeners, topic configs, BrokerConfig.
    ("tidegate.config",),
    # identity: SASL, SCRAM, TLS and each listener's security, built from BrokerConfig.
    ("tidegate.security",),
    # SocketServer, RequestChannel, KIP-72 memory pool, connection quotas.
    ("tidegate.network",),
    # the Prometheus registry, the collectors that read the network and the server, and
    # the /metrics endpoint.
    ("tidegate.metrics.prometheus", "tidegate.metrics.collectors", "tidegate.metrics.http_server"),
    # the group and transaction coordinators, on the log and the purgatory.
    ("tidegate.coordinator",),
    # KafkaApis, ReplicaManager, quotas, the broker core and shell.
    ("tidegate.server",),
    # tidegate's clients: the network client, fetcher, admin; then the producer on it.
    ("tidegate.client",),
    ("tidegate.producer",),
    ("tidegate.spark",),
    # the tools: the command line, `tidegate top`, the test broker.
    ("tidegate.cli", "tidegate.top", "tidegate.testing", "tidegate.__main__"),
)

#: Type-only imports (under ``if TYPE_CHECKING:``) that point to a higher layer, and why.
#: Each is a type of an object the importer is handed at construction; none is imported
#: at run time. The test fails if one is no longer needed, so this list only shrinks.
TYPE_ONLY_UPWARD: dict[tuple[str, str], str] = {
    ("tidegate.coordinator.group.group_metadata_manager", "tidegate.server.replica_manager"):
        "PartitionResponse: what the ReplicaManager's append callback hands the coordinator",
    ("tidegate.coordinator.transaction.transaction_state_manager", "tidegate.server.replica_manager"):
        "PartitionResponse, as above",
    ("tidegate.coordinator.transaction.transaction_state_manager", "tidegate.server.log_manager"):
        "the LogManager the coordinator reads __transaction_state's logs from",
    ("tidegate.coordinator.transaction.transaction_marker_channel_manager", "tidegate.server.replica_manager"):
        "the ReplicaManager the markers are appended through (Kafka's own "
        "TransactionMarkerChannelManager holds it too)",
}  # fmt: skip

#: Packages that sit on the record formats and the wire, never on the broker.
CLIENT_SIDE = ("tidegate.client", "tidegate.producer", "tidegate.spark")
BROKER_SIDE = ("tidegate.log", "tidegate.server", "tidegate.coordinator", "tidegate.network")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


#: How a module imports another: at the top (when it is loaded), in a function, or for
#: types only. A module imported several ways counts the strongest (top > function > type).
TOP, FUNCTION, TYPE = "top", "function", "type"
_STRENGTH = {TOP: 2, FUNCTION: 1, TYPE: 0}


def imports(path: Path, name: str) -> dict[str, str]:
    """Every module ``name`` (at ``path``) imports, with how (:data:`TOP`, ...)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: dict[str, str] = {}

    def add(module: str, kind: str) -> None:
        if module not in out or _STRENGTH[kind] > _STRENGTH[out[module]]:
            out[module] = kind

    def visit(body: Sequence[ast.AST], kind: str) -> None:
        for node in body:
            if isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.body, TYPE)
                visit(node.orelse, kind)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(node.body, TYPE if kind == TYPE else FUNCTION)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    add(a.name, kind)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                add(mod, kind)
                for a in node.names:  # "from package import module"
                    add(f"{mod}.{a.name}", kind)
            else:  # a class, if, try, with, loop or match: the statements inside it
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    visit(getattr(node, field, ()), kind)

    visit(tree.body, TOP)
    return out


def top_level_imports(path: Path, name: str) -> set[str]:
    """What loading the module loads: its imports at the top (not in functions or types)."""
    return {m for m, kind in imports(path, name).items() if kind == TOP}


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in SRC.joinpath("tidegate").rglob("*.py")}


def graph() -> dict[str, set[str]]:
    """The load-time import graph of tidegate's modules."""
    modules = _modules()
    return {
        name: {m for m in top_level_imports(path, name) if m in modules and m != name}
        for name, path in modules.items()
    }


def full_graph() -> dict[str, dict[str, str]]:
    """Every import between tidegate's modules, with how it is made."""
    modules = _modules()
    return {
        name: {m: kind for m, kind in imports(path, name).items() if m in modules and m != name}
        for name, path in modules.items()
    }


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(g[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(g):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


def layer_of(module: str, layers: Sequence[Sequence[str]] = LAYERS) -> int | None:
    """The index of ``module``'s layer in ``layers`` (0 is the lowest): that of the longest entry that is the module or
    one of its packages (the root entry ``tidegate`` matches only itself)."""
    best, best_len = None, -1
    for index, entries in enumerate(layers):
        for entry in entries:
            matches = module == entry or ("." in entry and module.startswith(entry + "."))
            if matches and len(entry) > best_len:
                best, best_len = index, len(entry)
    return best


def layer_violations(
    g: Mapping[str, Mapping[str, str]],
    layers: Sequence[Sequence[str]] = LAYERS,
    type_only_upward: Mapping[tuple[str, str], str] = TYPE_ONLY_UPWARD,
) -> list[str]:
    """Every import of a higher layer in ``g`` (module -> {imported: how}), every module
    in no layer, and every :data:`TYPE_ONLY_UPWARD` entry that ``g`` no longer needs."""
    problems = []
    used = set()
    for name in sorted(g):
        mine = layer_of(name, layers)
        if mine is None:
            problems.append(f"{name} is in no layer: place its package in LAYERS")
            continue
        for dep, kind in sorted(g[name].items()):
            theirs = layer_of(dep, layers)
            if theirs is None or theirs <= mine:
                continue
            if kind == TYPE and (name, dep) in type_only_upward:
                used.add((name, dep))
                continue
            problems.append(
                f"{name} (layer {mine + 1}) imports {dep} (layer {theirs + 1}, higher) [{kind}]"
            )
    problems += [f"{a} -> {b} is in TYPE_ONLY_UPWARD but no longer imported up" for a, b in
                 sorted(set(type_only_upward) - used)]  # fmt: skip
    return problems


def test_no_import_cycles():
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_imports_only_its_own_layer_or_lower():
    problems = layer_violations(full_graph())
    assert not problems, "\n".join(problems)


def test_the_layer_check_finds_an_upward_import():
    """A fake graph: the record package importing the log (upward, however it is made),
    a module in no layer, and allowed type-only exceptions, used and stale."""
    layers = (("t.utils",), ("t.record",), ("t.server.timer",), ("t.log",), ("t.server",))
    ok = {"t.log.log": {"t.record.records": TOP, "t.utils.files": FUNCTION},
          "t.record.records": {"t.utils.byte_utils": TOP},
          "t.server.timer": {}, "t.server.kafka_apis": {"t.server.timer": TOP, "t.log.log": TOP}}
    assert layer_violations(ok, layers, {}) == []
    for kind in (TOP, FUNCTION, TYPE):
        bad = {**ok, "t.record.records": {"t.log.log": kind}}
        assert layer_violations(bad, layers, {}) == [
            f"t.record.records (layer 2) imports t.log.log (layer 4, higher) [{kind}]"
        ]
    # a module of a lower layer in a higher package may not import its package's modules
    up = {**ok, "t.server.timer": {"t.server.kafka_apis": TOP}}
    assert len(layer_violations(up, layers, {})) == 1
    assert layer_violations({**ok, "t.spark.source": {}}, layers, {}) == [
        "t.spark.source is in no layer: place its package in LAYERS"
    ]
    typed = {**ok, "t.log.log": {"t.server.kafka_apis": TYPE}}
    allowed = {("t.log.log", "t.server.kafka_apis"): "a reason"}
    assert layer_violations(typed, layers, allowed) == []
    assert layer_violations({**ok, "t.log.log": {"t.server.kafka_apis": TOP}}, layers, allowed) == [
        "t.log.log (layer 4) imports t.server.kafka_apis (layer 5, higher) [top]",
        "t.log.log -> t.server.kafka_apis is in TYPE_ONLY_UPWARD but no longer imported up",
    ]


def test_the_import_reader_sees_imports_in_functions_and_for_types(tmp_path):
    pkg = tmp_path / "tidegate" / "log"
    pkg.mkdir(parents=True)
    path = pkg / "m.py"
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "from tidegate.record import records\n"
        "if TYPE_CHECKING:\n    from tidegate.server.replica_manager import X\n"
        "def f():\n    from tidegate.server import kafka_apis\n"
        "class C:\n    def g(self):\n        import tidegate.network.socket_server\n"
    )
    found = imports(path, "tidegate.log.m")
    assert found["tidegate.record.records"] == TOP
    assert found["tidegate.server.replica_manager"] == TYPE
    assert found["tidegate.server.kafka_apis"] == FUNCTION
    assert found["tidegate.network.socket_server"] == FUNCTION


def test_client_side_packages_never_import_the_broker():
    """client/, producer/ and spark/ share the record package and the wire codec with
    the broker, never the broker's log, coordinators, network or server."""
    for name, deps in full_graph().items():
        if name.startswith(CLIENT_SIDE):
            bad = sorted(d for d in deps if d.startswith(BROKER_SIDE))
            assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", sorted(n for n in graph() if n.startswith(CORE_PACKAGES) and n not in CORE_EXEMPT))
def test_the_core_imports_neither_asyncio_nor_the_shell(name):
    path = SRC.joinpath(*name.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    imports = top_level_imports(path, name)
    assert "asyncio" not in imports, f"{name} imports asyncio"
    assert not imports & SHELL, f"{name} imports the shell: {imports & SHELL}"


def test_the_generated_messages_sit_below_everything():
    """tidegate.protocol.messages (generated from kio's schemas) imports nothing else of
    tidegate: tidegate.errors takes its ErrorCode from there, and every package may use
    the message classes."""
    for name, deps in graph().items():
        if name.startswith("tidegate.protocol.messages"):
            outside = {d for d in deps if not d.startswith("tidegate.protocol.messages")}
            assert not outside, f"{name} imports {outside}"
