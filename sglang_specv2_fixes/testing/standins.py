"""Import-only stand-ins for packages a machine lacks, used only where the real one is missing:

* ``sgl_kernel`` (``stubs/``): GPU-only; the CPU tests and CPU benchmarks import SGLang's Python modules with it;
* ``datasets`` (``shims/``): the GPU bundle lacks it, and ``sglang.test.test_utils`` / ``sglang.bench_serving``
  import it at module level; outlines' tokenizer hash imports ``datasets.fingerprint`` in the server (the folder
  reaches the servers through ci/gpu/env.sh, with the outlines overlay).

Each folder goes *after* everything else on the import path, so a real install always wins. Child processes get
the same stand-ins through ``PYTHONPATH`` (``child_pythonpath``), not through edits of their own path.
"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = os.path.join(HERE, "stubs")  # sgl_kernel
SHIMS = os.path.join(HERE, "shims")  # datasets
FOLDERS = {"sgl_kernel": STUBS, "datasets": SHIMS}


def _use(name):
    folder = FOLDERS[name]
    if importlib.util.find_spec(name) is None and folder not in sys.path:
        sys.path.append(folder)
    return importlib.util.find_spec(name).origin.startswith(folder)


def use_sgl_kernel_stand_in():
    """Make ``import sgl_kernel`` resolve to the CPU stand-in when no real sgl_kernel is importable; True when
    the stand-in is the one in use."""
    return _use("sgl_kernel")


def use_datasets_shim():
    """Make ``import datasets`` resolve to the import-only shim when no real datasets is importable; True when
    the shim is the one in use."""
    return _use("datasets")


def in_use(names=tuple(FOLDERS)):
    """The stand-in folders (of packages ``names``) this process resolves its imports through."""
    out = []
    for name in names:
        folder = FOLDERS[name]
        spec = importlib.util.find_spec(name) if folder in sys.path else None
        if spec is not None and spec.origin and spec.origin.startswith(folder):
            out.append(folder)
    return out


def child_pythonpath(pythonpath=None, names=tuple(FOLDERS)):
    """``pythonpath`` (default: this process's PYTHONPATH) plus the stand-in folders (of packages ``names``) this
    process uses, for a child process that must import what this one imports."""
    if pythonpath is None:
        pythonpath = os.environ.get("PYTHONPATH", "")
    paths = [p for p in pythonpath.split(os.pathsep) if p]
    paths += [f for f in in_use(names) if f not in paths]
    return os.pathsep.join(paths)


def child_env(env=None, names=tuple(FOLDERS), **extra):
    """A copy of ``env`` (default ``os.environ``) with ``child_pythonpath(..., names)`` and ``extra`` set."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = child_pythonpath(out.get("PYTHONPATH", ""), names)
    out.update(extra)
    return out
