"""live-accept-metrics on the real ``process_batch_result_decode`` (stock vs plugin body) of the release:
a late overlap result carrying one live, one finished and one retracted request. SGLang's own resolve
step and ``update_spec_metrics`` run; only the scheduler plumbing not under test is stubbed."""

import pytest
from conftest import LINE, requires_sglang

from sglang_specv2_fixes import releases
from sglang_specv2_fixes.fixes import live_accept_metrics
from sglang_specv2_fixes.testing.scenarios import decode_case, decode_counters, mixin_layout, spec_counter

# every release: the decode step is the mixin's (0.5.11 / 0.5.12.x) or SchedulerBatchResultProcessor's (0.5.13+)
pytestmark = [requires_sglang, pytest.mark.release_scoped]


def run(use_plugin_body, only_stale=False, log_interval=40):
    fn, sched, batch, result, live = decode_case(use_plugin_body, only_stale, log_interval)
    fn(sched, batch, result)
    c = decode_counters(sched)
    if live is None:
        return dict(accepted=c["accepted"], forward=c["forward"], reported=c["reported"])
    return dict(accepted=c["accepted"], forward=c["forward"], generated=c["generated"],
                live_verify=live.spec_verify_ct, live_drafts=spec_counter(live), live_out=len(live.output_ids))


def test_stock_counts_the_stale_requests():
    s = run(False)
    # 3 requests with accept length 3 each: stock counts all of them although only the live one emitted tokens
    assert (s["forward"], s["accepted"]) == (3, 9)
    assert s["live_out"] == 3 and s["live_verify"] == 1


def test_plugin_counts_live_requests_only():
    s = run(True)
    assert (s["forward"], s["accepted"]) == (1, 3)
    # the scheduler-wide counters now equal what the per-request meta_info reports for the same requests
    assert s["forward"] == s["live_verify"] and s["accepted"] == s["live_drafts"] + s["live_verify"]
    assert s["live_out"] == 3


def test_patch_differs_from_upstream_only_in_the_counters():
    """The lines the patch file removes from the release's function, and the lines the compiled function
    no longer has compared with the installed one, are exactly the two stale-counting statements."""
    import difflib
    import importlib
    import inspect
    import textwrap

    from sglang_specv2_fixes import core, patchfile
    from sglang_specv2_fixes.fingerprint import function_source

    pf = patchfile.load(live_accept_metrics.FIX.name, releases.entry(live_accept_metrics.FIX.name, LINE).name)
    (target,) = pf.targets
    assert target.dotted == releases.LINES[LINE].probe_decode  # the release's decode step
    cls = getattr(importlib.import_module(target.module), target.qualname.split(".")[0])
    theirs = textwrap.dedent(inspect.getsource(cls.process_batch_result_decode)).splitlines()
    if mixin_layout():
        expected = [
            "self.num_generated_tokens += len(batch.reqs)",
            "self.update_spec_metrics(batch.batch_size(), result.%s)" % (
                "num_accepted_drafts" if LINE == "0.5.11" else "num_correct_drafts"),
        ]
    else:  # only lines of the statements from the generated-token counter through the update_spec_metrics call
        start = next(i for i, ln in enumerate(theirs) if "self.metrics_reporter.num_generated_tokens +=" in ln)
        end = next(i for i in range(start, len(theirs)) if theirs[i].strip() == ")")
        window = [ln.strip() for ln in theirs[start:end + 1]]
        assert any("update_spec_metrics(" in ln for ln in window)
        expected = [ln[1:].strip() for _, hunks in pf.files for h in hunks for ln in h.lines if ln.startswith("-")]
        assert expected[0] == window[0] and set(expected) <= set(window), (expected, window)
    removed = [ln[1:].strip() for _, hunks in pf.files for h in hunks for ln in h.lines if ln.startswith("-")]
    assert removed and removed == expected

    (fn,) = core.build_fix(live_accept_metrics.FIX.name).values()
    ours = function_source("".join(linecache_lines(fn)), target.qualname)[0]
    ours = textwrap.dedent(ours).splitlines()
    removed = [l for l in difflib.ndiff(theirs, ours) if l.startswith("- ")]
    assert [l[2:].strip() for l in removed] == expected


def linecache_lines(fn):
    import linecache

    return linecache.getlines(fn.__code__.co_filename)


def test_all_stale_result_skips_the_periodic_report_with_nothing_to_average():
    """Seen on the GPU (0.5.11, --decode-log-interval 1, 2026-11-22): a late result whose requests were all
    stale left its log interval with no live verify step, and upstream's periodic log (called from
    report_decode_stats) divides by that count. The body skips that one report; stock counts the stale
    requests, so it always has something to divide by."""
    assert run(True, only_stale=True, log_interval=1) == dict(accepted=0, forward=0, reported=False)
    assert run(False, only_stale=True, log_interval=1) == dict(accepted=6, forward=2, reported=True)
    # not a log step: the every-iteration part of the report still runs
    assert run(True, only_stale=True, log_interval=40)["reported"] is True
