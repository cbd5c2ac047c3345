"""Every registered row's servers, as its setUpClass starts them: the launches (model, URL, every flag, the
environment) and the target-only references each test case asks for, and its test methods, with the server start
stubbed (no GPU), compared with tests/cpu/registered_launches.json. The rows share their launch code (sglang_specv2_fixes.testing.rows /
sessions / server) and several cases share a file, so a change to a shared helper or a merge of row files must leave
each case's servers as they were. A row whose flags change on purpose rewrites the file:

    PYTHONPATH=.venv-cpu/releases/0.5.11 .venv-cpu/bin/python tests/cpu/test_registered_launches.py --write

Rows not in the file yet (a new row) are listed, not compared; every case in the file must still exist. Some rows
choose flags by release, so the comparison runs on the release the file was written on."""

import glob
import hashlib
import importlib
import json
import os
import re
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from conftest import ROOT, VERSION, own_setup_class, requires_sglang  # noqa: E402

from sglang_specv2_fixes.testing.config import MODELS_DIR  # noqa: E402

REG_DIR = os.path.join(ROOT, "tests", "registered")
SNAPSHOT = os.path.join(HERE, "registered_launches.json")
pytestmark = requires_sglang


def _norm(value, port):
    """A port of the row's own range as PORT+k (the runner gives each run its own base), a temporary folder without
    its random part."""
    if isinstance(value, str):
        if value.startswith("http://127.0.0.1:"):
            return "http://127.0.0.1:PORT+%d" % (int(value.rsplit(":", 1)[1]) - port)
        if value.isdigit() and port <= int(value) < port + 1100:
            return "PORT+%d" % (int(value) - port)
        if value.startswith(MODELS_DIR + os.sep):  # SPECV2_MODELS
            return "MODELS" + value[len(MODELS_DIR):]
        if value.startswith(tempfile.gettempdir() + os.sep):  # a row's mkdtemp(prefix=...): its random suffix
            return re.sub(r"[A-Za-z0-9_]{8}$", "XXXXXXXX", value)
    if isinstance(value, (list, tuple)):
        return [_norm(v, port) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v, port) for k, v in sorted(value.items())}
    return value


def _stable(value):
    """``value`` with functions named (their repr holds an address)."""
    if callable(value):
        return f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, (list, tuple)):
        return type(value)(_stable(v) for v in value)
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items()}
    return value


def capture(patch):
    """{Class: {"file": FILE, "calls": [...]}} of every registered row case; ``patch(obj, name, value)`` stubs."""
    import unittest

    from sglang_specv2_fixes.testing import dsv3_rows, reference, rows, server, sessions

    port = server.PORT
    calls = []

    def fake_popen(model, url, timeout=None, other_args=(), env=None, **kw):
        calls.append(["launch", model, url, list(other_args), dict(env or {})])
        return None

    def recorder(kind, result=None):
        def f(*a, **k):
            # the prompts and token counts asked for, as a digest (the prompts are long)
            asked = repr(_norm(_stable([a, sorted(k.items())]), port))
            calls.append([kind, hashlib.sha256(asked.encode()).hexdigest()[:16]])
            return result() if callable(result) else result
        return f

    fakes = {
        "models": lambda: {k: f"/m/{k}" for k in ("target", "eagle", "eagle3")},
        "popen_launch_server": fake_popen,
        "prefetch_reference": recorder("prefetch_reference"),
        "reference_outputs": recorder("reference_outputs", list),
        "prefetch_responses": recorder("prefetch_responses"),
        "reference_responses": recorder("reference_responses", list),
    }

    def stub(*mods):
        for mod in mods:
            for attr, fake in fakes.items():
                if hasattr(mod, attr):
                    patch(mod, attr, fake)

    stub(server, reference, rows, sessions, dsv3_rows)
    for name in ("moe", "swa"):
        patch(importlib.import_module(f"sglang_specv2_fixes.testing.tiny_models.{name}"), "build",
              lambda d, name=name: f"/m/{name}")
    out = {}
    paths = sorted(glob.glob(os.path.join(REG_DIR, "test_*.py")))
    # every row module stubbed before any setUpClass runs: a row may build on another row's module
    mods = {path: importlib.import_module(os.path.basename(path)[:-3]) for path in paths}
    stub(*mods.values())
    for path in paths:
        mod = mods[path]
        suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
        for case in sorted({type(t) for sub in suite for t in sub}, key=lambda c: c.__name__):
            calls.clear()
            own_setup_class(case)(case)
            assert case.__name__ not in out, f"two rows named {case.__name__}"
            out[case.__name__] = {"file": os.path.basename(path), "calls": _norm(calls, port),
                                  "tests": unittest.defaultTestLoader.getTestCaseNames(case)}
    return out


@pytest.fixture
def rows_on_path(monkeypatch):
    monkeypatch.syspath_prepend(REG_DIR)


def test_every_row_launches_as_recorded(rows_on_path, monkeypatch):
    recorded = json.load(open(SNAPSHOT))
    if VERSION != recorded["release"]:  # some rows choose flags by release: one release is the reference
        pytest.skip(f"recorded on sglang {recorded['release']}")
    got, want = capture(monkeypatch.setattr), recorded["rows"]
    assert len(want) >= 40 and all(w["calls"] for w in want.values())  # every recorded case launches something
    missing = sorted(set(want) - set(got))
    assert missing == [], f"recorded rows that no file defines any more: {missing}"
    new = sorted(set(got) - set(want))
    if new:
        print("rows not recorded yet (run this file with --write):", new)
    for name in sorted(want):
        assert got[name]["calls"] == want[name]["calls"], (name, got[name]["file"])
        assert got[name]["tests"] == want[name]["tests"], (name, got[name]["file"])


@pytest.mark.parametrize("short", [None, 5])
def test_length_rounds_fail_on_a_request_cut_short(monkeypatch, short):
    """SpecChecks.check_length_rounds (the dummy-weight rows' load check) on a stand-in server: passes when every
    request returns its tokens by length, fails when one comes back short."""
    import unittest

    from sglang_specv2_fixes.testing import rows

    asked = []

    def fake_post(body):
        want = body["sampling_params"]["max_new_tokens"]
        asked.append(want)
        got = want - 1 if short is not None and len(asked) == short else want
        return {"meta_info": {"finish_reason": {"type": "length"}, "completion_tokens": got}}

    monkeypatch.setattr(rows, "post", fake_post)
    monkeypatch.setattr(rows, "server_info", lambda: {"internal_states": [{"avg_spec_accept_length": 2.5}]})
    case = type("Case", (rows.SpecChecks, unittest.TestCase), {"runTest": lambda self: None})()
    check = lambda: case.check_length_rounds("stand-in", 4, 2, 60, lambda i: 3 + i, 2)  # noqa: E731
    if short is None:
        check()
    else:
        with pytest.raises(AssertionError):
            check()
    assert sorted(asked) == [3, 3, 4, 4, 5, 5, 6, 6]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    sys.path.insert(0, REG_DIR)
    json.dump({"release": VERSION, "rows": capture(setattr)}, open(SNAPSHOT, "w"), indent=1, sort_keys=True)
    open(SNAPSHOT, "a").write("\n")
    print(f"wrote {SNAPSHOT}")
