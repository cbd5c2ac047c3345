"""The registered tests' target-only reference (sglang_specv2_fixes/testing/reference.py): ``prefetch_reference``
starts the target-only launch in the background so it overlaps the launch of the server under test, and every row
that compares against target-only output starts it *before* its own launch. Servers are stand-ins here (no GPU);
the SGLang release under test is imported for real by ``sglang_specv2_fixes.testing.server``."""

import glob
import importlib
import os
import threading

import pytest

from conftest import ROOT, own_setup_class, requires_sglang

REG_DIR = os.path.join(ROOT, "tests", "registered")
pytestmark = requires_sglang


@pytest.fixture
def ref_mod(tmp_path, monkeypatch):
    from sglang_specv2_fixes.testing import reference

    monkeypatch.setattr(reference, "MODELS_DIR", str(tmp_path))
    monkeypatch.setattr(reference, "_REF_PENDING", {})
    return reference


def test_prefetch_overlaps_and_launches_once(ref_mod, monkeypatch):
    s = ref_mod
    launches, threads = [], []
    started = threading.Event()  # the server start cannot end before the test lets it: no wall-clock bound needed

    def fake_launch(model, url, timeout, other_args):
        threads.append(threading.current_thread().name)
        launches.append((model, url, list(other_args)))
        assert started.wait(30), "the test never let the server start end"
        return object()

    monkeypatch.setattr(s, "popen_launch_server", fake_launch)
    monkeypatch.setattr(s, "stop", lambda proc: None)
    monkeypatch.setattr(s, "send", lambda body, url=None: {"output_ids": [
        len(body["input_ids"]), body["sampling_params"]["max_new_tokens"], url == s.REF_URL]})
    ps = [[1, 2, 3], [4, 5]]
    fut = s.prefetch_reference(ps, 7, target="T")
    assert not fut.done(), "prefetch must return before the target-only server is up"
    assert s.prefetch_reference(ps, 7, target="T") is fut  # the same work is not queued twice
    started.set()
    assert s.reference_outputs(ps, 7, target="T") == [[3, 7, True], [2, 7, True]]
    assert len(launches) == 1 and threads[0].startswith("specv2-reference")
    assert launches[0][:2] == ("T", s.REF_URL) and launches[0][2][-2:] == ["--specv2-fixes", "off"]
    # a new process (nothing pending) reads the on-disk cache: no launch
    monkeypatch.setattr(s, "_REF_PENDING", {})
    assert s.reference_outputs(ps, 7, target="T") == [[3, 7, True], [2, 7, True]]
    assert len(launches) == 1
    # other arguments are another reference
    s.reference_outputs(ps, 8, target="T")
    assert len(launches) == 2
    # other shared flags too (a row with the piecewise prefill graph on): launched with them instead of COMMON
    from sglang_specv2_fixes.testing.config import common_with_piecewise_graph

    with_graph = common_with_piecewise_graph()
    assert "--disable-piecewise-cuda-graph" in launches[0][2] and "--disable-piecewise-cuda-graph" not in with_graph
    s.reference_outputs(ps, 7, target="T", common=with_graph)
    assert len(launches) == 3 and launches[2][2][: len(with_graph)] == with_graph


def test_rows_start_their_reference_before_their_server(ref_mod, monkeypatch):
    """setUpClass of every registered row with the launches stubbed: a row that compares against target-only
    output must have prefetched that reference when its own server launch begins."""
    import unittest

    from sglang_specv2_fixes.testing import dsv3_rows, rows, server, sessions
    from sglang_specv2_fixes.testing.registry import registration

    monkeypatch.syspath_prepend(REG_DIR)
    events = []

    def fake_server(*a, **k):
        events.append("launch")
        return None

    fakes = {
        "models": lambda: {k: f"/m/{k}" for k in ("target", "eagle", "eagle3")},
        "prefetch_reference": lambda *a, **k: events.append("prefetch"),
        "reference_outputs": lambda *a, **k: events.append("reference") or [],
        "prefetch_responses": lambda *a, **k: events.append("prefetch"),
        "reference_responses": lambda *a, **k: events.append("reference") or [],
        "launch": fake_server,
        "popen_launch_server": fake_server,
    }

    def stub(*mods):  # every module that holds one of these names calls the stand-in
        for mod in mods:
            for attr, fake in fakes.items():
                if hasattr(mod, attr):
                    monkeypatch.setattr(mod, attr, fake)

    stub(server, ref_mod, rows, sessions, dsv3_rows)
    for name in ("moe", "swa"):
        monkeypatch.setattr(importlib.import_module(f"sglang_specv2_fixes.testing.tiny_models.{name}"), "build",
                            lambda d: "/m/other")
    checked = []
    paths = sorted(glob.glob(os.path.join(REG_DIR, "test_*.py")))
    # every row module stubbed before any setUpClass runs: a row may build on another row's module (its base class
    # calls that module's names, e.g. test_tp2_live_accept_metrics.py on test_live_accept_metrics.py)
    mods = {path: importlib.import_module(os.path.basename(path)[:-3]) for path in paths}
    stub(*mods.values())
    for path in paths:
        # every row, whichever releases it is registered for: the order of its launches is the harness's, not the
        # release's (a row's own release list is checked by test_registered_files)
        assert registration(path)["releases"], path
        mod = mods[path]
        suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
        for case in {type(t) for sub in suite for t in sub}:
            events.clear()
            own_setup_class(case)(case)  # the row's own setUpClass (CustomTestCase wraps it with retries / teardown)
            assert "launch" in events, (path, case, events)
            text = open(path).read()
            needs_ref = issubclass(case, rows.SpecChecks) or "reference_outputs" in text or "reference_responses" in text
            if needs_ref:
                assert "prefetch" in events and events.index("prefetch") < events.index("launch"), (path, case, events)
                checked.append(case.__name__)
    assert len(checked) >= 8, checked
