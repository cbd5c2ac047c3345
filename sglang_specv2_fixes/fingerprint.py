"""Fingerprints of function sources, read with ``ast`` from files (nothing is imported).

The fingerprint of a function is the first 16 hex digits of the sha256 of its normalised source:
decorators included, dedented, trailing whitespace and blank lines removed, and the ``def`` name kept
(bodies in this plugin are written with the upstream name). Comments and docstrings are part of it
on purpose: any local edit of the upstream function refuses the fix rather than patching code we have
not read.
"""

from __future__ import annotations

import ast
import hashlib
import textwrap
from typing import Optional, Tuple


class SourceNotFound(LookupError):
    pass


def normalise(src: str) -> str:
    lines = [ln.rstrip() for ln in textwrap.dedent(src).splitlines()]
    return "\n".join(ln for ln in lines if ln)


def fingerprint_source(src: str) -> str:
    return hashlib.sha256(normalise(src).encode()).hexdigest()[:16]


def _find(tree: ast.AST, qualname: str) -> ast.AST:
    node = tree
    for part in qualname.split("."):
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child.name == part:
                node = child
                break
        else:
            raise SourceNotFound(qualname)
    return node


def function_source(text: str, qualname: str) -> Tuple[str, int, int]:
    """(source, first line, last line) of ``qualname`` in module text; decorators included, 1-based."""
    node = _find(ast.parse(text), qualname)
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    lines = text.splitlines()
    return "\n".join(lines[first - 1 : node.end_lineno]) + "\n", first, node.end_lineno


def fingerprint_in_file(path: str, qualname: str) -> Optional[str]:
    """Fingerprint of ``qualname`` in the file at ``path``; None if the file or the function is absent."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        src, _, _ = function_source(text, qualname)
    except (OSError, SyntaxError, SourceNotFound):
        return None
    return fingerprint_source(src)
