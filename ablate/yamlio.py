"""Strict, safe YAML loading that remembers where every key came from.

Why not `yaml.safe_load`: it silently keeps the last of two duplicate keys (a classic way to
run the wrong ablation) and forgets line numbers, so a schema error could only say *what* is
wrong, not *where*. Here every mapping key path maps to its 1-based line, duplicate keys and
tab characters are refused, and tags that try to build Python objects are refused before any
construction happens. All failures are `InputError` with ``file:line: ...`` in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ablate.errors import InputError

KeyPath = tuple[str, ...]


@dataclass
class YamlDoc:
    """A loaded YAML document: the plain data plus the line of each key path (and the file)."""

    data: Any
    path: Path
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line_of(self, keys: KeyPath) -> int | None:
        """Line of the deepest known prefix of `keys` (errors deep in a value point at its key)."""
        keys = tuple(str(k) for k in keys)
        while keys:
            if keys in self.lines:
                return self.lines[keys]
            keys = keys[:-1]
        return None

    def where(self, keys: KeyPath) -> str:
        """`file:line` for error messages (just `file` when the line is unknown)."""
        line = self.line_of(keys)
        return f"{self.path}:{line}" if line else str(self.path)


_SAFE_TAG_PREFIX = "tag:yaml.org,2002:"
_SAFE_TAGS = {
    _SAFE_TAG_PREFIX + t
    for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "merge")
}


def _walk(node: yaml.Node, keys: KeyPath, doc: YamlDoc) -> None:
    """Record key lines and refuse duplicates / non-standard tags, without constructing."""
    if node.tag not in _SAFE_TAGS:
        raise InputError(
            f"{doc.path}:{node.start_mark.line + 1}: tag '{node.tag.replace(_SAFE_TAG_PREFIX, '!!')}'"
            f" at '{'.'.join(keys) or '<root>'}' is not allowed (only plain YAML values: no "
            "Python objects or custom tags)"
        )
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise InputError(
                    f"{doc.path}:{key_node.start_mark.line + 1}: keys must be plain strings"
                )
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                raise InputError(
                    f"{doc.path}:{line}: duplicate key '{'.'.join(keys + (key,))}' "
                    f"(first defined on line {seen[key]}); keep only one"
                )
            seen[key] = line
            doc.lines[keys + (key,)] = line
            _walk(value_node, keys + (key,), doc)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            doc.lines.setdefault(keys + (str(i),), item.start_mark.line + 1)
            _walk(item, keys + (str(i),), doc)


def parse_yaml(text: str, path: Path | str) -> YamlDoc:
    """Parse YAML text strictly; `path` is only used in messages."""
    path = Path(path)
    for n, line in enumerate(text.splitlines(), 1):
        if "\t" in line:
            raise InputError(
                f"{path}:{n}: tab character (column {line.index(chr(9)) + 1}); YAML needs spaces "
                "for indentation and tabs are refused everywhere to avoid invisible mistakes"
            )
    doc = YamlDoc(data=None, path=path)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            doc.data = {}
            return doc
        _walk(node, (), doc)
        doc.data = loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        what = " ".join(x for x in (e.context, e.problem) if x)
        raise InputError(f"{where}: YAML syntax error: {what}") from None
    except yaml.YAMLError as e:
        raise InputError(f"{path}: YAML error: {str(e).splitlines()[0]}") from None
    finally:
        loader.dispose()
    return doc


def load_yaml(path: Path | str) -> YamlDoc:
    """Read and strictly parse a YAML file; missing/unreadable files are `InputError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read ({e.__class__.__name__}: {e})") from None
    return parse_yaml(text, path)
