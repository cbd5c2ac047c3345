"""min-tokens-per-position (beyond upstream; on by default since its GPU row ran, session 30) on each release's real
functions.

The path a spec-v2 decode step takes with ``min_tokens``, with the release's own objects: real ``Req``s and a real
``BatchedPenalizerOrchestrator`` with the release's ``BatchedMinNewTokensPenalizer`` (and its frequency penalizer) on
CPU, the release's spec-v2 decode preparation (``EagleDraftInputV2Mixin.prepare_for_decode`` up to 0.5.14,
``eagle_utils.eagle_prepare_for_decode`` from 0.5.15; stopped right after its penalty feed, where the KV allocation
starts), a real ``SamplingBatchInfo`` and its ``copy_for_forward``, and the verify's sampling
(``EagleVerifyInputV2Mixin.sample`` up to 0.5.13.post1, ``eagle_utils.eagle_sample`` from 0.5.14) up to its greedy
verify kernel, which records the target's per-position argmax and stops the call. Stock functions, then the plugin's
(``core.build_fix``), on the same scenario.

Scenario: three requests of prompt lengths 5 / 9 / 7 with ``min_tokens`` 6 / 0 / 3 (one with ``stop_token_ids``),
after several verify steps of multi-token accepts (output lengths 4 / 7 / 2 after 2 steps), a chain of 4 draft
positions whose ``positions`` are the device's (KV length + depth). The target's logits favour a stop token at every
position; the expected argmax per position is what decoding without speculation gives the token of that output index:
a stop token exactly where the index is >= min_tokens. Stock counts steps (2 < 6): the first request's stop tokens
are masked at every position, including those past its min_tokens. The plugin's gate puts them back there and keeps
them masked below, and keeps the counter at min_new_tokens so the per-step mask drops out; a batch without min_tokens
gets no gate (bias and argmax as stock).
"""

import dataclasses
import importlib

import pytest
import torch
from conftest import VERSION, patched_here, requires_sglang, where_patched

from sglang_specv2_fixes import catalog, core, selection
from sglang_specv2_fixes.fixes import min_tokens_per_position
from sglang_specv2_fixes.testing import scenarios

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = min_tokens_per_position.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's spec-v2 feed, copy_for_forward and verify sampling")
V, EOS, STOP = 64, 2, 7
N = 4  # draft positions per request (a chain: topk 1, 3 steps)
# (prompt length, min_tokens, output length after the steps so far, stop_token_ids)
REQS = [(5, 6, 4, None), (9, 0, 7, None), (7, 3, 2, [STOP])]
STEPS = 2  # verify steps fed so far (stock's counter)
SPEC = dict(speculative_algorithm="EAGLE3", speculative_num_steps=N - 1, speculative_eagle_topk=1,
            speculative_num_draft_tokens=N, attention_backend="torch_native")  # what 0.5.22+'s sampling reads


class Stop(Exception):
    pass


def _sample_site():
    """(module, stock function, call(fn, verify_input, batch, logits_output)) of the release's verify sampling."""
    utils = importlib.import_module("sglang.srt.speculative.eagle_utils")
    if hasattr(utils, "eagle_sample"):
        return utils, utils.eagle_sample, "sglang.srt.speculative.eagle_utils.eagle_sample", \
            lambda fn, vi, b, lo: fn(vi, b, lo)
    mod = importlib.import_module("sglang.srt.speculative.eagle_info_v2")
    return mod, mod.EagleVerifyInputV2Mixin.sample, \
        "sglang.srt.speculative.eagle_info_v2.EagleVerifyInputV2Mixin.sample", lambda fn, vi, b, lo: fn(vi, b, lo)


def _feed_site():
    utils = importlib.import_module("sglang.srt.speculative.eagle_utils")
    if hasattr(utils, "eagle_prepare_for_decode"):
        return utils.eagle_prepare_for_decode, "sglang.srt.speculative.eagle_utils.eagle_prepare_for_decode", \
            lambda fn, batch: fn(batch)
    mod = importlib.import_module("sglang.srt.speculative.eagle_info_v2")
    return mod.EagleDraftInputV2Mixin.prepare_for_decode, \
        "sglang.srt.speculative.eagle_info_v2.EagleDraftInputV2Mixin.prepare_for_decode", \
        lambda fn, batch: fn(types_ns(), batch)


def types_ns(**kw):
    import types

    return types.SimpleNamespace(**kw)


class Batch:
    """The ScheduleBatch fields the feed reads; its KV allocator stops the call (the allocation follows the feed)."""

    def __init__(self, reqs):
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        self.reqs, self.device = reqs, "cpu"
        self.sampling_info = None
        self._cumulate = getattr(ScheduleBatch, "cumulate_penalty_output_tokens", None)

    def cumulate_penalty_output_tokens(self):  # 0.5.14+: the release's own
        return self._cumulate(self)

    def batch_size(self):
        return len(self.reqs)

    def maybe_evict_swa(self):
        pass

    def maybe_wait_verify_done(self):
        pass

    @property
    def token_to_kv_pool_allocator(self):
        raise Stop("allocation")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *a, **k: None


def make_reqs():
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    reqs = []
    for i, (prompt, min_tokens, out, stops) in enumerate(REQS):
        tokenizer = types_ns(eos_token_id=EOS, additional_stop_token_ids=None)
        sp = SamplingParams(max_new_tokens=64, min_new_tokens=min_tokens, stop_token_ids=stops)
        sp.normalize(tokenizer)
        req = Req(f"r{i}", "", [100 + k for k in range(prompt)], sp, vocab_size=V)
        req.tokenizer = tokenizer
        req.output_ids = [20 + k for k in range(out)]
        reqs.append(req)
    return reqs


def sampling_info(batch):
    """A real SamplingBatchInfo of the batch: greedy, the release's penalizers in a real orchestrator."""
    import sglang.srt.sampling.penaltylib as penaltylib
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    orch = penaltylib.BatchedPenalizerOrchestrator(
        vocab_size=V, batch=batch,
        penalizers={penaltylib.BatchedMinNewTokensPenalizer, penaltylib.BatchedFrequencyPenalizer})
    kw = {f.name: None for f in dataclasses.fields(SamplingBatchInfo)
          if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    bs = len(batch.reqs)
    kw.update(temperatures=torch.ones(bs, 1), top_ps=torch.ones(bs), top_ks=torch.full((bs,), -1),
              min_ps=torch.zeros(bs), is_all_greedy=True, need_top_p_sampling=False, need_top_k_sampling=False,
              need_min_p_sampling=False, vocab_size=V, penalizer_orchestrator=orch)
    names = {f.name for f in dataclasses.fields(SamplingBatchInfo)}
    kw = {k: v for k, v in kw.items() if k in names}
    if "device" in names:
        kw["device"] = "cpu"
    return SamplingBatchInfo(**kw)


def feed(functions, steps=STEPS):
    """The scenario's batch after ``steps`` spec-v2 feeds of the release's decode preparation (stock or patched)."""
    reqs = make_reqs()
    batch = Batch(reqs)
    batch.sampling_info = sampling_info(batch)
    fn, key, call = _feed_site()
    fn = functions.get(key, fn)
    for _ in range(steps):
        with pytest.raises(Stop):
            call(fn, batch)
    return batch


def verify(functions, batch, monkeypatch):
    """The target's per-position argmax [bs, N] the release's verify sampling hands its greedy kernel."""
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    copy_fn = functions.get("sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.copy_for_forward",
                            SamplingBatchInfo.copy_for_forward)
    info = copy_fn(batch.sampling_info)
    bs = len(batch.reqs)
    seq_lens = torch.tensor([len(r.origin_input_ids) + len(r.output_ids) - 1 for r in batch.reqs])
    positions = (seq_lens.unsqueeze(1) + torch.arange(N)).flatten()
    logits = torch.zeros(bs * N, V)
    logits[:, 30] = 5.0
    logits[:, EOS] = 10.0
    logits[2 * N:, STOP] = 11.0  # the third request's own stop token, highest of all
    mod, stock, key, call = _sample_site()
    got = {}

    def kernel(*args, **kwargs):
        got["target_predict"] = kwargs["target_predict"]
        raise Stop("greedy verify")

    monkeypatch.setattr(mod, "verify_tree_greedy_func", kernel)
    vi = types_ns(draft_token=torch.zeros(bs * N, dtype=torch.int64), draft_token_num=N, spec_steps=N - 1, topk=1,
                  positions=positions, retrieve_index=torch.arange(bs * N).view(bs, N),
                  retrieve_next_token=torch.full((bs, N), -1), retrieve_next_sibling=torch.full((bs, N), -1),
                  grammar=None, tree_topk=1, num_tokens_per_req=N, max_tree_depth=N)
    mwb = types_ns(seq_lens=seq_lens, sampling_info=info, input_ids=torch.zeros(bs * N, dtype=torch.int64),
                   forward_mode=types_ns(is_idle=lambda: False), reqs=batch.reqs, return_logprob=False,
                   req_pool_indices=torch.arange(bs), has_grammar=False, spec_info=vi, device="cpu")
    lo = types_ns(next_token_logits=logits, hidden_states=None)
    with scenarios.published_server_args(monkeypatch, **SPEC), pytest.raises(Stop):
        call(functions.get(key, stock), vi, mwb, lo)
    return got["target_predict"].reshape(bs, N), info


def expected():
    """Decoding without speculation: a stop token at output index i iff i >= min_tokens; the index of draft position
    j is the output length so far + j."""
    rows = []
    for prompt, min_tokens, out, stops in REQS:
        best = STOP if stops else EOS
        rows.append([best if out + j >= min_tokens else 30 for j in range(N)])
    return torch.tensor(rows)


@pytest.fixture(scope="module")
def patched():
    return core.build_fix(FIX)


def test_stock_counts_steps(monkeypatch):
    """Stock: the counter is the number of verify steps (2) and the first request's stop tokens stay masked at all four
    positions, although output indices 6 and 7 are past its min_tokens (6): the bug this fix is for."""
    batch = feed({})
    pen = [p for p in batch.sampling_info.penalizer_orchestrator.penalizers.values()
           if type(p).__name__ == "BatchedMinNewTokensPenalizer"][0]
    assert pen.len_output_tokens.flatten().tolist() == [STEPS] * len(REQS)
    predict, _ = verify({}, batch, monkeypatch)
    assert predict[0].tolist() == [30, 30, 30, 30]
    assert predict.tolist() != expected().tolist()


@FIXED_HERE
def test_plugin_masks_per_position(monkeypatch, patched):
    """The plugin: every position's argmax is what decoding without speculation gives that output index."""
    batch = feed(patched)
    predict, info = verify(patched, batch, monkeypatch)
    assert predict.tolist() == expected().tolist()
    # the gate rode with the forward's copy, once: the scheduler's object no longer holds it
    assert "specv2_min_tokens" in info.__dict__ and "specv2_min_tokens" not in batch.sampling_info.__dict__
    last, _ = info.__dict__["specv2_min_tokens"]
    assert last.tolist() == [p + m - 1 for p, m, _, _ in REQS]
    pen = [p for p in batch.sampling_info.penalizer_orchestrator.penalizers.values()
           if type(p).__name__ == "BatchedMinNewTokensPenalizer"][0]
    assert pen.len_output_tokens.flatten().tolist() == [m for _, m, _, _ in REQS]
    # the per-step bias carries no stop-token mask any more (the frequency penalizer's part is there as stock's)
    assert not torch.isinf(info.acc_additive_penalties).any()


@FIXED_HERE
def test_plugin_without_min_tokens_is_stock(monkeypatch, patched):
    """A batch with no min_tokens: no gate, the same bias and argmax as stock."""
    global REQS
    saved = REQS
    REQS = [(p, 0, o, s) for p, _, o, s in saved]
    try:
        ours, info = verify(patched, feed(patched), monkeypatch)
        theirs, stock_info = verify({}, feed({}), monkeypatch)
    finally:
        REQS = saved
    assert "specv2_min_tokens" not in info.__dict__
    assert ours.tolist() == theirs.tolist()
    assert (info.acc_additive_penalties is None) == (stock_info.acc_additive_penalties is None)
    if info.acc_additive_penalties is not None:
        assert torch.equal(info.acc_additive_penalties, stock_info.acc_additive_penalties)


@FIXED_HERE
def test_gate_holds_one_forward(patched):
    """copy_for_forward hands the gate on once: a second copy (no feed in between) has none."""
    batch = feed(patched, steps=1)
    fn = patched["sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.copy_for_forward"]
    first, second = fn(batch.sampling_info), fn(batch.sampling_info)
    assert "specv2_min_tokens" in first.__dict__ and "specv2_min_tokens" not in second.__dict__


def test_gate_tree_positions():
    """A tree's positions (KV length + depth, siblings share a position): the gate masks by depth, not by index."""
    last = torch.tensor([11])  # prompt 5, min_tokens 7: output indices < 7 masked, i.e. positions < 11
    stop = torch.zeros(1, V)
    stop[0, EOS] = float("-inf")
    info = types_ns()
    info.__dict__["specv2_min_tokens"] = (last, stop)
    positions = torch.tensor([9, 10, 10, 11, 11, 12])  # root, two children, two grandchildren, one at depth 3
    logits = torch.zeros(6, V)
    logits[:, EOS] = 1.0
    min_tokens_per_position.gate_stop_tokens(info, types_ns(positions=positions, draft_token_num=6), logits)
    assert logits.argmax(-1).tolist() == [0, 0, 0, EOS, EOS, EOS]


def test_gate_shape_mismatch_leaves_logits():
    info = types_ns()
    info.__dict__["specv2_min_tokens"] = (torch.tensor([100, 100]), torch.zeros(2, V))
    logits = torch.zeros(3, V)
    min_tokens_per_position.gate_stop_tokens(info, types_ns(positions=torch.arange(3), draft_token_num=2), logits)
    assert not torch.isinf(logits).any()
    min_tokens_per_position.gate_stop_tokens(info, types_ns(), logits)  # a verify input without positions
    assert not torch.isinf(logits).any()


def test_no_gate_reads_nothing_of_the_verify_input():
    """Without a gate (no request with min_tokens) the verify input is not touched: any spec algorithm's input passes."""
    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"read {name}")

    logits = torch.zeros(4, V)
    min_tokens_per_position.gate_stop_tokens(types_ns(), Untouchable(), logits)
    assert not logits.any()


@FIXED_HERE
@pytest.mark.skipif(not patched_here("verify-handoff"), reason="verify-handoff patches no decode preparation here")
def test_composed_with_verify_handoff(monkeypatch):
    """0.5.11 / 0.5.12.x: the decode preparation both fixes replace, built once from both files (``compose:``),
    feeds the gate as this fix's file alone does."""
    both = core.build_fixes([FIX, "verify-handoff"])
    predict, info = verify(both, feed(both), monkeypatch)
    assert predict.tolist() == expected().tolist()
    assert "specv2_min_tokens" in info.__dict__


@FIXED_HERE
def test_on_by_default(monkeypatch):
    """No switch: ``ready`` under ``auto`` (the default since session 30's GPU row); ``disabled`` only where the
    selection leaves it out. The old opt-in variable means nothing now."""
    fix = min_tokens_per_position.FIX
    assert fix.opt_in is None
    monkeypatch.delenv("SGLANG_SPECV2_FIXES_MIN_TOKENS_PER_POSITION", raising=False)
    states = {}
    for value in ("auto", f"auto,-{FIX}"):
        (st,) = core.plan(selection.parse(value, [fix]), VERSION, fixes=[fix]).fixes
        states[value] = (st.state, st.reason)
    assert states["auto"][0] == catalog.READY and "fingerprints match" in states["auto"][1], states["auto"]
    state, reason = states[f"auto,-{FIX}"]
    assert state == catalog.DISABLED and reason.startswith("not selected"), states
