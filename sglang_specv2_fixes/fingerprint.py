"""Fingerprints of function sources, read from files (nothing is imported, nothing is parsed whole).

The fingerprint of a function is the first 16 hex digits of the sha256 of its normalised source:
decorators included, dedented, trailing whitespace and blank lines removed, and the ``def`` name kept
(bodies in this plugin are written with the upstream name). Comments and docstrings are part of it
on purpose: any local edit of the upstream function refuses the fix rather than patching code we have
not read.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import inspect
import itertools
import os
import re
import sys
import textwrap
from typing import Optional, Tuple


class SourceNotFound(LookupError):
    pass


def normalise_reference(src: str) -> str:
    """What ``normalise`` computes, by textwrap.dedent (slow: a regex pass over the whole text, ~0.2 ms a target at
    start-up)."""
    lines = [ln.rstrip() for ln in textwrap.dedent(src).splitlines()]
    return "\n".join(ln for ln in lines if ln)


_OTHER_LINE_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")  # str.splitlines'


def normalise(src: str) -> str:
    """The source without its common indentation, trailing whitespace and blank lines: the text a fingerprint hashes.
    Equal to ``normalise_reference`` where no line holds a line break other than ``\\n`` (checked on every target of
    every release, tests/cpu/test_fingerprints.py); otherwise that one is used."""
    if any(c in src for c in _OTHER_LINE_BREAKS):
        return normalise_reference(src)
    raw = src.split("\n")
    margin = None
    for ln in raw:  # textwrap.dedent's margin: the longest common run of leading spaces and tabs of the lines that
        if not ln.strip(" \t"):  # hold more than spaces and tabs
            continue
        indent = ln[: len(ln) - len(ln.lstrip(" \t"))]
        if margin is None:
            margin = indent
        elif not indent.startswith(margin):
            k = 0
            while k < len(margin) and k < len(indent) and margin[k] == indent[k]:
                k += 1
            margin = margin[:k]
    n = len(margin or "")
    out = []
    for ln in raw:
        ln = (ln[n:] if ln.strip(" \t") else "").rstrip()
        if ln:
            out.append(ln)
    return "\n".join(out)


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


# The per-text caches below hold as many texts as read_source's (64): a release's targets sit in about 18 module files,
# and plan() visits them fix by fix, so 16 entries were evicted and re-split within one start (start cost).
@functools.lru_cache(maxsize=64)
def _lines(text: str):
    return text.splitlines(keepends=True)


@functools.lru_cache(maxsize=64)
def _digest(text: str) -> str:
    """The sha256 that names ``text``'s entry under cache_dir(): once per text, not once per function looked up."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_DEF_LINE = re.compile(r"^(\s*)(?:async\s+def|def|class)\s+(\w+)")
_BRACKETS = str.maketrans("", "", "()[]{}")


@functools.lru_cache(maxsize=64)
def _defs(text: str):
    """Every def/class line of a module text: (0-based line, indentation, name), in order; one scan per text."""
    out = []
    for i, line in enumerate(_lines(text)):
        if "def" in line or "class" in line:
            m = _DEF_LINE.match(line)
            if m:
                out.append((i, len(m.group(1)), m.group(2)))
    return tuple(out)


# line breaks str.splitlines knows besides LF: a text holding any of them is not scanned by ``_code_at`` (whose ``^``
# only follows LF), so that its line numbers stay str.splitlines'
_OTHER_BREAKS = re.compile("[\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


@functools.lru_cache(maxsize=64)
def _starts(text: str):
    """Offsets of the lines of ``text`` (``_lines``) in it, or None where ``text`` has other line breaks than LF."""
    if _OTHER_BREAKS.search(text):
        return None
    return (0, *itertools.accumulate(map(len, _lines(text))))


@functools.lru_cache(maxsize=32)
def _code_at(indent: int):
    """Candidates for a line that leaves a block at ``indent``: at most ``indent`` spaces or tabs, then anything but
    blank, ``#`` or more spaces. A superset of the lines _leaves takes (every candidate is checked as it would be)."""
    return re.compile(r"^[ \t]{0,%d}[^ \t\n#]" % indent, re.M)


def _leaving(lines, i: int, indent: int):
    """None if line ``i`` stays in a block at ``indent``; else whether it is taken for a multi-line string's tail
    (True: not left, but noted) or leaves (False)."""
    stripped = lines[i].lstrip()
    if not stripped or stripped.startswith("#") or len(lines[i]) - len(stripped) > indent:
        return None
    return _in_string_guess(stripped)


@functools.lru_cache(maxsize=256)
def _leaves(text: str, start: int, indent: int) -> Tuple[int, bool]:
    """(0-based first line after ``start`` that leaves the block of the def/class at ``start``, the number of lines
    if none does; whether a line at ``indent`` or less that starts with a quote was taken for the tail of a multi-line
    string on the way). Leaving: a non-blank, non-comment line at ``indent`` or less that does not look like such a tail.
    Lines are found by a regex scan (``_code_at``) and each candidate checked line by line (``_leaving``): a class
    body of thousands of lines costs one C-level search, not a Python step per line."""
    lines = _lines(text)
    guessed = False
    starts = _starts(text)
    if starts is None:  # other line breaks: every line, one by one
        candidates = range(start + 1, len(lines))
    else:
        candidates = (bisect.bisect_right(starts, m.start()) - 1
                      for m in _code_at(indent).finditer(text, starts[min(start + 1, len(lines))]))
    for i in candidates:
        tail = _leaving(lines, i, indent)
        if tail is None:
            continue
        if not tail:
            return i, guessed
        guessed = guessed or lines[i].lstrip()[:1] in "\"'"  # a closing bracket is checked by the balance instead
    return len(lines), guessed


def _locate_indexed(text: str, qualname: str) -> Tuple[int, int]:
    """``_locate`` on the def index: the same answer (tests/cpu/test_fingerprint.py compares both on every def of
    the release trees), without a regex match per line per target."""
    defs = _defs(text)
    pos, parent_indent, end = 0, -1, len(_lines(text))
    for part in qualname.split("."):
        found = None
        for i, ind, name in defs:
            if i < pos or (parent_indent >= 0 and i == pos):
                continue
            if i >= end:
                break
            if name == part and ind > parent_indent:
                found = (i, ind)
                break
        if found is None:
            raise SourceNotFound(qualname)
        pos, parent_indent = found
        end = _leaves(text, pos, parent_indent)[0]
    return pos, parent_indent


def _block_end_fast(text: str, start: int, indent: int) -> Optional[int]:
    """Last line of the block by indentation (``_leaves``), or None where that is not safe to trust: an odd
    number of triple quotes or unbalanced brackets in it (a multi-line string or expression cut short). The
    caller then tokenizes (``_block_end``)."""
    lines = _lines(text)
    stop, guessed = _leaves(text, start, indent)
    if guessed:
        return None
    end = _last_code_line(lines, start, stop - 1)
    block = "".join(lines[start:end + 1])
    if block.count('"""') % 2 or block.count("'''") % 2:
        return None
    if len(block) - len(block.translate(_BRACKETS)) and (
            block.count("(") != block.count(")") or block.count("[") != block.count("]")
            or block.count("{") != block.count("}")):
        return None
    if stop < len(lines) and lines[stop].lstrip()[:1] in ")]}":
        return None
    return end


def cache_dir() -> Optional[str]:
    """Where start-up results are kept between processes (``SGLANG_SPECV2_FIXES_CODE_CACHE``: a folder, or ``0``
    for none; default ``$XDG_CACHE_HOME/sglang-specv2-fixes/code``, else ``~/.cache/...``): compiled patched
    functions (patchfile) and where functions are in a module text (function_source)."""
    d = os.environ.get("SGLANG_SPECV2_FIXES_CODE_CACHE")
    if d is not None:
        return None if d.strip() in ("", "0") else d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sglang-specv2-fixes", "code")


_SPANS: dict = {}  # text digest -> {qualname: [first, last]} read from / written to cache_dir() in this process


def _spans_path(digest: str) -> Optional[str]:
    d = cache_dir()
    return os.path.join(d, f"{digest}.spans.json") if d else None


def _known_spans(digest: str) -> dict:
    if digest not in _SPANS:
        import json

        path, spans = _spans_path(digest), {}
        if path:
            try:
                with open(path) as f:
                    spans = {k: tuple(v) for k, v in json.load(f).items() if _entry_ok(v)}
            except (OSError, ValueError, AttributeError):
                spans = {}
        _SPANS[digest] = spans
    return _SPANS[digest]


def _entry_ok(v) -> bool:
    """A stored entry: [first, last] (function_source), or [first, last, fingerprint] (fingerprint_in_file)."""
    return isinstance(v, list) and len(v) in (2, 3) and all(isinstance(x, int) for x in v[:2]) and (
        len(v) == 2 or isinstance(v[2], str) and len(v[2]) == 16)


def _remember_span(digest: str, qualname: str, span: Tuple[int, int], fp: Optional[str] = None) -> None:
    """Keep ``qualname``'s span in the text named ``digest`` (and its fingerprint where given; a fingerprint kept
    for the same span stays)."""
    spans = _known_spans(digest)
    old = spans.get(qualname)
    entry = tuple(span) + ((fp,) if fp else old[2:] if old is not None and old[:2] == tuple(span) else ())
    if entry == old:
        return
    spans[qualname] = entry
    path = _spans_path(digest)
    if path is None or sys.dont_write_bytecode:
        return
    import json

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({k: list(v) for k, v in spans.items()}, f)
        os.replace(tmp, path)
    except OSError:
        pass


@functools.lru_cache(maxsize=256)
def function_source(text: str, qualname: str) -> Tuple[str, int, int]:
    """(source, first line, last line) of ``qualname`` in module text; decorators included, 1-based.

    The block ends at its last non-blank line (trailing comment-only lines are not part of it). Cached: at
    start-up every target is located in the installed file by plan() (its fingerprint) and again by
    patchfile.apply_text() (where its hunks go), the same text object from read_source() both times. Located on a
    per-text index of def lines and ended by indentation, with the tokenizer (``inspect.getblock``, as before)
    only where a block's text is not balanced: start-up cost, checked equal to the tokenizer on every def of every
    release (tests/cpu/test_fingerprint.py). The span found is also kept under cache_dir(), named by the sha256 of
    the text (the same text always gives the same span), so the next process of a server only slices the lines;
    the source sliced is what plan() fingerprints, so a wrong span could only refuse a fix, never patch other code."""
    lines = _lines(text)
    digest = _digest(text)
    known = _known_spans(digest).get(qualname)
    if known is not None and 1 <= known[0] <= known[1] <= len(lines):
        return "".join(lines[known[0] - 1 : known[1]]), known[0], known[1]
    start, indent = _locate_indexed(text, qualname)
    end = _block_end_fast(text, start, indent)
    if end is None:
        end = _last_code_line(lines, start, _block_end(lines, start))
    found = _with_decorators(lines, start, indent, end)
    _remember_span(digest, qualname, found[1:])
    return found


def function_source_tokenized(text: str, qualname: str) -> Tuple[str, int, int]:
    """The reference ``function_source``: a regex match per line (``_locate``) and the tokenizer for every block."""
    lines = text.splitlines(keepends=True)
    start, indent = _locate(lines, qualname)
    return _with_decorators(lines, start, indent, _last_code_line(lines, start, _block_end(lines, start)))


def _last_code_line(lines, start: int, end: int) -> int:
    """``end`` moved up past blank and comment-only lines (not below ``start``): where a block's code ends."""
    while end > start and (not lines[end].strip() or lines[end].lstrip().startswith("#")):
        end -= 1
    return end


def _with_decorators(lines, start: int, indent: int, end: int) -> Tuple[str, int, int]:
    """(source, first line, last line), 1-based, of the block ``start`` .. ``end`` with the decorator lines above it
    at its indentation."""
    first = start
    while first > 0 and lines[first - 1].lstrip().startswith("@") and len(lines[first - 1]) - len(lines[first - 1].lstrip()) == indent:
        first -= 1
    return "".join(lines[first : end + 1]), first + 1, end + 1


def fingerprint_in_file(path: str, qualname: str) -> Optional[str]:
    """Fingerprint of ``qualname`` in the file at ``path``; None if the file or the function is absent.

    Kept with the function's span under cache_dir() (the entry is named by the text's sha256, and the fingerprint is
    that of the span's lines): the next process of a server neither slices nor normalises the source (start cost).
    What the plan reads so is checked again where it matters: a patch's hunks must apply exactly and the patched
    function must have the file's ``after=`` fingerprint (patchfile.compile_target)."""
    try:
        text = read_source(path)
        digest = _digest(text)
        known = _known_spans(digest).get(qualname)
        if known is not None and len(known) == 3:
            return known[2]
        src, first, last = function_source(text, qualname)
    except (OSError, SyntaxError, SourceNotFound, IndentationError):
        return None
    fp = fingerprint_source(src)
    _remember_span(digest, qualname, (first, last), fp)
    return fp


def installed_fingerprint(module: str, qualname: str) -> Optional[str]:
    """Fingerprint of ``module``'s ``qualname`` in the installed sglang (None: the file or the function is not
    there), read from the file: what core.plan and survey compare with the release table and the patch files."""
    from .installed import module_file  # stdlib only; kept out of this module's import

    path = module_file(module)
    return fingerprint_in_file(path, qualname) if path else None
