"""Kafka's principal of a connection: ``User:<name>``. The name is the SASL user, the
TLS client certificate's subject DN mapped by ``ssl.principal.mapping.rules`` (Kafka's
``SslPrincipalMapper``), or ANONYMOUS."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: ``RULE:pattern/replacement/[LU]`` (Kafka's SslPrincipalMapper.RULE_PARSER)
_RULE = re.compile(r"\s*(DEFAULT|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?)\s*)\s*(,\s*|$)")
_JAVA_GROUP = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        name = m.expand(self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


class SslPrincipalMapper:
    """The rules of ``ssl.principal.mapping.rules``; the first rule that matches a DN
    names the principal (``DEFAULT``: the DN itself)."""

    def __init__(self, rules: str | None) -> None:
        text = (rules or "DEFAULT").strip()
        parsed: list[_Rule] = []
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"invalid ssl.principal.mapping.rules: {text!r}")
            if m.group(1) == "DEFAULT":
                parsed.append(_Rule(None, "", ""))
            else:
                replacement = _JAVA_GROUP.sub(r"\\g<\1>", m.group(4).replace("\\/", "/"))
                parsed.append(_Rule(re.compile(m.group(2).replace("\\/", "/")), replacement, m.group(6)))
            pos = m.end()
        self.rules = tuple(parsed)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn!r}")
