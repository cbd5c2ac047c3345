"""The package's import graph has no cycle, and a fix's run-time rules ask only about fixes it declares.

Every ``import`` / ``from ... import`` of a ``sglang_specv2_fixes`` module anywhere in a file counts, at module level
or inside a function (the circle this replaces ran through function-level imports: core -> fixes -> tree_drafting ->
core), but for a module's ``if __name__ == "__main__":`` block, which never runs on import. Read with ast from the files, nothing is imported; testing/ is included (it imports the package, the package
never imports it). A package's own ``__init__`` is not counted as imported by its submodules: Python runs it first
either way, and only the edges written in the files can close a circle.
"""

from __future__ import annotations

import ast
import os
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = "sglang_specv2_fixes"


def modules(root: str = ROOT) -> dict:
    """Dotted module name -> (path, is a package) for every .py file of the package under ``root``."""
    out = {}
    base = os.path.join(root, PKG)
    for d, dirs, files in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__" and not os.path.islink(os.path.join(d, x)))
        for f in sorted(files):
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), root)[:-3].replace(os.sep, ".")
                is_pkg = rel.endswith(".__init__")
                out[rel[: -len(".__init__")] if is_pkg else rel] = (os.path.join(d, f), is_pkg)
    return out


def _parse(path: str):
    with warnings.catch_warnings():  # a module's own string escapes are its tests' business, not this one's
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(open(path).read(), path)


def _is_main_block(node) -> bool:
    """``if __name__ == "__main__":`` at module level: it runs only when the file is the program (``python -m``),
    as the module ``__main__``, never when the module is imported, so its imports cannot close an import circle."""
    t = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
            and t.left.id == "__name__" and len(t.comparators) == 1 and isinstance(t.comparators[0], ast.Constant)
            and t.comparators[0].value == "__main__")


def _imported_nodes(tree):
    """Every node of the module but those of its ``__main__`` block (see _is_main_block)."""
    for top in tree.body:
        if not _is_main_block(top):
            yield from ast.walk(top)


def imports_of(name: str, mods: dict) -> set:
    """The package modules ``name``'s file imports (a ``from X import y`` counts X.y where y is a module, else X)."""
    path, is_pkg = mods[name]
    tree = _parse(path)
    here = name if is_pkg else name.rpartition(".")[0]
    out = set()
    for node in _imported_nodes(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == PKG or a.name.startswith(PKG + "."):
                    m = a.name
                    while m not in mods and "." in m:
                        m = m.rpartition(".")[0]
                    out.add(m)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                m = base + ("." + node.module if node.module else "")
            else:
                m = node.module or ""
            if not (m == PKG or m.startswith(PKG + ".")):
                continue
            for a in node.names:
                sub = f"{m}.{a.name}"
                out.add(sub if sub in mods else m)
    out.discard(name)
    return out


def graph(root: str = ROOT) -> dict:
    mods = modules(root)
    return {m: imports_of(m, mods) for m in mods}


def cycles(g: dict) -> list:
    """The strongly connected components of more than one module (Tarjan), and modules that import themselves."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in g.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_graph_reads_every_import_form():
    """The reader sees relative, absolute and function-level imports (else an empty graph would pass)."""
    g = graph()
    assert f"{PKG}.fixes" in g[f"{PKG}.core"]  # from .fixes import ALL_FIXES
    assert f"{PKG}.survey" in g[f"{PKG}.core"]  # inside plan(): from .survey import plan_unknown
    assert f"{PKG}.fixes.draft_extend_graph" in g[f"{PKG}.fixes.tree_drafting"]  # from . import draft_extend_graph
    assert f"{PKG}.runtime" in g[f"{PKG}.fixes.draft_extend_graph"]  # from .. import runtime, selection
    assert len(g) > 40 and sum(map(len, g.values())) > 80


def test_a_main_block_is_not_an_import(tmp_path):
    """What a module imports only when run as the program (``if __name__ == "__main__":``) is no edge; the same import
    anywhere else is."""
    pkg = tmp_path / PKG
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    pass\n\n\nif __name__ == '__main__':\n    from .a import x\n")
    assert cycles(graph(str(tmp_path))) == []
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    assert cycles(graph(str(tmp_path))) == [[f"{PKG}.a", f"{PKG}.b"]]


def test_a_cycle_is_found():
    """The check can fail: the circle this package had (core -> fixes -> tree_drafting -> core, core <-> survey)."""
    g = {k: set(v) for k, v in graph().items()}
    g[f"{PKG}.fixes.tree_drafting"].add(f"{PKG}.core")
    g[f"{PKG}.survey"].add(f"{PKG}.core")
    (found,) = cycles(g)
    assert {f"{PKG}.core", f"{PKG}.fixes", f"{PKG}.fixes.tree_drafting", f"{PKG}.survey"} <= set(found)
    assert cycles({"a": {"a"}}) == [["a"]]


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


# ------------------------------------------------------------------------ declared run-time requirements
def _fix_modules():
    from sglang_specv2_fixes.fixes import ALL_FIXES

    import importlib

    out = {}
    for name in modules():
        if name.startswith(f"{PKG}.fixes.") and name.count(".") == 2:
            mod = importlib.import_module(name)
            if hasattr(mod, "FIX"):
                out[name] = mod.FIX
    assert {f.name for f in out.values()} == {f.name for f in ALL_FIXES}
    return out


def _in_place_calls(path: str) -> list:
    """The fix names the file's ``runtime.in_place(...)`` calls ask about (a string literal, or ``FIX.name``)."""
    out = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "in_place":
            arg = node.args[0]
            if isinstance(arg, ast.Constant):
                out.append(arg.value)
            elif ast.unparse(arg) == "FIX.name":
                out.append("FIX.name")
            else:
                out.append(ast.unparse(arg))
    return out


def test_run_time_rules_ask_only_about_declared_fixes():
    """A fix module's in_place asks about itself or a fix its ``requires`` names; a shared module (no FIX, the
    draft-extend graph policy) about fixes that some fix importing it requires or is."""
    mods, g, fixes = modules(), graph(), _fix_modules()
    names = {f.name for f in fixes.values()}
    asked = 0
    for name, (path, _) in mods.items():
        calls = _in_place_calls(path)
        asked += len(calls)
        if name in fixes:
            fix = fixes[name]
            allowed = set(fix.requires) | {fix.name, "FIX.name"}
        else:
            users = [fixes[m] for m in fixes if name in g[m]]
            allowed = {r for f in users for r in f.requires} | {f.name for f in users}
        for c in calls:
            assert c in names or c == "FIX.name", f"{name}: in_place({c!r}) names no fix"
            assert c in allowed, f"{name}: in_place({c!r}) is not declared in requires (allowed: {sorted(allowed)})"
    assert asked >= 4  # the draft-extend graph rules: draft-extend-kv-range, flashinfer's metadata and plan, verify-handoff


def test_the_planner_refuses_an_undeclared_requirement():
    import dataclasses

    from sglang_specv2_fixes import core
    from sglang_specv2_fixes.fixes import ALL_FIXES

    for fix in ALL_FIXES:
        assert all(r != fix.name and any(r == f.name for f in ALL_FIXES) for r in fix.requires), fix.name
    core.check_requires(ALL_FIXES)
    bad = dataclasses.replace(ALL_FIXES[0], requires=("no-such-fix",))
    with pytest.raises(ValueError, match="no-such-fix"):
        core.check_requires([bad])
    with pytest.raises(ValueError, match="requires"):
        core.check_requires([dataclasses.replace(ALL_FIXES[0], requires=(ALL_FIXES[0].name,))])
