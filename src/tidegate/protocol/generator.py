"""Generate :mod:`tidegate.protocol.messages` from kio's schema classes.

kio generates one frozen dataclass per message version from Kafka's JSON message specs
(``clients/src/main/resources/common/message/*.json``). This generator reads those
classes (``kio.index.load_request_schema``/``load_response_schema``, each dataclass
field's ``metadata["kafka_type"]`` and ``"tag"``, its type hint and default,
``__flexible__``) and writes, per API, one module of version-less classes — one class
per entity with the union of the fields of every version, like Kafka's generated
``MetadataRequestData`` — and the ``SCHEMA`` table the codec reads and writes them
with (:mod:`tidegate.protocol.serialization`). It also writes ``ErrorCode`` from kio's.

Run it after upgrading kio::

    python -m tidegate.protocol.generator          # rewrite the modules
    python -m tidegate.protocol.generator --check  # exit 1 if they differ from kio's

``tests/unit/test_messages.py`` runs the check. kio is needed here and in the tests,
never at run time.

What changes on the way (the generated module docstring says it too):

* types: every integer (error codes, kio's timedelta and datetime fields) is an ``int``
  of milliseconds; arrays are lists; a uuid is never None (kio reads the zero uuid as
  None: here it is ``ZERO_UUID``, Kafka's ``Uuid.ZERO_UUID``); kio's nullable
  ``datetime_i64`` (ProduceResponse's ``log_append_time``) is the int64 -1 it is on the
  wire;
* defaults: kio's where it has one; otherwise None for a field nullable in every
  version, else Kafka's: 0, False, "", b"", an empty list, an entity of defaults;
* names: kio's (Kafka's), except an entity name that the request and the response of
  one API both use (DescribeQuorum's ``TopicData``): it is prefixed with its message's
  name (``DescribeQuorumRequestTopicData``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import inspect
import itertools
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import kio.schema.errors
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from tidegate.protocol.apis import SUPPORTED_APIS

__all__ = ["API_KEYS", "PACKAGE_DIR", "main", "render_all"]

#: APIs not (yet) in SUPPORTED_APIS whose messages are generated for the work coming next:
#: the consumer and share group protocols and the share-group state APIs.
NEXT_APIS = (68, 69, 74, 76, 77, 78, 79, 83, 84, 85, 86, 87, 90, 91, 92)
API_KEYS = tuple(sorted({int(k) for k in SUPPORTED_APIS} | set(NEXT_APIS)))
PACKAGE_DIR = Path(__file__).resolve().parent / "messages"
LINE = 100

#: kio's kafka_type -> the type on the wire (kio's own kinds are Kafka's int types)
_WIRE_TYPE = {
    "error_code": "int16",
    "timedelta_i32": "int32",
    "timedelta_i64": "int64",
    "datetime_i64": "int64",
}
_PYTHON_TYPE = {
    "int8": "int", "int16": "int", "int32": "int", "int64": "int", "uint16": "int",
    "float64": "float", "bool": "bool", "string": "str", "bytes": "bytes",
    "records": "Records", "uuid": "uuid.UUID",
}  # fmt: skip
_ZERO = {
    "int": "0", "float": "0.0", "bool": "False", "str": '""', "bytes": 'b""',
    "uuid.UUID": "ZERO_UUID",
}  # fmt: skip


@dataclass
class FieldInfo:
    name: str
    wire_type: str  # int32, string, ... or the kio entity's name
    is_array: bool
    is_entity: bool
    versions: set[int] = field(default_factory=set)
    nullable: set[int] = field(default_factory=set)
    tag: int | None = None
    defaults: set[str] = field(default_factory=set)  # python source, one per version
    doc: str = ""


@dataclass
class EntityInfo:
    kio_name: str
    versions: set[int] = field(default_factory=set)
    orders: list[list[str]] = field(default_factory=list)  # field order of each version
    fields: dict[str, FieldInfo] = field(default_factory=dict)
    name: str = ""  # ours (kio's unless it collides)


@dataclass
class MessageInfo:
    top: str  # kio name of the request or response class
    versions: list[int]
    flexible_from: int | None
    entities: dict[str, EntityInfo]  # by kio name, dependencies first
    json_name: str


# -- reading kio ---------------------------------------------------------------------------
def _unwrap(tp: Any) -> tuple[Any, bool]:
    """(type without None, nullable)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        assert len(members) == 1, tp
        return members[0], True
    return tp, False


@cache
def _field_docs(module_file: str) -> dict[str, dict[str, str]]:
    """{class: {field: docstring}} of one kio module (the string after each field)."""
    tree = ast.parse(Path(module_file).read_text())
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs = out.setdefault(node.name, {})
        body = node.body
        for stmt, nxt in itertools.pairwise(body):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return out


def _default_source(value: Any, wire_type: str, kio_type: str | None, is_entity: bool) -> str:
    """kio's default as the source of ours."""
    if value is None:
        if kio_type == "datetime_i64":
            return "-1"  # kio reads the int64 -1 as None
        if kio_type == "uuid":
            return "ZERO_UUID"
        return "None"
    if isinstance(value, tuple):
        assert value == (), value
        return "[]"
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, datetime.timedelta):
        return str(round(value.total_seconds() * 1000))
    if isinstance(value, datetime.datetime):
        return str(round(value.timestamp() * 1000))
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return repr(value)
    if is_entity and dataclasses.is_dataclass(value) and not isinstance(value, type):
        # an entity of its defaults is what kio uses: check it is one
        entity_type: Any = type(value)
        assert value == entity_type(), value
        return f"{entity_type.__name__}()"
    raise TypeError(f"no default source for {value!r} ({wire_type})")


def _walk(cls: type, version: int, entities: dict[str, EntityInfo]) -> None:
    """Record ``cls`` (a kio entity of ``version``) after the entities below it."""
    hints = typing.get_type_hints(cls)
    docs = _field_docs(inspect.getsourcefile(cls) or "").get(cls.__name__, {})
    seen: list[tuple[dataclasses.Field, FieldInfo, bool, str | None]] = []
    for f in dataclasses.fields(cls):
        tp, nullable = _unwrap(hints[f.name])
        is_array = typing.get_origin(tp) is tuple
        if is_array:
            tp, inner_nullable = _unwrap(typing.get_args(tp)[0])
            assert not inner_nullable, (cls, f.name)
        kio_type: str | None = f.metadata.get("kafka_type")
        if kio_type is None:  # an entity
            assert isinstance(tp, type) and dataclasses.is_dataclass(tp), (cls, f.name)
            wire_type = tp.__name__
            _walk(tp, version, entities)
        else:
            wire_type = _WIRE_TYPE.get(kio_type, kio_type)
            assert wire_type in _PYTHON_TYPE, (cls, f.name, kio_type)
        if kio_type in ("uuid", "datetime_i64"):
            nullable = False  # kio's None is the zero uuid / -1 on the wire
        is_entity = kio_type is None
        seen.append((f, FieldInfo(f.name, wire_type, is_array, is_entity), nullable, kio_type))
    ent = entities.setdefault(cls.__name__, EntityInfo(cls.__name__))
    if version in ent.versions:
        return  # an entity used by two fields (DescribeQuorum's ReplicaState)
    ent.versions.add(version)
    ent.orders.append([f.name for f, *_ in seen])
    for f, new, nullable, kio_type in seen:
        info = ent.fields.setdefault(f.name, new)
        assert (info.wire_type, info.is_array, info.is_entity) == (
            new.wire_type, new.is_array, new.is_entity), (cls, f.name)
        info.versions.add(version)
        if nullable:
            info.nullable.add(version)
        tag = f.metadata.get("tag")
        assert info.tag is None or info.tag == tag, (cls, f.name)
        info.tag = tag
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        info.defaults.add("" if default is dataclasses.MISSING else
                          _default_source(default, info.wire_type, kio_type, info.is_entity))
        if f.name in docs:
            info.doc = docs[f.name]  # versions are walked oldest first: the newest wins


def _merge_orders(orders: list[list[str]]) -> list[str]:
    """One field order consistent with every version's (Kafka's JSON has one order)."""
    merged: list[str] = []
    for order in orders:
        for i, name in enumerate(order):
            if name in merged:
                continue
            # after the nearest earlier field of this version that is placed already
            at = 0
            for prev in reversed(order[:i]):
                if prev in merged:
                    at = merged.index(prev) + 1
                    break
            merged.insert(at, name)
    for order in orders:
        assert [n for n in merged if n in order] == order, (merged, order)
    return merged


def _message(api_key: int, kind: EntityType) -> MessageInfo:
    name = api_key_map[api_key]
    versions = sorted(schema_name_map[name])
    load = load_request_schema if kind is EntityType.request else load_response_schema
    entities: dict[str, EntityInfo] = {}
    flexible: list[int] = []
    top = ""
    json_name = ""
    for v in versions:
        cls = load(api_key, v)
        top = cls.__name__
        if cls.__flexible__:
            flexible.append(v)
        _walk(cls, v, entities)
        doc = sys.modules[cls.__module__].__doc__ or ""
        json_name = doc.split("``")[1].rsplit("/", 1)[-1] if "``" in doc else json_name
    assert flexible == versions[len(versions) - len(flexible):], (api_key, kind, flexible)
    for ent in entities.values():
        merged = _merge_orders(ent.orders)
        ent.fields = {n: ent.fields[n] for n in merged}
        for info in ent.fields.values():
            _check_contiguous(info.versions, (api_key, ent.kio_name, info.name))
            _check_contiguous(info.nullable, (api_key, ent.kio_name, info.name))
    return MessageInfo(top, versions, flexible[0] if flexible else None, entities, json_name)


def _check_contiguous(versions: set[int], where: object) -> None:
    if versions:
        assert versions == set(range(min(versions), max(versions) + 1)), (where, versions)


# -- writing a module ----------------------------------------------------------------------
def _span(versions: set[int], last: int) -> str:
    lo, hi = min(versions), max(versions)
    if hi == last:
        return f"v{lo}+"
    return f"v{lo}" if lo == hi else f"v{lo}-{hi}"


def _field_source(info: FieldInfo, names: dict[str, str]) -> tuple[str, str, bool]:
    """(annotation, default source, whether the default is a fresh list or entity)."""
    element = names[info.wire_type] if info.is_entity else _PYTHON_TYPE[info.wire_type]
    annotation = f"list[{element}]" if info.is_array else element
    if info.nullable or info.wire_type == "records":
        annotation += " | None"
    explicit = info.defaults - {""}
    assert len(explicit) <= 1, (info.name, info.defaults)
    if explicit:
        default = explicit.pop()
        if info.is_entity and default.endswith("()"):
            default = f"{names[default[:-2]]}()"
    elif info.nullable == info.versions or info.wire_type == "records":
        default = "None"
    elif info.is_array:
        default = "[]"
    elif info.is_entity:
        default = f"{element}()"
    else:
        default = _ZERO[element]
    return annotation, default, default == "[]" or default.endswith("()")


def _comment(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, LINE - len(indent) - 3, initial_indent=indent + "#: ",
                         subsequent_indent=indent + "#: ", break_on_hyphens=False)


def _render_class(ent: EntityInfo, names: dict[str, str], last: int) -> Iterator[str]:
    yield ""
    yield ""
    yield f"class {ent.name}(Message):"
    slots = ", ".join(f'"{n}"' for n in ent.fields)
    slot_line = f"    __slots__ = ({slots}{',' if len(ent.fields) == 1 else ''})"
    if len(slot_line) <= LINE:
        yield slot_line
    else:
        yield "    __slots__ = ("
        yield from textwrap.wrap(slots, LINE - 8, initial_indent="        ",
                                 subsequent_indent="        ")
        yield "    )"
    params: list[str] = []
    body: list[str] = []
    for info in ent.fields.values():
        annotation, default, fresh = _field_source(info, names)
        yield ""
        span = _span(info.versions, last)
        extra = [span]
        if info.nullable and info.nullable != info.versions:
            extra.append(f"nullable {_span(info.nullable, last)}")
        if info.tag is not None:
            extra.append(f"tag {info.tag}")
        yield from _comment(f"{info.doc} ({', '.join(extra)})".lstrip(), "    ")
        yield f"    {info.name}: {annotation}"
        if fresh:
            params.append(f"{info.name}: {annotation} = MISSING")
            body.append(f"        self.{info.name} = {default} if {info.name} is MISSING else {info.name}")
        else:
            params.append(f"{info.name}: {annotation} = {default}")
            body.append(f"        self.{info.name} = {info.name}")
    yield ""
    if not params:
        yield "    def __init__(self) -> None:"
        yield "        pass"
        return
    one_line = f"    def __init__(self, *, {', '.join(params)}) -> None:"
    if len(one_line) <= LINE:
        yield one_line
    else:
        yield "    def __init__("
        yield "        self,"
        yield "        *,"
        for p in params:
            yield f"        {p},"
        yield "    ) -> None:"
    for line in body:
        if len(line) <= LINE:
            yield line
        else:  # self.x = X() if x is MISSING else x
            target, _, expr = line.partition(" = ")
            yield f"{target} = ("
            yield f"            {expr}"
            yield "        )"


def _spec_source(info: FieldInfo, names: dict[str, str]) -> str:
    wire = names[info.wire_type] if info.is_entity else info.wire_type
    wire = f"[]{wire}" if info.is_array else wire
    versions = f"({min(info.versions)}, {max(info.versions)})"
    nullable = f"({min(info.nullable)}, {max(info.nullable)})" if info.nullable else "None"
    return f'("{info.name}", "{wire}", {versions}, {nullable}, {info.tag})'


def _unsorted(names: Iterable[str]) -> bool:
    """Whether ruff's natural sort (RUF023) would reorder ``names``."""
    def key(name: str) -> list[Any]:
        return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
    names = list(names)
    return names != sorted(names, key=key)


def _kio_version() -> str:
    return package_version("kio")


def render_module(api_key: int) -> str:
    """The source of the messages module of ``api_key``."""
    request = _message(api_key, EntityType.request)
    response = _message(api_key, EntityType.response)
    clash = (set(request.entities) & set(response.entities)) - {request.top, response.top}
    for message in (request, response):
        for ent in message.entities.values():
            ent.name = f"{message.top}{ent.kio_name}" if ent.kio_name in clash else ent.kio_name
    api = request.top.removesuffix("Request")
    uses_uuid = any(f.wire_type == "uuid" for m in (request, response)
                    for e in m.entities.values() for f in e.fields.values())
    summary = (f"Kafka's {api} messages (API key {api_key}): {request.top} "
               f"v{request.versions[0]}-{request.versions[-1]}, {response.top} "
               f"v{response.versions[0]}-{response.versions[-1]} and their entities.")
    about = (f"Generated by ``python -m tidegate.protocol.generator`` from kio {_kio_version()} "
             f"(Kafka's {request.json_name} and {response.json_name}): do not edit. A class has "
             "the fields of every version; the comment above a field gives the versions that "
             "have it. :mod:`tidegate.protocol.serialization` reads and writes one version's "
             "fields from ``SCHEMA``.")
    lines = textwrap.wrap('"""' + summary, LINE - 4) + [""] + textwrap.wrap(about, LINE - 4)
    lines += ['"""', ""]
    if any(_unsorted(e.fields) for m in (request, response) for e in m.entities.values()):
        # __slots__ keep the wire order (repr and == go through them), not ruff's sorted one
        lines += ["# ruff: noqa: RUF023", ""]
    lines += ["from __future__ import annotations", ""]
    if uses_uuid:
        lines += ["import uuid", ""]
    body: list[str] = []
    names_used: set[str] = set()
    for message in (request, response):
        names = {e.kio_name: e.name for e in message.entities.values()}
        last = message.versions[-1]
        for ent in message.entities.values():
            body += _render_class(ent, names, last)
        for ent in message.entities.values():
            for info in ent.fields.values():
                names_used.add(_field_source(info, names)[1])
    imports = ["FieldSpec", "Message", "MessageSpec"]
    if any("MISSING" in line for line in body):
        imports.insert(0, "MISSING")
    if "ZERO_UUID" in names_used:
        imports.insert(1 if "MISSING" in imports else 0, "ZERO_UUID")
    if any(f.wire_type == "records" for m in (request, response)
           for e in m.entities.values() for f in e.fields.values()):
        imports.append("Records")
    line = f"from tidegate.protocol.messages._base import {', '.join(imports)}"
    if len(line) > LINE:
        line = "\n".join(["from tidegate.protocol.messages._base import (", *(f"    {n}," for n in imports), ")"])
    lines.append(line)
    lines += ["", f"API_KEY = {api_key}"]
    lines += body
    lines += ["", "", "#: The wire layout of every entity: its fields in order (see FieldSpec)."]
    lines.append("SCHEMA: dict[type[Message], tuple[FieldSpec, ...]] = {")
    for message in (request, response):
        names = {e.kio_name: e.name for e in message.entities.values()}
        for ent in message.entities.values():
            if not ent.fields:
                lines.append(f"    {ent.name}: (),")
                continue
            lines.append(f"    {ent.name}: (")
            for info in ent.fields.values():
                lines.append(f"        {_spec_source(info, names)},")
            lines.append("    ),")
    lines.append("}")
    lines.append("#: (class, first version, last version, first flexible version)")
    for label, message in (("REQUEST", request), ("RESPONSE", response)):
        top = message.entities[message.top].name
        lines.append(f"{label}: MessageSpec = ({top}, {message.versions[0]}, "
                     f"{message.versions[-1]}, {message.flexible_from})")
    lines += ["", "__all__ = ["]
    all_names = sorted(e.name for m in (request, response) for e in m.entities.values())
    lines += [f'    "{n}",' for n in all_names]
    lines.append("]")
    return "\n".join(lines) + "\n"


def render_index() -> str:
    modules = "\n".join(f'    {k}: "{api_key_map[k]}",' for k in API_KEYS)
    return f'''"""Kafka's protocol messages: one module per API, each with a version-less class per
message entity (``MetadataRequest``, ``MetadataRequestTopic``, ``MetadataResponse`` ...) and
the ``SCHEMA`` table the codec (:mod:`tidegate.protocol.serialization`) reads them with.

Generated by ``python -m tidegate.protocol.generator`` from kio {_kio_version()}: do not edit
(``_base.py`` is hand-written). The modules are imported on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tidegate.protocol.messages._base import ZERO_UUID, Message

__all__ = ["MODULES", "ZERO_UUID", "Message", "api_module"]

#: API key -> the module of its messages
MODULES: dict[int, str] = {{
{modules}
}}


def api_module(api_key: int) -> ModuleType:
    """The module of ``api_key``'s messages (``KeyError`` for an API without one)."""
    return importlib.import_module(f"{{__name__}}.{{MODULES[api_key]}}")
'''


def render_error_code() -> str:
    source = Path(inspect.getsourcefile(kio.schema.errors) or "").read_text()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ErrorCode")
    members: list[str] = []
    body = cls.body
    for i, stmt in enumerate(body):
        if not (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)):
            continue
        name = stmt.targets[0].id
        member = kio.schema.errors.ErrorCode[name]
        nxt = body[i + 1] if i + 1 < len(body) else None
        if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            members += _comment(" ".join(nxt.value.value.split()), "    ")
        members.append(f"    {name} = {int(member.value)}, {bool(member.retriable)}")
    return f'''"""Kafka's error codes (``org.apache.kafka.common.protocol.Errors``): name, code and
whether a retry can succeed.

Generated by ``python -m tidegate.protocol.generator`` from kio {_kio_version()}'s
``ErrorCode`` (same names, values and ``retriable``): do not edit. Import it from
:mod:`tidegate.errors`.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Self

__all__ = ["ErrorCode"]


class ErrorCode(enum.IntEnum):
    """One of Kafka's error codes; ``retriable`` says whether the same request may
    succeed later."""

    retriable: bool
    value: int

    if not TYPE_CHECKING:

        def __new__(cls, value: int, retriable: bool) -> Self:
            member = int.__new__(cls, value)
            member._value_ = value
            member.retriable = retriable
            return member

{chr(10).join(members)}
'''


def render_all() -> dict[Path, str]:
    """Every generated file (path under the package directory -> source)."""
    out = {Path("__init__.py"): render_index(), Path("error_code.py"): render_error_code()}
    for api_key in API_KEYS:
        out[Path(f"{api_key_map[api_key]}.py")] = render_module(api_key)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a generated file differs from what kio gives")
    args = parser.parse_args(argv)
    stale = []
    for rel, text in render_all().items():
        path = PACKAGE_DIR / rel
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(rel)
        if not args.check:
            path.write_text(text)
    generated = {PACKAGE_DIR / rel for rel in render_all()}
    extra = [p for p in PACKAGE_DIR.glob("*.py") if p not in generated and p.name != "_base.py"]
    for p in extra:
        print(f"not generated (remove it?): {p}", file=sys.stderr)
    for rel in stale:
        print(f"{'stale' if args.check else 'wrote'}: {PACKAGE_DIR / rel}")
    return 1 if (args.check and stale) or extra else 0


if __name__ == "__main__":
    raise SystemExit(main())
