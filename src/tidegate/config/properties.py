"""Java ``.properties`` files and ``--override key=value`` strings.

Only text to ``dict[str, str]``: the values are typed and checked by the key
definitions (:mod:`.broker_keys` through :class:`~.broker.BrokerConfig`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from tidegate.config.definitions import ConfigError

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse Java ``.properties`` text like ``java.util.Properties.load``.

    ``#``/``!`` comment lines, ``key=value`` / ``key: value`` / ``key value``,
    a trailing odd backslash continues the line (the next line's leading
    whitespace is dropped), ``\\t \\n \\r \\f \\uXXXX`` escapes and ``\\x`` -> ``x``.
    Later duplicates win. Trailing whitespace is kept, as Java does; typed
    parsing trims it.
    """
    props: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[_unescape(key, source, lineno)] = _unescape(value, source, lineno)
    return props


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    natural = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(natural):
        lineno = i + 1
        line = natural[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while _continues(line):
            parts.append(line[:-1])
            line = natural[i].lstrip(_WHITESPACE) if i < len(natural) else ""
            i += 1
        parts.append(line)
        yield lineno, "".join(parts)


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    n = len(line)
    i = 0
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WHITESPACE:
            break
        i += 1
    i = min(i, n)
    key, j = line[:i], i
    while j < n and line[j] in _WHITESPACE:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _WHITESPACE:
            j += 1
    return key, line[j:]


def _unescape(text: str, source: str, lineno: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = text[i + 1]
        if e == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{source}, line {lineno}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(e, e))
            i += 2
    return "".join(out)


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a properties file (UTF-8; a BOM is ignored). ConfigError if it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"Properties file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"Properties file {path} is not valid UTF-8: {exc.reason}") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read properties file {path}: {exc.strerror or exc}") from None
    return parse_properties(text, str(path))


def parse_overrides(overrides: Sequence[str]) -> dict[str, str]:
    """``key=value`` strings (kafka-server-start.sh's ``--override``) to a dict; later wins."""
    result: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"Invalid override '{item}': expected key=value, e.g. num.partitions=3",
                value=item,
            )
        result[key] = value
    return result
