"""The one YAML loader of the package: safe types only, and a mapping key given twice is an
error (PyYAML keeps the last one silently, so a repeated `max_steps:` would win unseen)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from numloss.extras import needs
from numloss.textio import read_utf8

with needs("hf", "numloss.yamlio"):
    import yaml


#: levels of nesting a YAML file may have (numloss configs use three or four)
MAX_DEPTH = 100


class YamlKeyError(ValueError):
    """A mapping key given twice, a key that is not a plain value, an alias, or nesting past
    MAX_DEPTH."""


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping key given twice and any alias (`*name`,
    `<<: *name`): a few lines of nested aliases expand to billions of nodes (an "alias bomb") and
    hang whatever walks them; no numloss setting needs one."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise YamlKeyError(
                f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not"
                " accepted; write the value out"
            )
        if self.depth >= MAX_DEPTH:  # composing recurses: 5,000 levels would be a RecursionError
            raise YamlKeyError(
                f"line {self.peek_event().start_mark.line + 1}: nested more than {MAX_DEPTH} levels"
                " deep; no setting nests like that: flatten it"
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:
            raise YamlKeyError(
                f"line {line}: a mapping key must be a plain value, got {key!r}"
            ) from None
        if first is not None:
            where = f"lines {first} and {line}" if first != line else f"line {line}"
            raise YamlKeyError(f"key {key!r} is given twice ({where}); keep one")
        seen[key] = line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def parse_yaml(text: str) -> Any:
    """YAML text as Python values; YamlKeyError for a repeated key, yaml.YAMLError for bad YAML."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def load_yaml(path: Path, error: type[Exception] = ValueError, empty: str | None = None) -> Any:
    """The YAML in `path`; not UTF-8, not YAML, a repeated key or an alias is one `error` line
    naming the file. A file holding nothing (empty, null, only comments) is {}, or, when `empty`
    says why that is wrong for this file, an `error` line "PATH: holds no settings ...; EMPTY"."""
    text = read_utf8(path, error)
    try:
        loaded = parse_yaml(text)
        if loaded is None and empty is not None:
            raise error(f"{path}: holds no settings (empty, null or only comments); {empty}")
        return {} if loaded is None else loaded
    except YamlKeyError as problem:
        raise error(f"{path}: {problem}") from None
    except yaml.YAMLError as problem:
        where = getattr(problem, "problem_mark", None)
        place = f":{where.line + 1}" if where is not None else ""
        detail = getattr(problem, "problem", None) or str(problem).splitlines()[0]
        raise error(f"{path}{place}: not valid YAML ({detail})") from None
