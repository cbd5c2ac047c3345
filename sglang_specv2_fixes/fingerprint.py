"""Fingerprints of function sources, read from files (nothing is imported, nothing is parsed whole).

The fingerprint of a function is the first 16 hex digits of the sha256 of its normalised source:
decorators included, dedented, trailing whitespace and blank lines removed, and the ``def`` name kept
(bodies in this plugin are written with the upstream name). Comments and docstrings are part of it
on purpose: any local edit of the upstream function refuses the fix rather than patching code we have
not read.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import re
import textwrap
from typing import Optional, Tuple


class SourceNotFound(LookupError):
    pass


def normalise(src: str) -> str:
    lines = [ln.rstrip() for ln in textwrap.dedent(src).splitlines()]
    return "\n".join(ln for ln in lines if ln)


def fingerprint_source(src: str) -> str:
    return hashlib.sha256(normalise(src).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_source(path: str) -> str:
    """File text, cached per (path, mtime): each module is read once per process."""
    return _read(path, os.stat(path).st_mtime_ns)


def _locate(lines, qualname: str) -> Tuple[int, int]:
    """0-based (def/class line, indentation) of ``qualname``.

    Walks the dotted name one part at a time: the next ``class``/``def`` of that name indented deeper
    than its parent and found before the parent's block ends (a non-blank, non-comment line at the
    parent's indentation or less). Only the located block is tokenized (see _block_end), so a lookup
    in a 7,000-line module costs a regex scan, not a full parse.
    """
    pos, parent_indent = 0, -1
    for part in qualname.split("."):
        pat = re.compile(r"^(\s*)(?:async\s+def|def|class)\s+" + re.escape(part) + r"\b")
        for i in range(pos, len(lines)):
            line = lines[i]
            stripped = line.lstrip()
            if not stripped or stripped.startswith("#"):
                continue
            indent = len(line) - len(stripped)
            if i > pos and indent <= parent_indent and parent_indent >= 0 and not _in_string_guess(stripped):
                break  # left the parent block
            m = pat.match(line)
            if m and indent > parent_indent:
                pos, parent_indent = i, indent
                break
        else:
            raise SourceNotFound(qualname)
        if pos != i:
            raise SourceNotFound(qualname)
    return pos, parent_indent


def _in_string_guess(stripped: str) -> bool:
    # a dedented line inside a multi-line string would look like the end of the block; SGLang's code is
    # black-formatted, so only closing quotes/brackets of such constructs start at low indentation
    return stripped[:1] in ")]}\"'"


def _block_end(lines, start: int) -> int:
    """0-based last line of the def/class block starting at ``start`` (tokenizer-based, like inspect)."""
    return start + len(inspect.getblock(lines[start:])) - 1


@functools.lru_cache(maxsize=256)
def function_source(text: str, qualname: str) -> Tuple[str, int, int]:
    """(source, first line, last line) of ``qualname`` in module text; decorators included, 1-based.

    The block ends at its last non-blank line (trailing comment-only lines are not part of it). Cached: at
    start-up every target is located in the installed file by plan() (its fingerprint) and again by
    patchfile.apply_text() (where its hunks go), the same text object from read_source() both times; locating
    means tokenizing the block, a third of the plugin's own start cost before this cache."""
    lines = text.splitlines(keepends=True)
    start, indent = _locate(lines, qualname)
    end = _block_end(lines, start)
    while end > start and (not lines[end].strip() or lines[end].lstrip().startswith("#")):
        end -= 1
    first = start
    while first > 0 and lines[first - 1].lstrip().startswith("@") and len(lines[first - 1]) - len(lines[first - 1].lstrip()) == indent:
        first -= 1
    return "".join(lines[first : end + 1]), first + 1, end + 1


def fingerprint_in_file(path: str, qualname: str) -> Optional[str]:
    """Fingerprint of ``qualname`` in the file at ``path``; None if the file or the function is absent."""
    try:
        src, _, _ = function_source(read_source(path), qualname)
    except (OSError, SyntaxError, SourceNotFound, IndentationError):
        return None
    return fingerprint_source(src)
