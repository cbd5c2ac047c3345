"""outlines-spec-guard on the release's real ``create_grammar_backend`` (#24413): with the stock outlines backend and a
speculative algorithm the plugin refuses at startup, naming the combination and the way out; stock builds the backend
(and the verify later reads its dense mask as packed words and calls the rollback it lacks).

The bug, read on the release's real objects: ``spec_utils.traverse_tree`` reads the mask 32 tokens per int32 word and
its caller rolls the grammar back; ``OutlinesGrammar`` (read from the release's ``outlines_backend.py`` source: the
outlines package does not import in the CPU environment) allocates a ``torch.bool`` mask and defines no ``rollback``,
so ``BaseGrammarObject.rollback`` (real) raises NotImplementedError. Stand-in: ``sglang.srt.constrained.outlines_backend``
is replaced, for one test, by a module whose ``OutlinesGrammarBackend`` records that it was built (the real one needs the
outlines package and a tokenizer). The server flags are published as a launch publishes them
(``scenarios.published_server_args``: the release's ``get_exec`` / ``get_spec`` read them from 0.5.18).
"""

import ast
import inspect
import os
import re
import sys
import types

import pytest
from conftest import requires_sglang, where_patched

from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import outlines_spec_guard

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = outlines_spec_guard.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's create_grammar_backend")


def _stock():
    from sglang.srt.constrained import base_grammar_backend

    return base_grammar_backend.create_grammar_backend


def _plugin():
    (fn,) = core.build_fix(FIX).values()
    return fn


def test_bug_is_in_the_release():
    """traverse_tree's packed read and rollback; OutlinesGrammar's bool mask and no rollback (source); the base
    class's rollback raises."""
    from sglang.srt.constrained import base_grammar_backend
    from sglang.srt.speculative import spec_utils

    walk = inspect.getsource(spec_utils)
    assert re.search(r"\[(\w+) // 32\] & \(1 << \(\1 % 32\)\)", inspect.getsource(spec_utils.traverse_tree))
    assert ".rollback(" in walk
    path = os.path.join(os.path.dirname(base_grammar_backend.__file__), "outlines_backend.py")
    tree = ast.parse(open(path).read())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "OutlinesGrammar"]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert "rollback" not in methods
    assert "torch.bool" in ast.unparse(methods["allocate_vocab_mask"])
    with pytest.raises(NotImplementedError):
        base_grammar_backend.BaseGrammarObject().rollback(1)


@pytest.fixture
def fake_outlines(monkeypatch):
    built = []

    class OutlinesGrammarBackend:
        def __init__(self, tokenizer, **kwargs):
            built.append(kwargs)

    mod = types.ModuleType("sglang.srt.constrained.outlines_backend")
    mod.OutlinesGrammarBackend = OutlinesGrammarBackend
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    import sglang.srt.constrained as pkg

    monkeypatch.setattr(pkg, "outlines_backend", mod, raising=False)
    return built


def build(monkeypatch, fn, **flags):
    from sglang_specv2_fixes.testing import scenarios

    flags = dict(grammar_backend="outlines", reasoning_parser=None, **flags)
    with scenarios.published_server_args(monkeypatch, **flags):
        return fn(scenarios.Unset(**flags), None, 32)  # the flags it reads, every other one unset


SPEC = pytest.mark.parametrize("algorithm", ["EAGLE3", "NGRAM"])


@SPEC
def test_stock_builds_outlines_with_speculative_decoding(monkeypatch, fake_outlines, algorithm):
    assert build(monkeypatch, _stock(), speculative_algorithm=algorithm) is not None and len(fake_outlines) == 1


@FIXED_HERE
@SPEC
def test_plugin_refuses_outlines_with_speculative_decoding(monkeypatch, fake_outlines, algorithm):
    with pytest.raises(ValueError) as e:
        build(monkeypatch, _plugin(), speculative_algorithm=algorithm)
    msg = str(e.value)
    assert f"--grammar-backend outlines does not work with --speculative-algorithm {algorithm}" in msg
    assert "--grammar-backend xgrammar" in msg and "llguidance" in msg and "#24413" in msg
    assert fake_outlines == []  # refused before the backend is built


@FIXED_HERE
def test_plugin_keeps_outlines_without_speculative_decoding(monkeypatch, fake_outlines):
    assert build(monkeypatch, _plugin(), speculative_algorithm=None) is not None and len(fake_outlines) == 1


@FIXED_HERE
def test_plugin_patches_create_grammar_backend_only():
    assert [t.rsplit(".", 1)[-1] for t in core.build_fix(FIX)] == ["create_grammar_backend"]
