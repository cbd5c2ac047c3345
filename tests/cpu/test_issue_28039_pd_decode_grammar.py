"""#28039 / #28986 on the release's real PD-disaggregation decode loop (``event_loop_overlap_disagg_decode``): up to
0.5.13 it never syncs for grammar, so a spec-v2 verify is launched with a grammar that has not accepted the pending
result's tokens; from 0.5.14 it syncs like ``event_loop_overlap`` and so launches a request the sync has just finished
(#28986). The plugin's ``grammar-result-order`` patches both.

The scenario is ``testing.overlap_loop`` with ``pd=True``: B0 (R's previous speculative decode step) is launched, and
its result is pending when the loop builds B1 (R's next speculative decode step, ``has_grammar``). The loop body,
``is_disable_overlap_for_batch``, ``ScheduleBatch.copy`` and ``launch_batch_sample_if_needed`` are the release's (or
the plugin's patched loop, compiled from the release's source and the patch file); the pending result is processed by
the release's decode step; the batch getter, run_batch and the KV-transfer queues are stubs (overlap_loop's docstring).
A verify whose vocab mask reads the grammar is the launch of B1: "B1 launched before B0's result was processed" is a
verify built from a grammar one step behind.

Expected per release (read from each release's ``disaggregation/decode.py`` and ``is_disable_overlap_for_batch``):

* 0.5.11 … 0.5.13: no sync in the PD loop. Stock launches B1 before B0's result is processed (un-synced grammar), for
  EAGLE and EAGLE3 alike; when that result finishes R, R is finished right after the launch.
* 0.5.14 … 0.5.16 (EAGLE/EAGLE3) and 0.5.14+ (NGRAM): the loop syncs; stock processes B0's result (R finishes) and
  then launches B1 with R in it (the probe counts it).
* 0.5.17+ EAGLE/EAGLE3: the grammar advances inside verify (``supports_grammar_overlap``); no sync, stock and plugin
  alike launch B1 first.

With the plugin, wherever the sync is (or, up to 0.5.13, should have been) taken, B0's result is processed before B1
is built: a finished R is filtered out (B1 not launched), a live R is launched with its grammar advanced.
"""

import pytest
from conftest import LINE, VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import probe, releases
from sglang_specv2_fixes.fixes import grammar_result_order

pytestmark = [requires_sglang, pytest.mark.release_scoped]

NO_PD_SYNC = VERSION in releases.release_set("up-to:0.5.13.post1")  # #28039: fixed upstream in 0.5.14
EAGLE_SYNCS = VERSION in releases.release_set("up-to:0.5.16")  # need_grammar_sync without supports_grammar_overlap
NGRAM_V2 = bool(releases.LINES.get(LINE)) and releases.LINES[LINE].spec_v2_only  # NGRAM overlaps from 0.5.14
FIXED_HERE = where_patched(grammar_result_order.FIX.name, "the plugin's event_loop_overlap_disagg_decode")
TARGET = "SchedulerDisaggregationDecodeMixin.event_loop_overlap_disagg_decode"


@pytest.fixture
def observed(monkeypatch):
    """The probe as ``probe.register`` sets it up for the release's code line; counters reset."""
    monkeypatch.setattr(probe, "_spec_v2_only", releases.LINES[LINE].spec_v2_only)
    monkeypatch.setattr(probe, "_strict", False)
    probe.reset()
    yield probe
    probe.reset()


def run(algorithm, plugin=False, finishes=True):
    from sglang_specv2_fixes.testing import overlap_loop
    from sglang_specv2_fixes.testing.scenarios import body

    sched, trace, r = overlap_loop.grammar_sync_case(algorithm, probe._around_run_batch, pd=True, finishes=finishes)
    loop = body(grammar_result_order, grammar_result_order.FIX.name, target=TARGET) if plugin else None
    overlap_loop.run_loop(sched, loop, pd=True)
    return trace, r, probe.snapshot()


B0 = [("schedule", "B0", {"live": False}), ("launch", "B0", {"live": False})]
# finishes=True: B0's result ends R on a stop token
UNSYNCED = B0 + [("schedule", "B1", {"live": False}),
                 ("launch", "B1", {"live": False}), ("process", "B0"), ("finish-handler", "live")]
SYNC_ORDER = B0 + [("schedule", "B1", {"live": False}), ("process", "B0"),
                   ("finish-handler", "live"), ("launch", "B1", {"live": True})]
RESULT_FIRST = B0 + [("process", "B0"), ("finish-handler", "live"), ("schedule", "B1", {"live": True})]
# finishes=False: R stays live
UNSYNCED_LIVE = B0 + [("schedule", "B1", {"live": False}), ("launch", "B1", {"live": False}), ("process", "B0")]
SYNC_LIVE = B0 + [("schedule", "B1", {"live": False}), ("process", "B0"), ("launch", "B1", {"live": False})]
# the plugin: B0's result, then B1 built and launched; the next iteration processes B1's result first (B1 syncs too)
RESULT_FIRST_LIVE = B0 + [("process", "B0"), ("schedule", "B1", {"live": False}),
                          ("launch", "B1", {"live": False}), ("process", "B1")]


def stock_syncs(algorithm):
    return not NO_PD_SYNC and (EAGLE_SYNCS or algorithm == "NGRAM")


def check(trace, r, s, want):
    assert trace == want, trace
    finished = want in (UNSYNCED, SYNC_ORDER, RESULT_FIRST)
    assert r.finished() == finished, r.finished_reason
    if finished:
        assert type(r.finished_reason).__name__ == "FINISH_MATCHED_TOKEN"
    in_launch = int(want is SYNC_ORDER)
    assert (s["finished_in_launch"], s["launch_checks"]) == (in_launch, sum(e[0] == "launch" for e in want)), s


@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_stock_eagle(observed, algorithm):
    want = UNSYNCED if NO_PD_SYNC else SYNC_ORDER if stock_syncs(algorithm) else UNSYNCED
    check(*run(algorithm), want)


@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_stock_eagle_live_request(observed, algorithm):
    """Up to 0.5.13 the verify after a grammar step is launched before the grammar accepted that step (#28039)."""
    want = SYNC_LIVE if stock_syncs(algorithm) else UNSYNCED_LIVE
    check(*run(algorithm, finishes=False), want)


@FIXED_HERE
@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_plugin_eagle(observed, algorithm):
    # up to 0.5.16 EAGLE's grammar step syncs (0.5.11 … 0.5.13: the sync the plugin adds); from 0.5.17 the plugin's
    # loop runs as stock
    want = RESULT_FIRST if EAGLE_SYNCS else UNSYNCED
    check(*run(algorithm, plugin=True), want)


@FIXED_HERE
@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_plugin_eagle_live_request(observed, algorithm):
    want = RESULT_FIRST_LIVE if EAGLE_SYNCS else UNSYNCED_LIVE
    check(*run(algorithm, plugin=True, finishes=False), want)


@pytest.mark.skipif(not NGRAM_V2, reason=f"sglang {VERSION}: NGRAM is not a spec-v2 (overlap) algorithm before 0.5.14")
@pytest.mark.parametrize("plugin", [False, pytest.param(True, marks=FIXED_HERE)], ids=["stock", "plugin"])
def test_ngram(observed, plugin):
    check(*run("NGRAM", plugin=plugin), RESULT_FIRST if plugin else SYNC_ORDER)


@pytest.mark.parametrize("plugin", [False, pytest.param(True, marks=FIXED_HERE)], ids=["stock", "plugin"])
def test_without_grammar_no_sync(observed, monkeypatch, plugin):
    """Control: without ``has_grammar`` the PD loop overlaps on every release, with the plugin too."""
    from sglang_specv2_fixes.testing import overlap_loop

    real = overlap_loop._batch
    monkeypatch.setattr(overlap_loop, "_batch", lambda reqs, algo, has_grammar, **kw: real(reqs, algo, False, **kw))
    check(*run("EAGLE3", plugin=plugin), UNSYNCED)
