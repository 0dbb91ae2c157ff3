"""The package shape holds: no import cycles, and the sans-IO core never imports the shell.

Reads every module's top-level imports with ``ast`` (imports under ``if TYPE_CHECKING:``
and inside functions are not module dependencies and are skipped) and checks the graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Modules that make up the asyncio shell (and the CLI and tools on top of it).
SHELL = {
    "tidegate.network.socket_server",
    "tidegate.server.broker",
    "tidegate.cli",
    "tidegate.top",
    "tidegate.__main__",
}
#: The sans-IO core: it may not import asyncio or the shell.
CORE_PACKAGES = ("tidegate.server", "tidegate.coordinator", "tidegate.log", "tidegate.protocol")
CORE_EXEMPT = SHELL | {"tidegate.scheduler"}  # the scheduler's asyncio half lives beside its interface


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


def top_level_imports(path: Path, name: str) -> set[str]:
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and _is_type_checking(node):
                continue
            if isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                out.add(mod)
                for a in node.names:  # "from package import module"
                    out.add(f"{mod}.{a.name}")

    visit(tree.body)
    return out


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SRC.joinpath("tidegate").rglob("*.py")}
    return {
        name: {m for m in top_level_imports(path, name) if m in modules and m != name}
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


def test_no_import_cycles():
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("name", sorted(n for n in graph() if n.startswith(CORE_PACKAGES) and n not in CORE_EXEMPT))
def test_the_core_imports_neither_asyncio_nor_the_shell(name):
    path = SRC.joinpath(*name.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    imports = top_level_imports(path, name)
    assert "asyncio" not in imports, f"{name} imports asyncio"
    assert not imports & SHELL, f"{name} imports the shell: {imports & SHELL}"


def test_config_is_the_foundation():
    """config imports nothing from the network, server or coordinator layers."""
    g = graph()
    for name, deps in g.items():
        if name.startswith("tidegate.config"):
            bad = {d for d in deps if d.startswith(("tidegate.network", "tidegate.server", "tidegate.coordinator"))}
            assert not bad, f"{name} imports {bad}"


def test_the_generated_messages_sit_below_everything():
    """tidegate.protocol.messages (generated from kio's schemas) imports nothing else of
    tidegate: tidegate.errors takes its ErrorCode from there, and every package may use
    the message classes."""
    for name, deps in graph().items():
        if name.startswith("tidegate.protocol.messages"):
            outside = {d for d in deps if not d.startswith("tidegate.protocol.messages")}
            assert not outside, f"{name} imports {outside}"
