"""Reading untrusted files: bounded, regular files only, with limits checked before parsing.

Every file a user or a node hands attnplan (a model config.json, a ``--configs`` YAML, a hosts
file, a rule pack) goes through here, so none can hang the process (a FIFO), exhaust memory
(``/dev/zero``: its ``st_size`` is 0), overflow the parser's stack (deep nesting: libyaml
segfaults, ``json`` raises RecursionError) or expand an alias bomb. Duplicate mapping keys are
refused: YAML and JSON both keep the last one silently, so a rule with two ``require:`` keys
would quietly lose one.

Aliases are bounded by what they *expand to*, not by how many there are: 31 anchors each naming
the previous one twice are 62 aliases but 2^31 nodes once a validator walks the tree (issue 24
#2). Keys that Python cannot hash (``{[a, b]: 1}``, ``? [a]``) and integers longer than any
real value (Python refuses to parse more than 4,300 digits) are refusals naming the line.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, Union

from attnplan.errors import InvalidInputError

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIASES = 64
# Nodes (scalars, sequences, mappings) of the document with every alias expanded: the shipped
# packs hold ~6,000; a 1 MiB pack written out longhand cannot exceed ~500,000.
MAX_NODES = 500_000
MAX_INT_DIGITS = 64  # no count, size or version field of ours comes near; Python stops at 4,300


def read_up_to(fd: int, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of an open file, in 1 MiB reads: one byte over the limit tells a caller
    that the file grew while it was read (its size was checked before)."""
    chunks, left = [], max_bytes + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_bounded(path: Union[str, Path], *, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; anything else is one clear
    ``InvalidInputError`` (field ``what``). Opened non-blocking so a FIFO cannot hang the open."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        reason = "no such file" if exc.errno == errno.ENOENT else (exc.strerror or str(exc)).lower()
        raise InvalidInputError(what, f"cannot read {p}: {reason}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InvalidInputError(what, f"{p} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInputError(what, f"{p} is not a regular file (a device, FIFO or socket)")
        if st.st_size > max_bytes:
            raise InvalidInputError(what, f"{p} is {st.st_size} bytes, over the {max_bytes}-byte limit")
        data = read_up_to(fd, max_bytes)
    except OSError as exc:
        raise InvalidInputError(what, f"cannot read {p}: {(exc.strerror or str(exc)).lower()}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew while we read it
        raise InvalidInputError(what, f"{p} is over the {max_bytes}-byte limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(what, f"{p} is not UTF-8 text (byte {exc.start})") from None


def nesting_depth(text: str, *, quotes: bool = True) -> int:
    """The deepest ``[``/``{`` nesting (outside JSON strings when ``quotes``), checked before any
    parser runs. YAML is scanned without quote tracking: an apostrophe in a plain scalar
    (``don't``) would otherwise hide the brackets after it; strings full of brackets only err
    on the safe side."""
    depth = best = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote and quotes:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if quotes and ch == '"':
            quote = ch
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return best


def _check_depth(text: str, what: str, name: str, max_depth: int, *, quotes: bool = True) -> None:
    if nesting_depth(text, quotes=quotes) > max_depth:
        raise InvalidInputError(what, f"{name}: nested deeper than {max_depth} levels")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InvalidInputError("json", f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_json(text: str, *, what: str, name: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON with duplicate keys refused, NaN/Infinity refused, and nesting bounded."""
    _check_depth(text, what, name, max_depth)

    def constant(c: str) -> Any:
        raise InvalidInputError("json", f"{c} is not a JSON number")

    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=constant)
    except InvalidInputError as exc:  # the hooks' own refusals: a duplicate key, NaN
        raise InvalidInputError(what, f"{name}: not valid JSON: {exc.message}") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise InvalidInputError(what, f"{name}: not valid JSON: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise InvalidInputError(what, f"{name}: nested too deeply") from None


def _expanded_nodes(events: Any, yaml: Any, what: str, name: str, max_depth: int, max_aliases: int,
                    max_nodes: int) -> None:
    """Walk the parser's events (nothing composed yet) counting nodes as the aliases would
    expand them; refuse past ``max_nodes``, ``max_aliases`` or ``max_depth``."""
    sizes: dict[str, int] = {}           # anchor -> expanded size of its node
    stack: list[list[Any]] = []          # open collections: [anchor, expanded size so far]
    total = aliases = 0

    def count(n: int) -> None:
        nonlocal total
        total += n
        if total > max_nodes:
            raise InvalidInputError(what, f"{name}: expands to more than {max_nodes} YAML nodes "
                                          f"(each alias repeats the node it names)")

    for event in events:
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > max_aliases:
                raise InvalidInputError(what, f"{name}: more than {max_aliases} YAML aliases")
            n = sizes.get(event.anchor, 1)
            count(n)
            if stack:
                stack[-1][1] += n
        elif isinstance(event, yaml.ScalarEvent):
            count(1)
            if event.anchor:
                sizes[event.anchor] = 1
            if stack:
                stack[-1][1] += 1
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            count(1)
            stack.append([event.anchor, 1])
            if len(stack) > max_depth:
                raise InvalidInputError(what, f"{name}: nested deeper than {max_depth} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, size = stack.pop()
            if anchor:
                sizes[anchor] = size
            if stack:
                stack[-1][1] += size


def parse_yaml(text: str, *, what: str, name: str, max_depth: int = MAX_DEPTH,
               max_aliases: int = MAX_ALIASES, max_nodes: int = MAX_NODES) -> Any:
    """Safe YAML with duplicate and unhashable keys refused, integers bounded, and nesting (flow
    and block), aliases and the expanded node count bounded before the document is composed."""
    import yaml  # lazy: only YAML inputs need it

    _check_depth(text, what, name, max_depth, quotes=False)
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _expanded_nodes(yaml.parse(text, Loader=base), yaml, what, name, max_depth, max_aliases, max_nodes)

        class _Loader(base):  # type: ignore[misc, valid-type]
            pass

        def at(node: Any) -> str:
            return f"{name}: line {node.start_mark.line + 1}"

        def mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
            loader.flatten_mapping(node)
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    raise InvalidInputError(what, f"{at(key_node)}: a mapping key must be a plain value, "
                                                  f"not a {type(key).__name__}") from None
                if key in out:
                    raise InvalidInputError(what, f"{name}: duplicate key {key!r} at line {key_node.start_mark.line + 1}")
                out[key] = loader.construct_object(value_node, deep=deep)
            return out

        def integer(loader: Any, node: Any) -> int:
            digits = sum(ch.isdigit() for ch in str(node.value))
            if digits > MAX_INT_DIGITS:
                raise InvalidInputError(what, f"{at(node)}: an integer of {digits} digits (at most "
                                              f"{MAX_INT_DIGITS})")
            return base.construct_yaml_int(loader, node)

        def unsupported(loader: Any, node: Any) -> Any:
            raise InvalidInputError(what, f"{at(node)}: YAML sets ({node.tag}) are not accepted")

        _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
        _Loader.add_constructor("tag:yaml.org,2002:int", integer)
        _Loader.add_constructor("tag:yaml.org,2002:set", unsupported)
        return yaml.load(text, Loader=_Loader)
    except InvalidInputError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInputError(what, f"{name}: not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise InvalidInputError(what, f"{name}: nested too deeply") from None
    except (TypeError, ValueError, OverflowError) as exc:  # a constructor's refusal the checks above missed
        raise InvalidInputError(what, f"{name}: not valid YAML: {str(exc).splitlines()[0][:200]}") from None


def check_replaceable(path: Union[str, Path], *, what: str = "output") -> Path:
    """``path`` when an output file may be written there by rename (a dotfile beside it, then
    ``os.replace``): nothing there yet, or a regular file. A symbolic link, a character or block
    device, a FIFO, a socket or a directory is refused (``InvalidInputError``, exit 2): a rename
    would replace it with a regular file (issue 40 #7: ``attnplan labels -o /dev/null`` as root
    replaced /dev/null), and writing through a link is writing where the link points, not where
    the user said. Checked with ``lstat`` (the name itself, not what it points to)."""
    target = Path(path)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise InvalidInputError(what, f"cannot write {target}: {(exc.strerror or str(exc)).lower()}") from None
    if stat.S_ISLNK(st.st_mode):
        raise InvalidInputError(what, f"{target} is a symbolic link; give the file itself (a link is never "
                                      "replaced nor written through)")
    if stat.S_ISDIR(st.st_mode):
        raise InvalidInputError(what, f"{target} is a directory; give the file's name")
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInputError(what, f"{target} is not a regular file (a device, FIFO or socket); attnplan "
                                      "writes regular files only, by rename")
    return target
