"""dp-draft-graph-rank-agree (#32209 / #39072) on the release's real ``EagleDraftWorker.draft``: the per-rank draft
CUDA-graph decision of a busy rank (a decode batch with no DSA top-k seed) and an idle rank (``ForwardMode.IDLE``) of
one DP-attention server whose draft seeds the top-k from the draft extend. Stock: the busy rank drafts eagerly, the idle
rank replays the graph (their collectives differ: the hang). Plugin: both draft eagerly; without DP attention, or
without the seed, the release's decision is unchanged.

Stand-ins: ``prepare_for_draft`` returns the batch's forward batch with the graph usable (``can_run_graph`` True), the
graph runner's ``execute`` and the eager ``draft_forward`` record which one ran and stop the call (what follows, the
verify input, is not under test), the attention backend's metadata call does nothing, and the parallel context
(``get_parallel``, 0.5.18 on) reports DP attention as the server config has it. The worker is made without
``__init__``; ``draft`` itself (its condition and the plugin's) is the release's.
"""

import inspect
import types

import pytest
from conftest import requires_sglang, where_patched

from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import dp_draft_graph_rank_agree

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = dp_draft_graph_rank_agree.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's EagleDraftWorker.draft")


class Ran(Exception):
    pass


def _draft(plugin):
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    if not plugin:
        return EagleDraftWorker.draft
    (fn,) = core.build_fix(FIX).values()
    return fn


@pytest.fixture
def has_switch():
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    if "dsa_topk_indices is None" not in inspect.getsource(EagleDraftWorker.draft):
        pytest.skip("no per-rank draft-graph switch in this release (not-applicable)")


def decision(monkeypatch, fn, idle, dp_attention=True, seed=True):
    """'graph' or 'eager': what ``fn`` runs on one rank."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_worker_v2
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang_specv2_fixes.testing import scenarios

    fb = types.SimpleNamespace(forward_mode=ForwardMode.IDLE if idle else ForwardMode.DECODE,
                               mark_forward_metadata_ready=lambda: None)
    three = "kv_loc_plan = prepare_for_draft(" in inspect.getsource(EagleDraftWorker.draft)
    prepare = lambda *a, **k: (fb, True, None) if three else (fb, True)  # noqa: E731
    if hasattr(eagle_worker_v2, "prepare_for_draft"):  # a module function from 0.5.16, a method on 0.5.15.post1
        monkeypatch.setattr(eagle_worker_v2, "prepare_for_draft", prepare)
    monkeypatch.setattr(eagle_worker_v2, "get_parallel", lambda: types.SimpleNamespace(
        enable_dp_attention=dp_attention, attn_dp_enabled=dp_attention), raising=False)

    def ran(what):
        def fn(*a, **k):
            raise Ran(what)
        return fn

    w = object.__new__(EagleDraftWorker)
    w.__dict__.update(
        seed_dsa_topk_from_draft_extend=seed, server_args=scenarios.Unset(enable_dp_attention=dp_attention),
        req_to_token_pool=None, cuda_graph_runner=types.SimpleNamespace(execute=ran("graph")),
        draft_runner=types.SimpleNamespace(canary_manager=None), topk=1, speculative_num_steps=3,
        speculative_num_draft_tokens=4, target_worker=types.SimpleNamespace(
            model_runner=types.SimpleNamespace(kv_index_translator=None)),
        draft_attn_backend=types.SimpleNamespace(init_forward_metadata=lambda fb: None), draft_forward=ran("eager"),
        prepare_for_draft=prepare,
    )
    batch = types.SimpleNamespace(spec_info=types.SimpleNamespace(dsa_topk_indices=None))
    with pytest.raises(Ran) as e:
        fn(w, batch)
    return str(e.value)


def test_stock_ranks_disagree_under_dp_attention(monkeypatch, has_switch):
    busy, idle = (decision(monkeypatch, _draft(False), idle=i) for i in (False, True))
    assert (busy, idle) == ("eager", "graph")


@FIXED_HERE
def test_plugin_every_rank_drafts_eagerly(monkeypatch):
    assert [decision(monkeypatch, _draft(True), idle=i) for i in (False, True)] == ["eager", "eager"]


@FIXED_HERE
@pytest.mark.parametrize("dp_attention,seed,expected", [
    (False, True, ["eager", "graph"]),  # no DP attention: no collectives across ranks, the release's rule
    (True, False, ["graph", "graph"]),  # no top-k seed: the graph everywhere, as stock
])
def test_plugin_keeps_the_release_decision_elsewhere(monkeypatch, dp_attention, seed, expected):
    got = [decision(monkeypatch, _draft(True), idle=i, dp_attention=dp_attention, seed=seed) for i in (False, True)]
    stock = [decision(monkeypatch, _draft(False), idle=i, dp_attention=dp_attention, seed=seed) for i in (False, True)]
    assert got == stock == expected
