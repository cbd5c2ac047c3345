"""Turn a replacement body written in a fix module into a function living in the target's module.

The body is the source of ``def <name>`` inside a per-release namespace class of the fix module. It is
compiled with the fix module's file name and line numbers (tracebacks point at our code) but executed
in the target module's globals, so every global name resolves as it would in the upstream file (and as
in the exported ``patches/`` series, which pastes the very same text into that file).
"""

from __future__ import annotations

import __future__
import importlib
import inspect
import sys
import textwrap
from typing import Callable

from .catalog import Patch
from .fingerprint import fingerprint_source, function_source, read_source

MARK = "__specv2_fix__"


def body_source(patch: Patch) -> tuple[str, str, int]:
    """(source text dedented to column 0, file name, first line) of the patch's body."""
    namespace, name = patch.body
    module = sys.modules[namespace.__module__]
    path = inspect.getsourcefile(module)
    src, first, _ = function_source(read_source(path), f"{namespace.__qualname__}.{name}")
    return textwrap.dedent(src), path, first


def body_fingerprint(patch: Patch) -> str:
    return fingerprint_source(body_source(patch)[0])


def build(patch: Patch, fix_name: str) -> Callable:
    """Compile the body into the target module's namespace and mark it as ours."""
    src, path, first = body_source(patch)
    target_module = importlib.import_module(patch.module)
    code = compile(
        "\n" * (first - 1) + src,
        path,
        "exec",
        flags=__future__.annotations.compiler_flag,  # upstream annotations may name TYPE_CHECKING-only types
        dont_inherit=True,
    )
    local_ns: dict = {}
    exec(code, target_module.__dict__, local_ns)  # noqa: S102 - our own, fingerprinted source
    (fn,) = local_ns.values()
    owner = patch.qualname.rsplit(".", 1)[0] if "." in patch.qualname else None
    fn.__qualname__ = patch.qualname
    fn.__module__ = patch.module
    setattr(fn, MARK, f"{fix_name}:{patch.target}")
    if owner is not None and "super()" in src:
        raise ValueError(f"{fix_name}: body of {patch.target} uses zero-argument super(), not supported")
    return fn
