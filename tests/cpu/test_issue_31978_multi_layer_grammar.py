"""#31978 on the release's real multi-layer verify (0.5.11 … 0.5.15.post1): ``MultiLayerEagleWorkerV2.verify`` samples
without the grammar's vocab mask; with the plugin's ``multi-layer-grammar-mask`` it builds the release's own mask
(``spec_utils.generate_token_bitmask`` walking the draft tree through the grammar) and passes it to the sampler.

The function under test is the release's ``MultiLayerEagleWorkerV2.verify`` (stock, or the plugin's, compiled from the
release's source and the patch file), run on a worker made without ``__init__``. Its GPU-only steps are stand-ins
(the verify batch preparation, the target forward, the stream bookkeeping); the sampler (``verify_input.sample`` up
to 0.5.13, ``eagle_sample`` from 0.5.14: CUDA kernels) records its arguments and stops the call, so the test sees
exactly what the release's sampler would get. The mask builder is the release's real one. The grammar is a stand-in
with the interface SGLang's grammar objects give ``traverse_tree`` (no xgrammar in these releases' CPU overlays): K
words from ``WORDS``, then only EOS; it allocates masks all-allowed, as xgrammar does.

From 0.5.16 the multi-layer verify is ``eagle_worker_common.run_eagle_verify``, which builds the mask; the table's
note checks that function (tests/cpu/test_fingerprints.py).
"""

import contextlib
import types

import pytest
import torch
from conftest import VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import releases
from sglang_specv2_fixes.fixes import multi_layer_grammar_mask

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = multi_layer_grammar_mask.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's MultiLayerEagleWorkerV2.verify")
BUGGY = VERSION in releases.release_set("up-to:0.5.15.post1")
V, EOS = 64, 2
WORDS = set(range(10, 20))
NUM_DRAFT = 4  # topk 1, 3 steps: a chain of 4 positions per request
DRAFTS = [[10, 11, 12, 13], [30, 31, 32, 33]]  # request 0 (grammar, 2 words left): 11 and 12 accepted, then only EOS


class Grammar:
    """K words from WORDS, then EOS; ``accept_token`` raises ValueError on a token it does not allow."""

    def __init__(self, k):
        self.k, self.accepted = k, []

    def allowed(self):
        if self.is_terminated():
            return set()
        return WORDS if len(self.accepted) < self.k else {EOS}

    def accept_token(self, token):
        token = int(token)
        if token not in self.allowed():
            raise ValueError(f"Tokens not accepted: {token}")
        self.accepted.append(token)

    def rollback(self, k):
        del self.accepted[-k:]

    def is_terminated(self):
        return bool(self.accepted) and self.accepted[-1] == EOS

    def allocate_vocab_mask(self, vocab_size, batch_size, device):
        return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32, device=device)

    def fill_vocab_mask(self, vocab_mask, idx):
        row = torch.zeros(vocab_mask.shape[1] * 32, dtype=torch.bool)
        row[sorted(self.allowed())] = True
        bits = (row.view(-1, 32).to(torch.int64) << torch.arange(32)).sum(1)
        vocab_mask[idx] = (bits - (bits >= 2**31).to(torch.int64) * 2**32).to(torch.int32)

    @staticmethod
    def apply_vocab_mask(logits, vocab_mask):
        raise AssertionError("the sampler is a stand-in here")


def allowed_in(mask_row):
    return {t for t in range(V) if (int(mask_row[t // 32]) >> (t % 32)) & 1}


class Stop(Exception):
    pass


class SeqLens(list):
    def record_stream(self, stream):
        pass


def run(plugin, monkeypatch, grammar=True, marks=None):
    """Call the release's (or the plugin's) verify on a two-request batch whose verify runs outside the CUDA graphs
    (the preparation returns ``can_run_cuda_graph`` False and plans nothing); returns (what the sampler got, batch, the
    grammar, how many times the draft tree was copied to the CPU, the extend step's mask). ``marks`` collects the
    verify's ``mark_forward_metadata_ready`` calls on the verify forward batch."""
    from sglang.srt.speculative import multi_layer_eagle_worker_v2 as mod

    from sglang_specv2_fixes import core

    got, copies = {}, []

    class Tree(torch.Tensor):  # counts the copies to the CPU
        def cpu(self, *a, **k):
            copies.append(1)
            return self.as_subclass(torch.Tensor).clone()

    def sampler(batch, logits_output, vocab_mask=None):  # either release's sampler, as called by the verify
        got["vocab_mask"] = vocab_mask
        raise Stop

    g = Grammar(k=3)
    g.accepted = [10]  # the previous step's tokens: one word, two words left
    reqs = [types.SimpleNamespace(grammar=g if grammar else None), types.SimpleNamespace(grammar=None)]
    verify_input = types.SimpleNamespace(
        retrieve_next_token=torch.tensor([[1, 2, 3, -1]] * 2).as_subclass(Tree),
        retrieve_next_sibling=torch.full((2, NUM_DRAFT), -1).as_subclass(Tree),
        draft_token=torch.tensor(sum(DRAFTS, [])).as_subclass(Tree),
        grammar=None,
        prepare_for_v2_verify=lambda pool, batch, target: (types.SimpleNamespace(
            mark_forward_metadata_ready=lambda *a, **k: (marks if marks is not None else []).append(1)), False),
        sample=lambda batch, logits_output, *mask: sampler(batch, logits_output, *mask),
    )
    extend_mask = object()
    batch = types.SimpleNamespace(
        seq_lens=SeqLens([5, 5]), spec_info=verify_input, input_ids=None, out_cache_loc=None, reqs=reqs,
        has_grammar=grammar, sampling_info=types.SimpleNamespace(vocab_size=V, vocab_mask=extend_mask))
    logits = types.SimpleNamespace(next_token_logits=torch.zeros(2 * NUM_DRAFT, V))
    worker = object.__new__(mod.MultiLayerEagleWorkerV2)
    worker.__dict__.update(
        device="cpu", plan_stream=None, plan_stream_ctx=contextlib.nullcontext(), req_to_token_pool=None,
        speculative_num_draft_tokens=NUM_DRAFT,
        _target_worker=types.SimpleNamespace(  # behind the worker's target_worker property
            forward_batch_generation=lambda **kw: types.SimpleNamespace(logits_output=logits)))
    for name in ("record_stream_for_v2_verify", "record_stream_each", "maybe_detect_nan", "maybe_detect_inf"):
        if hasattr(mod, name):
            monkeypatch.setattr(mod, name, lambda *a, **k: None)
    if hasattr(mod, "eagle_prepare_for_verify"):
        monkeypatch.setattr(mod, "eagle_prepare_for_verify", lambda vi, *a: vi.prepare_for_v2_verify(*a))
    if hasattr(mod, "eagle_sample"):
        monkeypatch.setattr(mod, "eagle_sample", lambda vi, b, lo, *mask: sampler(b, lo, *mask))
    verify = core.build_fix(FIX)[f"{mod.__name__}.MultiLayerEagleWorkerV2.verify"] if plugin \
        else mod.MultiLayerEagleWorkerV2.verify
    with pytest.raises(Stop):
        verify(worker, batch)
    return got["vocab_mask"], batch, g, len(copies), extend_mask


@pytest.mark.skipif(not BUGGY, reason=f"sglang {VERSION}: the multi-layer verify builds the mask (#31380)")
def test_stock_samples_without_the_grammar_mask(monkeypatch):
    mask, batch, g, copies, extend_mask = run(False, monkeypatch)
    assert mask is None
    assert copies == 0 and batch.sampling_info.vocab_mask is extend_mask


@FIXED_HERE
def test_plugin_samples_under_the_release_grammar_mask(monkeypatch):
    mask, batch, g, copies, _ = run(True, monkeypatch)
    assert mask is not None and tuple(mask.shape) == (2 * NUM_DRAFT, (V + 31) // 32)
    rows = [allowed_in(mask[i]) for i in range(2 * NUM_DRAFT)]
    # request 0: after the previous step's word two are left (rows 0 and 1), after 11 and 12 only EOS (row 2); 13 is
    # not allowed there, so row 3 is never filled (all allowed, as allocated)
    assert rows[0] == WORDS and rows[1] == WORDS and rows[2] == {EOS} and rows[3] == set(range(V))
    assert all(r == set(range(V)) for r in rows[NUM_DRAFT:])  # request 1 has no grammar
    assert g.accepted == [10]  # the walk rolls the grammar back
    assert batch.spec_info.grammar is g and batch.sampling_info.vocab_mask is None
    assert copies == 3  # next token, next sibling, draft tokens: once each, before the forward


@FIXED_HERE
def test_plugin_leaves_a_batch_without_grammar_alone(monkeypatch):
    mask, batch, g, copies, extend_mask = run(True, monkeypatch, grammar=False)
    assert mask is None and copies == 0 and batch.sampling_info.vocab_mask is extend_mask


PLANS_IN_GRAPH_ONLY = VERSION not in releases.release_set("up-to:0.5.12.post1")  # 0.5.13: prepare plans graph batches


@pytest.mark.skipif(not (BUGGY and PLANS_IN_GRAPH_ONLY), reason=f"sglang {VERSION}: the verify preparation plans every "
                    "batch (0.5.11 / 0.5.12.x) or the multi-layer verify is run_eagle_verify (0.5.16+)")
def test_stock_marks_an_unplanned_batch_as_planned(monkeypatch):
    """0.5.13 - 0.5.15.post1: outside the CUDA graphs the preparation plans nothing, yet the multi-layer verify marks
    the batch as planned, so the target forward runs on the previous forward's attention metadata."""
    marks = []
    run(False, monkeypatch, marks=marks)
    assert marks == [1]


@FIXED_HERE
def test_plugin_leaves_an_unplanned_batch_to_forward_extend(monkeypatch):
    """As the release's EAGLEWorkerV2.verify: no mark, so forward_extend plans the batch (post-pad). On 0.5.11 /
    0.5.12.x the verify never marked (the preparation planned every batch), so nothing is marked there either."""
    marks = []
    mask, *_ = run(True, monkeypatch, marks=marks)
    assert marks == [] and mask is not None


@FIXED_HERE
def test_the_mask_tolerates_a_non_contiguous_draft():
    """Beyond upstream's block (#30155): the draft tokens are reshaped, not viewed."""
    draft = torch.arange(16).view(4, 4).t()  # non-contiguous
    vi = types.SimpleNamespace(retrieve_next_token=torch.zeros(4, 4, dtype=torch.long),
                               retrieve_next_sibling=torch.zeros(4, 4, dtype=torch.long), draft_token=draft)
    assert not draft.is_contiguous()
    snap = multi_layer_grammar_mask.grammar_snapshot(types.SimpleNamespace(has_grammar=True), vi)
    assert torch.equal(snap[2], draft.reshape(4, 4))
