"""#28986 (open upstream) on the release's real ``Scheduler.event_loop_overlap``: spec v2 + grammar + overlap launches a
verify that holds a request the forced sync has just finished; the plugin's ``grammar-result-order`` loop does not.

The scenario (``testing.overlap_loop``): B0 (R's previous speculative decode step) is launched and its result, which
ends R on a stop token, is pending when the loop builds B1 (R's next speculative decode step, ``has_grammar``). The
loop body, ``is_disable_overlap_for_batch`` and the ``pop_and_process`` order are the release's (or the plugin's
patched loop, compiled from the release's source and the patch file); the pending result is processed by the
release's decode step; run_batch is a stub wrapped by the probe's ``_around_run_batch``.

Expected per release (read from each release's source): up to 0.5.16 ``need_grammar_sync`` holds for every
speculative grammar decode batch with a pending result, so the stock loop builds B1 with R live, processes B0's result
(R finishes) and launches B1 with R finished (the probe counts it; check mode raises). From 0.5.17 EAGLE advances the
grammar inside verify (``supports_grammar_overlap``): no sync, B1 is launched before B0's result is processed, R
finishes after the launch. NGRAM has no grammar overlap: on every spec-v2-only line (0.5.14+) it takes the sync path.
With the plugin, wherever the sync path exists, B0's result is processed before B1 is built: R is finished when B1 is
built, B1 is not launched, and nothing is counted; where no sync happens the plugin's loop runs exactly as stock.
"""

import pytest
from conftest import LINE, VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import probe, releases
from sglang_specv2_fixes.fixes import grammar_result_order

pytestmark = [requires_sglang, pytest.mark.release_scoped]

EAGLE_SYNCS = VERSION in releases.release_set("up-to:0.5.16")  # need_grammar_sync without supports_grammar_overlap
NGRAM_V2 = bool(releases.LINES.get(LINE)) and releases.LINES[LINE].spec_v2_only  # NGRAM overlaps from 0.5.14
FIXED_HERE = where_patched(grammar_result_order.FIX.name, "the plugin's event_loop_overlap")


@pytest.fixture
def observed(monkeypatch):
    """The probe as ``probe.register`` sets it up for the release's code line; counters reset."""
    monkeypatch.setattr(probe, "_spec_v2_only", releases.LINES[LINE].spec_v2_only)
    monkeypatch.setattr(probe, "_strict", False)
    probe.reset()
    yield probe
    probe.reset()


def plugin_loop():
    from sglang_specv2_fixes.testing.scenarios import body

    return body(grammar_result_order, grammar_result_order.FIX.name, target="Scheduler.event_loop_overlap")


def run(algorithm, strict=False, plugin=False, prefill=False):
    from sglang_specv2_fixes.testing import overlap_loop

    sched, trace, r = overlap_loop.grammar_sync_case(algorithm, around_run_batch=probe._around_run_batch,
                                                     prefill=prefill)
    probe._strict = strict
    try:
        overlap_loop.run_loop(sched, plugin_loop() if plugin else None)
    finally:
        probe._strict = False
    return trace, r, probe.snapshot()


B0 = [("schedule", "B0", {"live": False}), ("launch", "B0", {"live": False})]
SYNC_ORDER = B0 + [("schedule", "B1", {"live": False}), ("process", "B0"),
              ("finish-handler", "live"), ("launch", "B1", {"live": True})]
OVERLAP_ORDER = B0 + [("schedule", "B1", {"live": False}),
                 ("launch", "B1", {"live": False}), ("process", "B0"), ("finish-handler", "live")]
# the plugin: B0's result first; R is finished when B1 is built, so the scheduler has no batch to launch
RESULT_FIRST_ORDER = B0 + [("process", "B0"), ("finish-handler", "live"),
                      ("schedule", "B1", {"live": True})]


def check_sync_path(trace, r, s):
    # run_batch did launch B1, after B0's result was processed, with R finished and handed to its KV release
    assert trace == SYNC_ORDER, trace
    assert type(r.finished_reason).__name__ == "FINISH_MATCHED_TOKEN"
    assert (s["launch_checks"], s["finished_in_launch"]) == (2, 1), s
    assert s["examples"] == ["launch rid=live: finished (FINISH_MATCHED_TOKEN) in a decode batch of 1 at run_batch"]


def check_result_first(trace, r, s):
    assert trace == RESULT_FIRST_ORDER, trace
    assert type(r.finished_reason).__name__ == "FINISH_MATCHED_TOKEN"
    # the probe saw B0's launch (so it was watching) and no finished request at any launch
    assert (s["launch_checks"], s["finished_in_launch"], s["examples"]) == (1, 0, []), s


def check_overlap(trace, r, s):
    # no sync: B1 launched while R was live; the same result finishes R right after the launch
    assert trace == OVERLAP_ORDER, trace
    assert r.finished()
    assert (s["launch_checks"], s["finished_in_launch"], s["examples"]) == (2, 0, []), s


@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_eagle_grammar_decode_with_pending_finishing_result(observed, algorithm):
    trace, r, s = run(algorithm)
    if EAGLE_SYNCS:
        check_sync_path(trace, r, s)
    else:
        check_overlap(trace, r, s)


@FIXED_HERE
@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_plugin_processes_the_result_before_building_the_batch(observed, algorithm):
    trace, r, s = run(algorithm, plugin=True)
    if EAGLE_SYNCS:
        check_result_first(trace, r, s)
    else:  # the release's rule: EAGLE does not sync here, and the plugin's loop runs as stock
        check_overlap(trace, r, s)


@pytest.mark.parametrize("plugin", [False, pytest.param(True, marks=FIXED_HERE)], ids=["stock", "plugin"])
def test_a_prefill_result_that_finishes_a_grammar_request(observed, plugin):
    """B0 is R's prefill, and its result ends R: a retracted grammar request re-prefilled up to its grammar's end (seen
    on a GPU, tests/registered/test_hybrid_mamba_serves.py on 2026-11-26: check mode stopped the plugin side's
    scheduler there before this case was covered). Up to 0.5.16 the speculative grammar decode B1 that R joins syncs
    on that result after B1 is built, so stock launches B1 with R finished; the plugin processes a speculative grammar
    prefill's result before building the next batch too. Later releases do not sync EAGLE there: whatever order the
    release's own loop takes (0.5.17 processes this result first, 0.5.18+ overlap it with B1), nothing finished is
    launched, and the plugin's loop takes the same order."""
    trace, r, s = run("EAGLE3", plugin=plugin, prefill=True)
    assert type(r.finished_reason).__name__ == "FINISH_MATCHED_TOKEN"
    if not EAGLE_SYNCS:
        assert (s["finished_in_launch"], s["examples"]) == (0, []), (trace, s)
        assert trace in (OVERLAP_ORDER, RESULT_FIRST_ORDER), trace
        if plugin:
            probe.reset()
            assert trace == run("EAGLE3", prefill=True)[0]  # the stock loop's order
    elif plugin:
        assert trace == RESULT_FIRST_ORDER and (s["finished_in_launch"], s["examples"]) == (0, []), (trace, s)
    else:
        assert trace == SYNC_ORDER and s["finished_in_launch"] == 1, (trace, s)
        assert s["examples"] == ["launch rid=live: finished (FINISH_MATCHED_TOKEN) in a decode batch of 1 at run_batch"]


@pytest.mark.skipif(not EAGLE_SYNCS, reason=f"sglang {VERSION}: EAGLE + grammar does not take the sync path")
def test_check_mode_stops_the_loop_at_the_launch(observed):
    """Check mode (SGLANG_SPECV2_FIXES_CHECK=1) raises inside run_batch, before the verify is launched."""
    from sglang_specv2_fixes.testing import overlap_loop

    sched, trace, _ = overlap_loop.grammar_sync_case("EAGLE3", around_run_batch=probe._around_run_batch)
    probe._strict = True
    try:
        with pytest.raises(probe.InvariantViolation, match="launch rid=live: finished"):
            overlap_loop.run_loop(sched)
    finally:
        probe._strict = False
    assert trace == SYNC_ORDER[:-1]  # B1 never reached the stub launch


@FIXED_HERE
@pytest.mark.skipif(not EAGLE_SYNCS, reason=f"sglang {VERSION}: EAGLE + grammar does not take the sync path")
def test_plugin_loop_is_silent_in_check_mode(observed):
    check_result_first(*run("EAGLE3", strict=True, plugin=True))


@pytest.mark.skipif(not NGRAM_V2, reason=f"sglang {VERSION}: NGRAM is not a spec-v2 (overlap) algorithm before 0.5.14")
def test_ngram_grammar_decode_takes_the_sync_path(observed):
    check_sync_path(*run("NGRAM"))


@FIXED_HERE
@pytest.mark.skipif(not NGRAM_V2, reason=f"sglang {VERSION}: NGRAM is not a spec-v2 (overlap) algorithm before 0.5.14")
def test_plugin_ngram_grammar_decode(observed):
    check_result_first(*run("NGRAM", plugin=True))


@pytest.mark.parametrize("plugin", [False, pytest.param(True, marks=FIXED_HERE)], ids=["stock", "plugin"])
def test_without_grammar_no_sync(observed, monkeypatch, plugin):
    """Control: the same sequence without ``has_grammar`` (B0, B1) overlaps on every release, with the plugin too
    (the sync, and so the plugin's reordering, is grammar's)."""
    from sglang_specv2_fixes.testing import overlap_loop

    real = overlap_loop._batch
    monkeypatch.setattr(overlap_loop, "_batch", lambda reqs, algo, has_grammar, **kw: real(reqs, algo, False, **kw))
    trace, r, s = run("EAGLE3", plugin=plugin)
    check_overlap(trace, r, s)
