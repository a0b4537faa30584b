"""Strict loading of an entry's YAML front matter.

PyYAML's ``safe_load`` is too forgiving for a file that may authorize an action:
it keeps the last of two duplicate keys, reads ``12:30`` as the integer 750
(YAML 1.1 sexagesimal), ``yes``/``on`` as booleans, ``2025-01-01`` as a date and
follows anchors, aliases and ``<<`` merge keys. This module composes the YAML
(with libyaml when available) and converts the node tree itself:

* only plain scalars are typed, and only as YAML 1.2 core ``null``, ``true``/``false``,
  decimal integers and decimal floats; every other scalar (dates and times
  included) stays text, so the date rules decide about it;
* a duplicate key anywhere, a non-text key, an anchor/alias or an explicit tag is
  a problem, and the whole front matter is then untrusted (no field is read);
* the file line of every key is recorded (``source.kind`` → 3) for messages and SARIF.

Nothing here raises on bad input: problems are returned as :class:`YamlProblem`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import BaseResolver

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"

_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_FLOAT_RE = re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?$")
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")


class _CoreResolver(BaseResolver):
    """YAML 1.2 core-schema implicit types, without timestamps, sexagesimals, yes/no, or merge keys."""

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is not ScalarNode:
            return _SEQ if kind is SequenceNode else _MAP
        if not implicit[0]:  # quoted (or explicitly tagged, which the composer handles)
            return _STR
        if not value:
            return _NULL
        first = value[0]
        if first in "-+0123456789.":
            if _INT_RE.match(value):
                return _INT
            if _FLOAT_RE.match(value):
                return _FLOAT
        elif (first in "tTfF" and _BOOL_RE.match(value)) or (first in "~nN" and _NULL_RE.match(value)):
            return _BOOL if first in "tTfF" else _NULL
        return _STR


if getattr(yaml, "__with_libyaml__", False):  # pragma: no branch - libyaml is the usual case
    from yaml._yaml import CParser

    class _Composer(CParser, _CoreResolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _CoreResolver.__init__(self)

else:  # pragma: no cover - pure-Python fallback

    class _Composer(  # type: ignore[no-redef]
        yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer, _CoreResolver
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _CoreResolver.__init__(self)


@dataclass(frozen=True, slots=True)
class YamlProblem:
    """One reason the front matter cannot be trusted; ``line`` is the file's line (1-based)."""

    check: str
    message: str
    hint: str
    line: int
    key: str = "front-matter"


@dataclass(slots=True)
class LoadedYaml:
    """The converted front matter: plain Python data plus the file line (1-based) of every key."""

    data: Any = None
    lines: dict[str, int] = field(default_factory=dict)
    problems: list[YamlProblem] = field(default_factory=list)


def load_front_matter(text: str, *, first_line: int = 1) -> LoadedYaml:
    """Compose and convert ``text`` (which starts on file line ``first_line``).

    Never raises on bad YAML: problems are returned in :attr:`LoadedYaml.problems`.
    """
    out = LoadedYaml()
    try:
        node = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = first_line + (mark.line if mark is not None else 0)
        what = exc.problem or "malformed YAML"
        out.problems.append(YamlProblem("yaml-syntax", f"YAML syntax error: {what}", _SYNTAX_HINT, line))
        return out
    except yaml.YAMLError as exc:
        out.problems.append(YamlProblem("yaml-syntax", f"YAML error: {exc}", _SYNTAX_HINT, first_line))
        return out
    if node is None:
        out.data = None
        return out
    out.data = _Converter(out, first_line).convert(node, "", first_line)
    return out


def _compose(text: str) -> Node | None:
    """The node tree of ``text`` (a single document); our loader builds no Python objects."""
    loader = _Composer(text)
    try:
        node: Node | None = loader.get_single_node()
        return node
    finally:
        loader.dispose()


_SYNTAX_HINT = "fix the YAML between the '---' lines (indent nested keys with spaces; quote values containing ': ')"


class _Converter:
    def __init__(self, out: LoadedYaml, first_line: int) -> None:
        self.out = out
        self.first_line = first_line
        self.seen: set[int] = set()

    def line(self, node: Node) -> int:
        return self.first_line + node.start_mark.line

    def problem(self, check: str, message: str, hint: str, line: int, key: str) -> None:
        self.out.problems.append(YamlProblem(check, message, hint, line, key or "front-matter"))

    def convert(self, node: Node, path: str, line: int) -> Any:
        # The composer hands back the same node object for every alias of an anchor.
        if id(node) in self.seen:
            self.problem(
                "yaml-alias",
                "anchors and aliases are not allowed in front matter",
                "write each value out in full",
                line,
                path,
            )
            return None
        self.seen.add(id(node))
        if isinstance(node, ScalarNode):
            return self.scalar(node, path, line)
        if isinstance(node, MappingNode):
            return self.mapping(node, path)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ:
                self.problem("yaml-tag", f"explicit tag {node.tag} is not allowed", "remove the tag", line, path)
                return None
            return [self.convert(item, f"{path}[{i}]", self.line(item)) for i, item in enumerate(node.value)]
        raise AssertionError(f"unexpected node {node!r}")  # pragma: no cover

    def mapping(self, node: MappingNode, path: str) -> dict[str, Any] | None:
        if node.tag != _MAP:
            self.problem("yaml-tag", f"explicit tag {node.tag} is not allowed", "remove the tag", self.line(node), path)
            return None
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag != _STR:
                self.problem(
                    "yaml-non-text-key",
                    "every key must be plain text",
                    "use a field name such as 'source' or 'review-by' as the key",
                    self.line(key_node),
                    path,
                )
                continue
            key = key_node.value
            dotted = f"{path}.{key}" if path else key
            line = self.first_line + key_node.start_mark.line
            if key in result:
                first = self.out.lines[dotted]
                self.problem(
                    "yaml-duplicate-key",
                    f"duplicate key {dotted!r} (first on line {first}); YAML would silently keep only one value",
                    f"keep exactly one {dotted!r} line",
                    line,
                    dotted,
                )
                continue
            self.out.lines[dotted] = line
            result[key] = self.convert(value_node, dotted, line)
        return result

    def scalar(self, node: ScalarNode, path: str, line: int) -> Any:
        value: str = node.value
        tag = node.tag
        if tag == _STR:
            return value
        if tag == _NULL and _NULL_RE.match(value):
            return None
        if tag == _BOOL and _BOOL_RE.match(value):
            return value.lower() == "true"
        if tag == _INT and _INT_RE.match(value):
            return int(value)
        if tag == _FLOAT and _FLOAT_RE.match(value):
            return float(value)
        self.problem(
            "yaml-tag",
            f"value {value!r} uses the YAML tag {tag}, which front matter does not allow",
            "remove the tag and write a plain value (dates as YYYY-MM-DD)",
            line,
            path,
        )
        return None
