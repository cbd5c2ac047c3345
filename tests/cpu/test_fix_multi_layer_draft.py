"""multi-layer-draft on the release's real multi-layer draft worker (0.5.13 … 0.5.23).

The draft: after the decode preparation ``batch.seq_lens_sum`` is None (lazy since 0.5.13), and the stock
``MultiLayerEagleDraftWorker.draft`` hands it to ``build_tree_kernel_efficient``, whose FULL_MASK allocation then
raises ``TypeError``; the plugin's draft sizes the mask as the release's ``EagleWorkerV2.draft`` does.

The draft extend outside its CUDA graph (``_draft_extend_for_decode``): the preparation plans runner 0's attention
backend and marks the batch planned; stock runs steps 1.. on runners whose own backends were never planned for this
batch; the plugin plans each of them before its forward. 0.5.16 / 0.5.17 plan every step, but also an idle round
(DP attention, a rank without requests), where planning the empty batch raises (#33892); the plugin skips an idle
round on 0.5.13 … 0.5.17, as 0.5.18 does. The test's runners record, at each forward, whether their backend was
planned for the batch being run; their planning raises on an idle round, as the real backends' does.

The draft extend with DP attention: every plan of the eager draft extend (the preparation's of runner 0, the per-step
ones) is made before the runner's forward pads the batch to the largest rank's token count
(``ForwardBatch.prepare_mlp_sync_batch``, MAX_LEN), and the preparation's mark forbids the forward to plan again: the
attention then writes the padded K/V to the plan's unpadded cache locations (fa3 takes the sliding-window write
locations from the plan: ``Size mismatch`` in ``set_kv_buffer`` on the rank with fewer tokens, GPU row
test_dp2_multi_layer_idle.py on 0.5.16 / 0.5.17). Stock, on every release; the plugin (0.5.13 … 0.5.23) marks each
step's plan ``replan_equivalent``, so the forward plans again after the padding. On 0.5.18 … 0.5.23 (#33892's idle guard
upstream) that mark is all the patch adds: there the plugin's busy and idle rounds plan as stock does, and only the
padded forward plans again. Here the batch is the release's real ``ForwardBatch`` (its ``mark_forward_metadata_ready`` /
``needs_forward_metadata_init`` / ``_pad_inputs_to_size``), and the runners' forward does what
``ModelRunner._forward_raw`` does around the model: pad (MAX_LEN), plan if the batch needs it (the eager runner's
extend), run; the backend's plan records the cache locations it was made for.

The functions under test are the release's ``MultiLayerEagleDraftWorker.draft`` (stock, or the plugin's, compiled from
the release's source and the patch file) and the release's real ``build_tree_kernel_efficient``, run on a worker made
without ``__init__``. The GPU-only steps are stand-ins: the draft batch preparation and the draft forward return fixed
tensors, and the CUDA tree kernel (``sgl_build_tree_kernel_efficient``) records the tree mask it is given and stops the
call. What the test reads is the mask the release allocated.
"""

import types

import pytest
import torch
from conftest import VERSION, patched_here, requires_sglang, where_patched

from sglang_specv2_fixes import releases
from sglang_specv2_fixes.fixes import multi_layer_draft
from sglang_specv2_fixes.testing.scenarios import TreeKernelStop, capture_tree_mask

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = multi_layer_draft.FIX.name
DRAFT_BUGGY = set(releases.release_set("up-to:0.5.15.post1")) - set(releases.release_set("up-to:0.5.12.post1"))
IDLE_PLANNED = {"0.5.16", "0.5.17"}  # upstream's per-step planning without the idle guard (#33892 in 0.5.18)
# #33892 upstream: the patch adds only the re-plan after the DP padding (known bug multi-layer-dp-padding)
PADDING_ONLY = set(releases.release_set("all")) - set(releases.release_set("up-to:0.5.17"))
BUGGY = VERSION in DRAFT_BUGGY
# the draft is patched on 0.5.13 - 0.5.15.post1 (its patch files target it), the draft extend on 0.5.13 - 0.5.23
FIXED_HERE = pytest.mark.skipif(not (BUGGY and patched_here(FIX)), reason=f"sglang {VERSION}: the plugin patches "
                                "MultiLayerEagleDraftWorker.draft on 0.5.13 - 0.5.15.post1 only")
EXTEND_FIXED_HERE = where_patched(FIX, "the plugin's MultiLayerEagleDraftWorker._draft_extend_for_decode")
TOPK, STEPS, NUM_DRAFT = 1, 3, 4  # a chain: the bonus token and three draft tokens per request
SEQ_LENS = [7, 12]
MAX_CONTEXT_LEN = 64


class Stop(Exception):
    pass


class Backend:
    """The target's attention backend as the draft sees it: the verify buffers (None, None) as the base class hands
    them over (fa3, flashinfer, triton without graphs), or a preallocated mask (triton's graph buffer)."""

    def __init__(self, tree_mask_buf=None, max_context_len=MAX_CONTEXT_LEN):
        self.tree_mask_buf = tree_mask_buf
        if max_context_len is not None:
            self.max_context_len = max_context_len

    def get_verify_buffers_to_fill_after_draft(self):
        return [self.tree_mask_buf, None]


def run(plugin, monkeypatch, seq_lens_sum=None, backend=None):
    """Call the release's (or the plugin's) draft on a two-request decode batch; returns the tree mask the release's
    build_tree_kernel_efficient passed to the kernel."""
    from sglang.srt.speculative import eagle_utils
    from sglang.srt.speculative import multi_layer_eagle_worker_v2 as mod

    from sglang_specv2_fixes import core

    got = capture_tree_mask(monkeypatch)
    bs = len(SEQ_LENS)
    prepared = (types.SimpleNamespace(), False)
    draft_input = types.SimpleNamespace(bonus_tokens=torch.tensor([5, 6]),
                                        prepare_for_v2_draft=lambda *a, **k: prepared)
    batch = types.SimpleNamespace(spec_info=draft_input, seq_lens=torch.tensor(SEQ_LENS), seq_lens_sum=seq_lens_sum,
                                  forward_mode=types.SimpleNamespace(is_idle=lambda: False))
    worker = object.__new__(mod.MultiLayerEagleDraftWorker)
    worker.__dict__.update(
        req_to_token_pool=None, cuda_graph_runner=None, draft_runner_list=[None], topk=TOPK,
        speculative_num_steps=STEPS, speculative_num_draft_tokens=NUM_DRAFT,
        tree_mask_mode=eagle_utils.TreeMaskMode.FULL_MASK,
        prepare_for_draft=lambda *a, **k: prepared,  # 0.5.14 on: a method of the worker
        draft_forward=lambda fb: ([torch.zeros(bs, 1)], torch.arange(STEPS).repeat(bs, 1),
                                  torch.arange(bs * STEPS).view(bs, STEPS)),
        target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(attn_backend=backend or Backend())))
    draft = core.build_fix(FIX)[f"{mod.__name__}.MultiLayerEagleDraftWorker.draft"] if plugin \
        else mod.MultiLayerEagleDraftWorker.draft
    with pytest.raises(TreeKernelStop):
        draft(worker, batch)
    return got["tree_mask"]


def full_mask_numel(seq_lens_sum):
    """FULL_MASK's size in the release's build_tree_kernel_efficient: one row of seq_len + NUM_DRAFT per draft token."""
    return seq_lens_sum * NUM_DRAFT + NUM_DRAFT * NUM_DRAFT * len(SEQ_LENS)


@pytest.mark.skipif(not BUGGY, reason=f"sglang {VERSION}: the multi-layer draft's seq_lens_sum is set "
                    "(0.5.11/0.5.12.x) or the guarded build_eagle_verify_input sizes the mask (0.5.16+)")
def test_stock_draft_stops_on_a_lazy_seq_lens_sum(monkeypatch):
    with pytest.raises(TypeError, match="NoneType"):
        run(False, monkeypatch)


@FIXED_HERE
def test_plugin_sizes_the_mask_by_the_release_rule(monkeypatch):
    mask = run(True, monkeypatch)
    assert mask.dtype == torch.bool and mask.numel() == full_mask_numel(len(SEQ_LENS) * MAX_CONTEXT_LEN)
    assert mask.numel() > full_mask_numel(sum(SEQ_LENS))  # an upper bound: rows are addressed from seq_lens


@FIXED_HERE
def test_plugin_keeps_a_known_sum_and_a_preallocated_mask(monkeypatch):
    assert run(True, monkeypatch, seq_lens_sum=sum(SEQ_LENS)).numel() == full_mask_numel(sum(SEQ_LENS))
    buf = torch.zeros(3, dtype=torch.bool)
    assert run(True, monkeypatch, backend=Backend(tree_mask_buf=buf)) is buf  # filled in place, never sized
    assert bool(buf.all())  # FULL_MASK fills a preallocated mask with True before the kernel


@FIXED_HERE
def test_plugin_backend_without_max_context_len_gets_the_exact_sum(monkeypatch):
    """Beyond the release's rule: a backend without ``max_context_len`` (the base class has none)."""
    mask = run(True, monkeypatch, backend=Backend(max_context_len=None))
    assert mask.numel() == full_mask_numel(sum(SEQ_LENS))


@FIXED_HERE
def test_the_rule_is_the_release_eagle_worker_v2_rule():
    """The helper and the release's own ``EagleWorkerV2.draft`` agree on the three cases: its source carries the same
    guard (read, not re-run: that draft needs a GPU)."""
    import inspect

    from sglang.srt.speculative import eagle_worker_v2

    src = inspect.getsource(eagle_worker_v2.EagleDraftWorker.draft)
    assert "seq_lens_sum = batch.seq_lens_sum" in src and "if seq_lens_sum is None:" in src
    assert "seq_lens_sum = batch.seq_lens.shape[0] * max_context_len" in src and "seq_lens_sum = 0" in src
    rule = multi_layer_draft.tree_mask_seq_lens_sum
    seq_lens = torch.tensor(SEQ_LENS)
    assert rule(types.SimpleNamespace(seq_lens_sum=19, seq_lens=seq_lens), Backend(), None) == 19
    assert rule(types.SimpleNamespace(seq_lens_sum=None, seq_lens=seq_lens), Backend(), object()) == 0
    assert rule(types.SimpleNamespace(seq_lens_sum=None, seq_lens=seq_lens), Backend(), None) == 2 * MAX_CONTEXT_LEN


STEPS_EXTEND = 3


def dp_padded_forward_batch(bs):
    """The release's real ForwardBatch of a draft extend (NUM_DRAFT tokens per request), as the preparation makes it."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    n = bs * NUM_DRAFT
    spec_info = types.SimpleNamespace(is_draft_input=lambda: True, hidden_states=torch.zeros(n, 8),
                                      num_tokens_per_req=NUM_DRAFT, pad_batch=lambda pad, bs: None)
    fb = ForwardBatch(forward_mode=ForwardMode.DRAFT_EXTEND_V2, batch_size=bs, input_ids=torch.zeros(n, dtype=torch.long),
                      req_pool_indices=torch.arange(bs), seq_lens=torch.tensor(SEQ_LENS) + NUM_DRAFT,
                      out_cache_loc=torch.arange(100, 100 + n), seq_lens_sum=None, positions=torch.zeros(n, dtype=torch.long),
                      spec_info=spec_info)
    if VERSION in DRAFT_BUGGY:  # up to 0.5.15.post1 the padding extends the LoRA ids unconditionally
        fb.lora_ids = [None] * bs
    return fb


def run_draft_extend(plugin, monkeypatch, idle=False, dp_pad_to=None):
    """Call the release's (or the plugin's) ``_draft_extend_for_decode`` with no draft-extend CUDA graph; returns, per
    step, whether that step's runner's attention backend was planned for the batch when the runner ran it. ``idle``: a
    DP-attention rank's empty round, which the preparation does not plan (its planning would raise on no requests).
    ``dp_pad_to``: DP attention, another rank runs that many requests: each forward pads the batch to them first, and
    the step counts as planned when its backend's plan is for the padded cache locations the attention writes."""
    from sglang.srt.speculative import multi_layer_eagle_worker_v2 as mod

    from sglang_specv2_fixes import core

    bs, vocab = len(SEQ_LENS), 32
    if dp_pad_to is None:
        forward_batch = types.SimpleNamespace(spec_info=types.SimpleNamespace(), extend_seq_lens=None,
                                              mark_forward_metadata_ready=lambda *a, **k: None,
                                              forward_metadata_ready=True,  # the preparation marks the batch planned
                                              forward_mode=types.SimpleNamespace(is_idle=lambda: idle))
    else:
        forward_batch = dp_padded_forward_batch(bs)
    # what ForwardBatch._pad_inputs_to_size reads of the model runner: the backend's fill value for padded seq_lens
    pad_runner = types.SimpleNamespace(attn_backend=types.SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1))
    seen = []

    class AttnBackend:
        planned_for = planned_locs = None

        def init_forward_metadata(self, fb):
            if idle:  # the real backends read the batch's sequence lengths: an empty round raises (#33892)
                raise ValueError("max() arg is an empty sequence")
            self.planned_for = fb
            # fa3 translates the batch's out_cache_loc into the sliding-window write locations when it plans
            self.planned_locs = getattr(fb, "out_cache_loc", None)

    class Runner:
        def __init__(self, step):
            self.step, self.attn_backend = step, AttnBackend()
            self.req_to_token_pool = self.token_to_kv_pool = None

        def forward(self, fb, **kw):
            if dp_pad_to is None:
                seen.append(self.attn_backend.planned_for is fb)
            else:
                # ModelRunner._forward_raw with DP attention: prepare_mlp_sync_batch pads the batch to the largest
                # rank's token count (MAX_LEN; batch size = tokens / tokens per request), then the eager runner's
                # extend plans it unless it is marked planned (needs_forward_metadata_init), then the model runs:
                # the attention writes as many K/V rows as the padded batch has tokens, to the plan's locations
                raw_bs = fb.batch_size
                fb.batch_size = dp_pad_to
                fb._pad_inputs_to_size(pad_runner, dp_pad_to * NUM_DRAFT, dp_pad_to)
                if fb.needs_forward_metadata_init():
                    self.attn_backend.init_forward_metadata(fb)
                locs = self.attn_backend.planned_locs
                seen.append(locs is not None and locs.shape[0] == fb.input_ids.shape[0])
                fb.batch_size = raw_bs  # post_forward_mlp_sync_batch restores the batch size
            if self.step == STEPS_EXTEND - 1:
                raise Stop
            return types.SimpleNamespace(logits_output=types.SimpleNamespace(
                next_token_logits=torch.randn(bs * NUM_DRAFT, vocab), hidden_states=None))

    runners = [Runner(i) for i in range(STEPS_EXTEND)]
    import inspect

    BOUNDARY_EVENT_RETURNED = "boundary_kv_ready_event = (" in inspect.getsource(
        mod.MultiLayerEagleDraftWorker._draft_extend_for_decode)

    def prepare(*args, **kw):  # the release's preparation: plans runner 0 only (not an idle round), marks the batch
        if not idle:
            runners[0].attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()  # pre-pad, no re-plan ("Planned pre-pad" in the release)
        return forward_batch

    class Input:  # EagleDraftInput (0.5.13) / EagleDraftExtendInput (0.5.14 on)
        def __init__(self, **kw):
            pass

        prepare_for_extend_to_fill_draft_kvcache = staticmethod(prepare)

    for name in ("EagleDraftInput", "EagleDraftExtendInput"):
        monkeypatch.setattr(mod, name, Input, raising=False)
    # 0.5.16 on: a module-level preparation, no gathered buffer (no DP attention's padding) for the logits
    monkeypatch.setattr(mod, "prepare_for_draft_extend", prepare, raising=False)
    monkeypatch.setattr(mod, "require_gathered_buffer", lambda *a, **k: False, raising=False)
    worker = object.__new__(mod.MultiLayerEagleDraftWorker)
    worker.__dict__.update(
        speculative_num_steps=STEPS_EXTEND, speculative_num_draft_tokens=NUM_DRAFT, topk=1, device="cpu",
        plan_stream=None, plan_stream_ctx=__import__("contextlib").nullcontext(), draft_runner_list=runners,
        cuda_graph_runner_for_draft_extend=None, chain_mtp_hidden_states=False, prepare_for_draft_extend=prepare,
        # 0.5.16 on: the boundary-KV window (off: no front tokens), MTP pools of a hybrid model (none here)
        draft_extend_num_front_tokens=0, server_args=None, use_rejection_sampling=False,
        # (locations, positions[, ready event]): the event is returned up to 0.5.19, recorded by the caller from 0.5.20
        _compute_boundary_kv_locs_positions=lambda batch: (None,) * (2 + BOUNDARY_EVENT_RETURNED),
        _apply_deferred_mamba_init_to_draft_pools=lambda fb: None,
        _fill_boundary_kv_front_and_update_stash=lambda *a: None)
    batch = types.SimpleNamespace(seq_lens=torch.tensor(SEQ_LENS))
    batch_result = types.SimpleNamespace(logits_output=types.SimpleNamespace(hidden_states=None),
                                         next_token_ids=torch.zeros(bs * NUM_DRAFT, dtype=torch.long),
                                         accept_lens=torch.ones(bs, dtype=torch.long))
    fn = core.build_fix(FIX)[f"{mod.__name__}.MultiLayerEagleDraftWorker._draft_extend_for_decode"] if plugin \
        else mod.MultiLayerEagleDraftWorker._draft_extend_for_decode
    with pytest.raises(Stop):
        fn(worker, batch, batch_result)
    return seen


@pytest.mark.skipif(not BUGGY, reason=f"sglang {VERSION}: not the 0.5.13 - 0.5.15.post1 draft extend")
def test_stock_eager_draft_extend_runs_unplanned_runners(monkeypatch):
    assert run_draft_extend(False, monkeypatch) == [True, False, False]


@pytest.mark.skipif(VERSION not in IDLE_PLANNED, reason=f"sglang {VERSION}: not the 0.5.16 / 0.5.17 draft extend")
def test_stock_eager_draft_extend_plans_an_idle_round(monkeypatch):
    """#33892: 0.5.16 / 0.5.17 plan every step's runner (so a busy round is planned) but also an idle round, whose
    planning raises on the empty batch."""
    assert run_draft_extend(False, monkeypatch) == [True, True, True]
    with pytest.raises(ValueError, match="empty sequence"):
        run_draft_extend(False, monkeypatch, idle=True)


@EXTEND_FIXED_HERE
def test_plugin_plans_each_runner_of_the_eager_draft_extend(monkeypatch):
    assert run_draft_extend(True, monkeypatch) == [True, True, True]


@EXTEND_FIXED_HERE
def test_plugin_plans_nothing_for_an_idle_round(monkeypatch):
    """A DP-attention rank with no requests runs the draft extend on an idle batch: nothing is planned, as in the
    preparation, instead of the planning raising on an empty batch (upstream's #33892, stock in 0.5.16 - 0.5.17)."""
    assert run_draft_extend(True, monkeypatch, idle=True) == [False, False, False]


def test_the_patched_releases_are_the_draft_and_the_extend_ranges():
    """The release table patches the draft where it is stock-buggy and the draft extend on every release from 0.5.13
    (through 0.5.17 its per-step planning / idle guard, from 0.5.18 the DP-padding re-plan alone)."""
    assert {"0.5.18", "0.5.23"} <= PADDING_ONLY
    assert set(releases.release_set(f"fix:{FIX}")) == DRAFT_BUGGY | IDLE_PLANNED | PADDING_ONLY


UPSTREAM_FROM_18 = pytest.mark.skipif(VERSION not in PADDING_ONLY,
                                      reason=f"sglang {VERSION}: #33892 is not upstream here (it is from 0.5.18)")


@UPSTREAM_FROM_18
def test_upstream_skips_an_idle_round_from_0_5_18(monkeypatch):
    """The part of the fix that is upstream from 0.5.18 (#33892), on the release's own draft extend: every busy step
    planned, nothing planned (and nothing raised) on an idle round (the plugin's side: the two test_plugin_plans_*
    tests above, which run here too)."""
    assert run_draft_extend(False, monkeypatch) == [True, True, True]
    assert run_draft_extend(False, monkeypatch, idle=True) == [False, False, False]


DP_PAD_TO = len(SEQ_LENS) + 1  # the other DP rank runs one request more


@pytest.mark.skipif(VERSION is None or VERSION in releases.release_set("up-to:0.5.12.post1"),
                    reason=f"sglang {VERSION}: the harness runs the draft extend of 0.5.13 on")
def test_stock_eager_draft_extend_plans_before_the_dp_padding(monkeypatch):
    """Stock, every release from 0.5.13 (0.5.18 … 0.5.23 included, where #33892 is upstream): step 0 runs on
    the preparation's plan, made before the padding and marked planned, so the forward does not plan again and the
    attention writes DP_PAD_TO * NUM_DRAFT K/V rows to len(SEQ_LENS) * NUM_DRAFT locations. Later steps: planned on
    0.5.16 on (the per-step plan sees the locations the previous forward padded), unplanned before."""
    seen = run_draft_extend(False, monkeypatch, dp_pad_to=DP_PAD_TO)
    assert seen == ([False, False, False] if BUGGY else [False, True, True])


@EXTEND_FIXED_HERE
def test_plugin_plans_each_step_after_the_dp_padding(monkeypatch):
    """The plugin marks each step's plan replan_equivalent: the padded forward plans again, for the padded batch."""
    assert run_draft_extend(True, monkeypatch, dp_pad_to=DP_PAD_TO) == [True, True, True]


@EXTEND_FIXED_HERE
def test_plugin_keeps_the_plan_without_dp_padding(monkeypatch):
    """No padding (no DP attention, or this rank has the most tokens): the forward keeps the step's plan, planned once."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    plans = []
    original = ForwardBatch.needs_forward_metadata_init

    def counting(self):
        need = original(self)
        plans.append(need)
        return need

    monkeypatch.setattr(ForwardBatch, "needs_forward_metadata_init", counting)
    assert run_draft_extend(True, monkeypatch, dp_pad_to=len(SEQ_LENS)) == [True, True, True]
    assert plans == [False, False, False]
