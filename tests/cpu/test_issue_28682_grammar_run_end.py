"""#28682 on the release's real result path (0.5.11 … 0.5.13): a spec-v2 decode result whose accepted run goes past the
token that terminates the request's grammar. Stock commits the whole run to KV and appends it to ``output_ids``; with
the plugin's ``grammar-run-end`` ``Scheduler.process_batch_result`` the run ends at the terminating token.

The dispatcher is the release's ``Scheduler.process_batch_result`` (stock, or the plugin's, compiled from the
release's source and the patch file) called on a stand-in scheduler whose decode step is the release's real one
(``scenarios.decode_case``: the mixin's ``process_batch_result_decode`` on 0.5.11 / 0.5.12.x, the batch result
processor's on 0.5.13, each with its real spec-v2 resolve, ``check_finished`` and grammar accept); metrics and
health-check plumbing after the dispatch do nothing. The request's grammar is a stand-in with the accept / rollback /
termination behaviour of SGLang's xgrammar wrapper (no xgrammar in these releases' CPU overlays): it terminates on
token ``TERMINAL`` and ignores tokens once terminated.

From 0.5.14 the release's own resolve cuts the run (``_accept_grammar_tokens``); the table's note checks that.
"""

import pytest
from conftest import MIXIN_ONLY, VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import releases
from sglang_specv2_fixes.fixes import grammar_run_end

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIXED_HERE = where_patched(grammar_run_end.FIX.name, "the plugin's Scheduler.process_batch_result")
BUGGY = VERSION in releases.release_set("up-to:0.5.13.post1")
TERMINAL = 1  # the live request's accepted run is [0, 1, 2] (scenarios.stale_batch_case): it ends one token early


class Grammar:
    """SGLang's grammar object as the decode path uses it: ``accept_token`` (ignored once terminated; raises
    ValueError on a rejected token), ``rollback``, ``is_terminated``, ``finished``."""

    def __init__(self, terminal=TERMINAL, rejected=()):
        self.terminal, self.rejected, self.accepted, self.finished = terminal, set(rejected), [], False

    def accept_token(self, token):
        if self.is_terminated():
            return
        if token in self.rejected:
            raise ValueError(f"Tokens not accepted: {token}")
        self.accepted.append(token)

    def rollback(self, k):
        assert 0 < k <= len(self.accepted)
        del self.accepted[-k:]

    def is_terminated(self):
        return self.terminal in self.accepted


def run(plugin, grammar, probe=False, eos=None):
    """The release's dispatch of a spec-v2 decode result whose live request has ``grammar``; ``probe``: the decode step
    runs inside the probe's observer (``probe._around``), ``eos``: the request's stop tokens (xgrammar's terminal token
    is one: it also finishes the request in ``check_finished``)."""
    import types

    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_specv2_fixes import core
    from sglang_specv2_fixes.testing import scenarios

    step, dsched, batch, result, live = scenarios.decode_case(False)
    batch.forward_mode = ForwardMode.DECODE
    live.grammar = grammar
    if eos is not None:
        live.eos_token_ids = set(eos)
    committed = live.kv_committed_len
    if not callable(getattr(dsched, "abort_request", None)):  # aborting a rejected request: plumbing here
        object.__setattr__(dsched, "abort_request", lambda *a, **k: None)  # 0.5.13: a frozen dataclass's field

    class Sched(scenarios._Inert):  # the dispatcher's scheduler: the release's decode step, nothing else
        enable_fpm = False
        metrics_reporter = scenarios._Inert()
        draft_worker = dsched.draft_worker if hasattr(dsched, "draft_worker") else None

        def process_batch_result_decode(self, b, r):
            if probe:
                from sglang_specv2_fixes import probe as observer

                observer._around(lambda s, b, r: step(s, b, r), dsched, b, r)
            else:
                step(dsched, b, r)

    sched = Sched()
    sched.batch_result_processor = types.SimpleNamespace(process_batch_result_decode=sched.process_batch_result_decode)
    if plugin:
        (fn,) = core.build_fix(grammar_run_end.FIX.name).values()
    else:
        fn = Scheduler.process_batch_result
    fn(sched, batch, result)
    live.output_ids = list(live.output_ids)  # an array('q') from 0.5.13
    return live, live.kv_committed_len - committed


@pytest.mark.skipif(not BUGGY, reason=f"sglang {VERSION}: the resolve step cuts the run (#28682)")
def test_stock_commits_and_appends_past_the_grammar_end():
    live, committed = run(False, Grammar())
    assert live.output_ids == [0, 1, 2]  # 2 comes after the grammar's terminating token 1
    assert committed == 2  # accept length 3, minus the bonus slot prepare_for_decode pre-claimed
    assert live.grammar.accepted == [0, 1] and live.grammar.is_terminated()


@FIXED_HERE
def test_plugin_cuts_the_run_at_the_grammar_end():
    live, committed = run(True, Grammar())
    assert live.output_ids == [0, 1]
    assert committed == 1
    assert live.grammar.accepted == [0, 1] and live.grammar.is_terminated()  # accepted once, by the decode step


@MIXIN_ONLY  # 0.5.13's finish path frees KV through the tree cache, a stand-in here
@pytest.mark.skipif(not BUGGY, reason=f"sglang {VERSION}: the resolve step cuts the run (#28682)")
@pytest.mark.parametrize("plugin", [False, True], ids=["stock", "plugin"])
def test_probe_counts_output_past_the_grammar_end(plugin, monkeypatch):
    """The probe's ``grammar_past_end`` (what the GPU row tests/registered/test_grammar_run_end.py reads): the terminal
    token is also a stop token, so the request finishes on it (``finished_len``) while stock's ``output_ids`` keep the
    token after it."""
    from sglang_specv2_fixes import probe
    from sglang_specv2_fixes.testing.scenarios import published_server_args

    probe.reset()
    with published_server_args(monkeypatch, speculative_algorithm="EAGLE3", page_size=1):  # the finish path reads them
        live, _ = run(plugin, Grammar(), probe=True, eos={TERMINAL})
    s = probe.snapshot()
    assert type(live.finished_reason).__name__ == "FINISH_MATCHED_TOKEN" and live.finished_len == 2
    assert s["grammar_finishes"] == 1, s
    assert s["grammar_past_end"] == (0 if plugin else 1), s
    assert len(live.output_ids) == (2 if plugin else 3)
    probe.reset()


@FIXED_HERE
def test_plugin_leaves_a_run_the_grammar_does_not_end():
    live, committed = run(True, Grammar(terminal=99))
    assert (live.output_ids, committed, live.grammar.accepted) == ([0, 1, 2], 2, [0, 1, 2])


@FIXED_HERE
def test_plugin_leaves_a_rejected_run_to_the_decode_step():
    """A token the grammar rejects: the run is not cut and the grammar is rolled back; the release's decode step then
    meets the token and aborts the request as stock does (abort_request is plumbing here)."""
    live, committed = run(True, Grammar(terminal=99, rejected={1}))
    assert (live.output_ids, committed, live.grammar.accepted) == ([0, 1, 2], 2, [0])


def test_run_end_rolls_the_grammar_back():
    g = Grammar()
    g.accepted = [7]
    assert grammar_run_end.run_end(g, [0, 1, 2]) == 2
    assert grammar_run_end.run_end(g, [0, 3]) == 2
    assert grammar_run_end.run_end(Grammar(rejected={3}), [0, 3, 1]) == 3
    assert g.accepted == [7]


def test_cut_runs_skips_finished_retracted_and_plain_requests():
    import types

    import torch

    def req(grammar, finished=False, retracted=False):
        return types.SimpleNamespace(grammar=grammar, finished=lambda: finished, is_retracted=retracted)

    reqs = [req(Grammar()), req(Grammar(), finished=True), req(Grammar(), retracted=True), req(None), req(Grammar())]
    result = types.SimpleNamespace(accept_lens=torch.tensor([3, 3, 3, 3, 1], dtype=torch.int32),
                                   next_token_ids=torch.tensor([0, 1, 2, 9] * 5))
    assert grammar_run_end.cut_runs_at_grammar_end(types.SimpleNamespace(reqs=reqs), result, 4) == 1
    assert result.accept_lens.tolist() == [2, 3, 3, 3, 1]
    assert all(r.grammar is None or r.grammar.accepted == [] for r in reqs)
