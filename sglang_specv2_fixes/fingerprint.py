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


_INDENT = re.compile(r"\n([ \t]*)[^ \t\n]")  # after an LF: a line's indentation, where the line holds more


def normalise(src: str) -> str:
    """The source without its common indentation, trailing whitespace and blank lines: the text a fingerprint hashes.
    Equal to ``normalise_reference`` where no line holds a line break other than ``\\n`` (checked on every target of
    every release, tests/cpu/test_fingerprints.py); otherwise that one is used. Every step is one C-level pass over
    the text (a Python step per line cost ~0.2 ms a function: start cost)."""
    if any(c in src for c in _OTHER_LINE_BREAKS):
        return normalise_reference(src)
    # textwrap.dedent's margin: the longest common run of leading spaces and tabs of the lines that hold more than
    # spaces and tabs (their common prefix: the shortest and the longest indentation share it)
    indents = _INDENT.findall("\n" + src)
    margin = ""
    if indents:
        lo, hi = min(indents), max(indents)
        n = 0
        while n < len(lo) and lo[n] == hi[n]:
            n += 1
        margin = lo[:n]
    # a line blank once its trailing whitespace is gone is dropped; every other line holds more than spaces and tabs,
    # so it starts with the margin, which then goes from the start of every line at once
    out = "\n".join(filter(None, map(str.rstrip, src.split("\n"))))
    return ("\n" + out).replace("\n" + margin, "\n")[1:] if margin else out


def fingerprint_source(src: str) -> str:
    return hashlib.sha256(normalise(src).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int, size: int) -> str:
    """The file's text as ``open(path, encoding="utf-8").read()`` gives it (universal newlines), decoded from the bytes
    read, whose sha256 names the text where it equals theirs (no CR translated): ``_digest`` then hashes nothing
    again (text-mode reading and encoding the text back cost as much again as reading the bytes: start cost)."""
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    else:
        _keep_digest(text, hashlib.sha256(raw).hexdigest()[:32])
    return text


def read_source(path: str) -> str:
    """File text, cached per (path, mtime, size): each module is read once per process."""
    st = os.stat(path)
    return _read(path, st.st_mtime_ns, st.st_size)


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
def plain_lines(text: str) -> Tuple[str, ...]:
    """``text``'s lines without their ends, split once per text: what patchfile applies hunks to (every patch file and
    stack that touches a module starts from its one split)."""
    return tuple(text.splitlines())


_DIGESTS: dict = {}  # text -> _digest(text), for the texts last looked up or read (as many as the caches above hold)


def _digest(text: str) -> str:
    """The sha256 (of its UTF-8 encoding) that names ``text``'s entry under cache_dir(): once per text, not once per
    function looked up (a file's text is named by the bytes read: ``_read``)."""
    got = _DIGESTS.get(text)
    if got is None:
        got = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        _keep_digest(text, got)
    return got


def _keep_digest(text: str, digest: str) -> None:
    if len(_DIGESTS) >= 64:
        del _DIGESTS[next(iter(_DIGESTS))]  # the oldest
    _DIGESTS[text] = digest


_DEF_LINE = re.compile(r"^(\s*)(?:async\s+def|def|class)\s+(\w+)")
_BRACKETS = str.maketrans("", "", "()[]{}")


@functools.lru_cache(maxsize=64)
def _defs(text: str):
    """Every def/class line of a module text: (0-based line, indentation, name), in order; one scan per text (for a
    text with line breaks other than LF: ``_next_def``)."""
    return _defs_by_line(text)


def _defs_by_line(text: str):
    out = []
    for i, line in enumerate(_lines(text)):
        if "def" in line or "class" in line:
            m = _DEF_LINE.match(line)
            if m:
                out.append((i, len(m.group(1)), m.group(2)))
    return tuple(out)


# a text holding any line break str.splitlines knows besides LF (_OTHER_LINE_BREAKS) is not scanned by ``_code_at``
# (whose ``^`` only follows LF), so that its line numbers stay str.splitlines'


@functools.lru_cache(maxsize=64)
def _starts(text: str):
    """Offsets of the lines of ``text`` (``_lines``) in it, or None where ``text`` has other line breaks than LF (looked
    for one by one with ``in``: the character-class regex took ~1.5 ms a module)."""
    if any(c in text for c in _OTHER_LINE_BREAKS):
        return None
    return (0, *itertools.accumulate(map(len, _lines(text))))


@functools.lru_cache(maxsize=32)
def _code_at(indent: int):
    """Candidates for a line that leaves a block at ``indent``: at most ``indent`` spaces or tabs, then anything but
    blank, ``#`` or more spaces. A superset of the lines _leaves takes (every candidate is checked as it would be).
    Matched from the LF before the line (a literal-led search; ``^`` in MULTILINE mode is tried at every character, ~10
    times slower over a class body: start cost)."""
    return re.compile(r"\n[ \t]{0,%d}[^ \t\n#]" % indent)


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
        candidates = (bisect.bisect_right(starts, m.start() + 1) - 1
                      for m in _code_at(indent).finditer(text, starts[min(start + 1, len(lines))] - 1))
    for i in candidates:
        tail = _leaving(lines, i, indent)
        if tail is None:
            continue
        if not tail:
            return i, guessed
        guessed = guessed or lines[i].lstrip()[:1] in "\"'"  # a closing bracket is checked by the balance instead
    return len(lines), guessed


def _locate_indexed(text: str, qualname: str) -> Tuple[int, int]:
    """``_locate`` without a regex match per line per target (``_next_def``): the same answer
    (tests/cpu/test_fingerprint.py compares both on every def of the release trees)."""
    pos, parent_indent, end = 0, -1, len(_lines(text))
    for part in qualname.split("."):
        found = _next_def(text, part, pos + (parent_indent >= 0), end, parent_indent)
        if found is None:
            raise SourceNotFound(qualname)
        pos, parent_indent = found
        end = _leaves(text, pos, parent_indent)[0]
    return pos, parent_indent


def _next_def(text: str, name: str, lo: int, hi: int, parent_indent: int) -> Optional[Tuple[int, int]]:
    """(0-based line, indentation) of the first def/class line named ``name`` among lines ``lo`` .. ``hi - 1``
    indented deeper than ``parent_indent``, or None. Where the text's only line break is LF, the lines looked at are
    those where ``str.find`` meets the name (a C-level search: indexing every line of a module in Python cost ~0.4 ms
    per 1,000 lines at start-up); else the def index (``_defs``)."""
    starts = _starts(text)
    if starts is None:
        for i, ind, n in _defs(text):
            if i >= hi:
                break
            if i >= lo and n == name and ind > parent_indent:
                return i, ind
        return None
    lines, stop, seen = _lines(text), starts[hi], -1
    at = text.find(name, starts[lo], stop)
    while at >= 0:
        i = bisect.bisect_right(starts, at) - 1
        if i != seen:  # a def line holds its name: each line met is matched once, in order
            seen = i
            m = _DEF_LINE.match(lines[i])
            if m and m.group(2) == name and len(m.group(1)) > parent_indent:
                return i, len(m.group(1))
        at = text.find(name, at + 1, stop)
    return None


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


CACHE_ENV = "SGLANG_SPECV2_FIXES_CODE_CACHE"
_MAC_BYTES = 32  # each entry starts with its keyed blake2b digest (``_seal``)


def cache_dir() -> Optional[str]:
    """Where start-up results are kept between processes (``SGLANG_SPECV2_FIXES_CODE_CACHE``: a folder, or ``0``
    for none; default ``$XDG_CACHE_HOME/sglang-specv2-fixes/code-v2``, else ``~/.cache/...``): compiled patched
    functions (patchfile) and where functions are in a module text, with their fingerprints (function_source).

    An accelerator, never a source of truth (docs/usage.md, "The code cache"): an entry is used only from a folder
    that this user owns with no group or other permission bits (mode 0700, as the plugin creates it; another folder is
    ignored with one warning), only when its keyed digest (a random key kept in that folder, readable by this user
    only) matches its name and contents for this plugin's version and code (``_CONTEXT``), and a compiled function's
    entry is named by the sha256 of its source, file, line, the interpreter's bytecode magic and optimisation level.
    """
    d = os.environ.get(CACHE_ENV)
    if d is not None:
        return None if d.strip() in ("", "0") else d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    # code-v2: the folder an earlier version made (mode 0755, entries without a digest) is left alone, not trusted
    return os.path.join(base, "sglang-specv2-fixes", "code-v2")


def _own_code() -> bytes:
    """What this module's results depend on besides their input text: the plugin's version and this file (how
    functions are located and fingerprinted), so that an entry of another version or an edited checkout is not
    taken."""
    from . import __version__

    h = hashlib.sha256(__version__.encode())
    try:
        with open(__file__, "rb") as f:
            h.update(f.read())
    except OSError:  # a sourceless install: the version alone
        pass
    return h.hexdigest()[:32].encode()


_CONTEXT = _own_code()
_KEYS: dict = {}  # cache folder -> its key (bytes), or False: not trusted (warned once); checked once per process


def _trusted(st, regular: bool) -> bool:
    import stat

    kind = stat.S_ISREG(st.st_mode) if regular else stat.S_ISDIR(st.st_mode)
    return kind and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _untrusted(d: str, st) -> None:
    import logging
    import multiprocessing

    _KEYS[d] = False
    if multiprocessing.parent_process() is None:  # one warning, from the launching process
        logging.getLogger("sglang_specv2_fixes").warning(
            "sglang-specv2-fixes: code cache %s is not used: it must be a folder owned by uid %d with mode 0700 (it "
            "is owned by uid %d, mode %o). Start-up computes everything instead; remove the folder (the plugin "
            "creates it with mode 0700) or point %s at another one, or set it to 0 for no cache.",
            d, os.getuid(), st.st_uid, st.st_mode & 0o7777, CACHE_ENV)


def _read_key(d: str) -> Optional[bytes]:
    try:
        fd = os.open(os.path.join(d, "key"), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        key = os.read(fd, 33) if _trusted(st, regular=True) else b""
    finally:
        os.close(fd)
    return key if len(key) == 32 else None


def _dir_key(d: str, create: bool) -> Optional[bytes]:
    """The key of cache folder ``d`` where ``d`` can be trusted (see cache_dir), else None; ``create``: make the folder
    (mode 0700) and its key where they do not exist yet."""
    got = _KEYS.get(d)
    if got is not None:
        return got or None
    try:
        st = os.stat(d)
    except FileNotFoundError:
        if not create:
            return None
        try:
            os.makedirs(os.path.dirname(os.path.abspath(d)), exist_ok=True)
            os.mkdir(d, 0o700)  # the umask can only take bits away
        except FileExistsError:
            pass
        except OSError:
            return None
        try:
            st = os.stat(d)
        except OSError:
            return None
    except OSError:
        return None
    if not _trusted(st, regular=False):
        _untrusted(d, st)
        return None
    key = _read_key(d)
    if key is None and create:
        try:
            fd = os.open(os.path.join(d, "key"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, os.urandom(32))
            finally:
                os.close(fd)
        except OSError:  # another process made it first: read theirs
            pass
        key = _read_key(d)
    if key is not None:
        _KEYS[d] = key
    return key


def _seal(key: bytes, name: str, payload: bytes) -> bytes:
    h = hashlib.blake2b(key=key, digest_size=_MAC_BYTES)
    h.update(_CONTEXT + b"\0" + name.encode() + b"\0")
    h.update(payload)
    return h.digest()


def read_entry(name: str) -> Optional[bytes]:
    """The payload of cache entry ``name`` if the cache folder is trusted and the entry's digest is this folder's for
    this name, payload and plugin (``_seal``); else None (the caller computes what it would have held)."""
    d = cache_dir()
    key = _dir_key(d, create=False) if d else None
    if key is None:
        return None
    try:
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
    except OSError:
        return None
    import hmac

    payload = data[_MAC_BYTES:]
    return payload if hmac.compare_digest(data[:_MAC_BYTES], _seal(key, name, payload)) else None


def write_entry(name: str, payload: bytes) -> None:
    """Keep ``payload`` as cache entry ``name`` (nothing while ``sys.dont_write_bytecode``, nor where the folder cannot
    be made or trusted); written whole under a temporary name, then renamed."""
    d = cache_dir()
    if d is None or sys.dont_write_bytecode:
        return
    key = _dir_key(d, create=True)
    if key is None:
        return
    path = os.path.join(d, name)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(_seal(key, name, payload) + payload)
        os.replace(tmp, path)
    except OSError:
        pass


_SPANS: dict = {}  # text digest -> {qualname: [first, last(, fingerprint)]} read from / kept under cache_dir()
_DIRTY: set = set()  # digests whose spans changed in this process and are not written yet (flush)
_AT_EXIT: list = []  # flush registered with atexit (once per process)


def _spans_name(digest: str) -> str:
    return f"{digest}.spans"


def _known_spans(digest: str) -> dict:
    if digest not in _SPANS:
        import json

        spans = {}
        raw = read_entry(_spans_name(digest))
        if raw is not None:
            try:
                spans = {k: tuple(v) for k, v in json.loads(raw).items() if _entry_ok(v)}
            except (ValueError, AttributeError, UnicodeDecodeError):
                spans = {}
        _SPANS[digest] = spans
    return _SPANS[digest]


_ABSENT = (0, 0, None)  # fingerprint_in_file's entry for a function the text does not hold


def _entry_ok(v) -> bool:
    """A stored entry: [first, last] (function_source), [first, last, fingerprint] (fingerprint_in_file), or
    [0, 0, null]: not in the text (fingerprint_in_file)."""
    return isinstance(v, list) and len(v) in (2, 3) and all(isinstance(x, int) for x in v[:2]) and (
        len(v) == 2 or isinstance(v[2], str) and len(v[2]) == 16 or tuple(v) == _ABSENT)


def _remember_span(digest: str, qualname: str, span: Tuple[int, int], fp: Optional[str] = None) -> None:
    """Keep ``qualname``'s span in the text named ``digest`` (and its fingerprint where given; a fingerprint kept
    for the same span stays; span ``_ABSENT[:2]``: the text does not hold it); written by ``flush``, once per text
    and process."""
    spans = _known_spans(digest)
    old = spans.get(qualname)
    entry = _ABSENT if tuple(span) == _ABSENT[:2] else tuple(span) + (
        (fp,) if fp else old[2:] if old is not None and old[:2] == tuple(span) else ())
    if entry == old:
        return
    spans[qualname] = entry
    if not _AT_EXIT:
        import atexit

        atexit.register(flush)
        _AT_EXIT.append(flush)
    _DIRTY.add(digest)


def flush() -> None:
    """Write the spans found in this process (one entry per text: rewriting an entry per function cost ~1 ms each in
    renames). Called at the end of plugin.register and at exit."""
    import json

    while _DIRTY:
        digest = _DIRTY.pop()
        spans = _SPANS.get(digest)
        if spans:
            write_entry(_spans_name(digest), json.dumps({k: list(v) for k, v in spans.items()}).encode())


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


def function_span(text: str, qualname: str) -> Tuple[int, int]:
    """(first line, last line) of ``qualname`` in module text, as ``function_source`` gives them; a span kept under
    cache_dir() is checked against the text's line count (``plain_lines``) and taken without slicing the source."""
    known = _known_spans(_digest(text)).get(qualname)
    if known is not None and 1 <= known[0] <= known[1] <= len(plain_lines(text)):
        return known[0], known[1]
    return function_source(text, qualname)[1:]


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
    that of the span's lines; a function the text does not hold is kept as such, ``_ABSENT``): the next process of a
    server neither locates, slices nor normalises the source (start cost). What the plan reads so is checked again
    where it matters: a patch's hunks must apply exactly and the patched function must have the file's ``after=``
    fingerprint (patchfile.compile_target)."""
    try:
        text = read_source(path)
        digest = _digest(text)
        known = _known_spans(digest).get(qualname)
        if known is not None and len(known) == 3:
            return known[2]
        src, first, last = function_source(text, qualname)
    except SourceNotFound:
        _remember_span(digest, qualname, _ABSENT[:2])
        return None
    except (OSError, SyntaxError, IndentationError):
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
