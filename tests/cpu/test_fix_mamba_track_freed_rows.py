"""mamba-track-freed-rows on the release's real objects: the mamba track indices of a spec-v2 verify (built by
``EagleVerifyInputV2Mixin.prepare_for_v2_verify`` on 0.5.11 / 0.5.12.x, by ``set_mamba_track_indices_from_reqs`` from
0.5.13) for three requests in request-pool rows 0, 1, 2, the middle one freed before the verify launch
(``mamba_next_track_idx`` None) and its row 1 already given to a new live request.

The ping-pong mapping holds slot ``100 + 10 * row + position``, so every slot names its owner. Stock up to 0.5.15.post1:
``TypeError`` (#27325). Stock 0.5.16 - 0.5.21: the freed request's index is slot 110, position 0 of row 1, the new
request's track slot, into which the post-verify scatter would write the freed request's state (#29449). Plugin (and
0.5.22 / 0.5.23 by themselves): -1, which the scatter skips; the live rows' slots are stock's (101 and 120).

Stand-ins: the batch and the request objects (only the fields the functions read), the request-to-token pool (the
mapping and ``req_to_token``), the global server args (``extra_buffer`` on), ``torch.tensor`` without pinned memory
(no CUDA here), and for ``prepare_for_v2_verify`` the forward batch / attention backend as in
test_fix_tbo_verify_seq_lens.py.
"""

import types

import pytest
import torch
from conftest import VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import mamba_track_freed_rows

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = mamba_track_freed_rows.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's mamba track indices")
IN_VERIFY_PREP = VERSION in ("0.5.11", "0.5.12", "0.5.12.post1")  # later: set_mamba_track_indices_from_reqs
OLD = ("0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1")
MARKS_FREED = ("0.5.22", "0.5.23")
TRACK = [1, None, 0]  # mamba_next_track_idx of the requests in rows 0, 1 (freed), 2
D = 4  # verify tokens per request


class _PinlessTorch:
    """The module's ``torch`` with ``tensor(..., pin_memory=True)`` made on plain host memory (no CUDA here)."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def tensor(*args, pin_memory=False, **kwargs):
        return torch.tensor(*args, **kwargs)


def _req(track):
    kv = types.SimpleNamespace(mamba_next_track_idx=track)  # 0.5.19 on: the request's KV record
    return types.SimpleNamespace(mamba_next_track_idx=track, kv=kv)


def _pool(bs):
    rows = torch.arange(bs, dtype=torch.int64).unsqueeze(1)
    return types.SimpleNamespace(  # slot 100 + 10 * row + position
        req_index_to_mamba_ping_pong_track_buffer_mapping=100 + 10 * rows + torch.arange(2, dtype=torch.int64),
        req_to_token=torch.arange(bs * 64).view(bs, 64))


def _via_set_mamba_track_indices(plugin, monkeypatch, track):
    from sglang.srt.managers import schedule_batch as mod

    monkeypatch.setattr(mod, "torch", _PinlessTorch())
    fn = core.build_fix(FIX)[f"{mod.__name__}.set_mamba_track_indices_from_reqs"] if plugin \
        else mod.set_mamba_track_indices_from_reqs
    batch = types.SimpleNamespace(req_to_token_pool=_pool(len(track)), req_pool_indices=torch.arange(len(track)),
                                  reqs=[_req(t) for t in track])
    fn(batch)
    return batch.mamba_track_indices


def _via_prepare_for_v2_verify(plugin, monkeypatch, track):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_info_v2 as mod
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    monkeypatch.setattr(mod, "torch", _PinlessTorch())
    monkeypatch.setattr(mod, "get_global_server_args",
                        lambda: types.SimpleNamespace(enable_mamba_extra_buffer=lambda: True))
    monkeypatch.setattr(mod.ForwardBatch, "init_new", staticmethod(lambda batch, runner: types.SimpleNamespace()))
    bs = len(track)
    spec = EagleVerifyInput(
        draft_token=torch.arange(bs * D), custom_mask=None, positions=torch.arange(bs * D),
        retrieve_index=torch.zeros(bs, D, dtype=torch.long), retrieve_next_token=torch.zeros(bs, D, dtype=torch.long),
        retrieve_next_sibling=torch.zeros(bs, D, dtype=torch.long), retrieve_cum_len=None, spec_steps=D - 1, topk=1,
        draft_token_num=D, capture_hidden_mode=None, seq_lens_sum=None, seq_lens_cpu=None)
    seq_lens = torch.tensor([5, 9, 3], dtype=torch.int64)
    batch = types.SimpleNamespace(
        forward_mode=ForwardMode.DECODE, req_pool_indices=torch.arange(bs), seq_lens=seq_lens.clone(),
        seq_lens_cpu=seq_lens, seq_lens_sum=int(seq_lens.sum()), spec_info=spec, reqs=[_req(t) for t in track],
        device="cpu", model_config=types.SimpleNamespace(vocab_size=1024))
    backend = types.SimpleNamespace(init_forward_metadata=lambda fb: None)
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
        graph_runner=None, attn_backend=backend, spec_algorithm=types.SimpleNamespace(is_standalone=lambda: False)))
    fn = core.build_fix(FIX)[f"{mod.__name__}.EagleVerifyInputV2Mixin.prepare_for_v2_verify"] if plugin \
        else mod.EagleVerifyInputV2Mixin.prepare_for_v2_verify
    fn(spec, _pool(bs), batch, worker)
    return batch.mamba_track_indices


def track_indices(plugin, monkeypatch, track=tuple(TRACK)):
    via = _via_prepare_for_v2_verify if IN_VERIFY_PREP else _via_set_mamba_track_indices
    return via(plugin, monkeypatch, list(track)).tolist()


@pytest.mark.skipif(VERSION not in OLD, reason=f"sglang {VERSION}: a None track position is guarded (0.5.16 on)")
def test_stock_verify_stops_on_a_freed_request(monkeypatch):
    with pytest.raises(TypeError):
        track_indices(False, monkeypatch)


@pytest.mark.skipif(VERSION in OLD or VERSION in MARKS_FREED,
                    reason=f"sglang {VERSION}: not the 0.5.16 - 0.5.21 guard that picks position 0")
def test_stock_freed_row_points_at_the_new_owners_slot(monkeypatch):
    assert track_indices(False, monkeypatch) == [101, 110, 120]


@FIXED_HERE
def test_plugin_skips_the_freed_row_only(monkeypatch):
    assert track_indices(True, monkeypatch) == [101, -1, 120]


@FIXED_HERE
def test_plugin_builds_live_rows_as_stock(monkeypatch):
    """With every request live the plugin's indices are stock's (no row marked)."""
    live = (1, 0, 1)
    assert track_indices(True, monkeypatch, live) == track_indices(False, monkeypatch, live) == [101, 110, 121]


@pytest.mark.skipif(VERSION not in MARKS_FREED, reason=f"sglang {VERSION}: upstream marks freed rows from 0.5.22")
def test_upstream_marks_the_freed_row(monkeypatch):
    """What the release table's upstream note says of 0.5.22 / 0.5.23, on the release's own function."""
    assert track_indices(False, monkeypatch) == [101, -1, 120]
