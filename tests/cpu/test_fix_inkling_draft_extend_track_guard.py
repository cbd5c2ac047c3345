"""inkling-draft-extend-track-guard on the release's real ``ShortConvolution._update_sconv_cache_for_draft_extend``:
three requests whose accepted ranges each cross a mamba track interval (interval 8, 4 draft tokens, 3 accepted from
prefix lengths 6, 7, 14), the middle one freed before the verify (track index -1, as 0.5.22 and
mamba-track-freed-rows mark it). The fused kernel's call is recorded instead of run (it needs CUDA); it writes the
window of each row with ``crossed`` set at ``sconv_cache[track_index]``, unchecked.

Stock: ``crossed`` is set for the freed row, so the kernel is asked to write at slot -1. Plugin: that row is not
tracked; the live rows' ``crossed`` / ``track_step`` / indices are stock's.

Stand-ins: the forward batch (the fields the method reads), the server / executor settings (``extra_buffer`` on,
interval 8), the conv-state metadata of 0.5.22+ (``track_cache_indices``), the kernel.
"""

import types

import pytest
import torch
from conftest import requires_sglang, where_patched

from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import inkling_draft_extend_track_guard

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = inkling_draft_extend_track_guard.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's Inkling draft extend")
TARGET = "sglang.srt.models.inkling_common.sconv.ShortConvolution._update_sconv_cache_for_draft_extend"
INTERVAL, D = 8, 4
PREFIX, ACCEPTED = [6, 7, 14], 3  # every row crosses a multiple of 8
TRACK = [101, -1, 120]  # row 1: freed before the verify


def kernel_call(plugin, monkeypatch):
    """The arguments the release's (or the plugin's) draft extend passes to fused_draft_extend_sconv_cache."""
    from sglang.srt.models.inkling_common import sconv as mod

    calls = []
    monkeypatch.setattr(mod, "fused_draft_extend_sconv_cache", lambda **kw: calls.append(kw))
    settings = types.SimpleNamespace(enable_mamba_extra_buffer=True, mamba_track_interval=INTERVAL)
    for name, value in (  # whichever the release reads the settings through
            ("get_server_args", lambda: types.SimpleNamespace(enable_mamba_extra_buffer=lambda: True,
                                                              mamba_track_interval=INTERVAL)),
            ("get_exec", lambda: types.SimpleNamespace(mamba=settings)),
            ("mamba_extra_buffer_enabled", lambda: True)):
        if hasattr(mod, name):
            monkeypatch.setattr(mod, name, value)
    bs, track = len(PREFIX), torch.tensor(TRACK, dtype=torch.int64)
    fb = types.SimpleNamespace(
        batch_size=bs, seq_lens=torch.tensor(PREFIX) + D, mamba_track_indices=track,
        spec_info=types.SimpleNamespace(num_accept_tokens=torch.full((bs,), ACCEPTED)))
    me = types.SimpleNamespace(_conv_state=lambda fb: types.SimpleNamespace(track_cache_indices=track))  # 0.5.22+
    fn = core.build_fix(FIX)[TARGET] if plugin else mod.ShortConvolution._update_sconv_cache_for_draft_extend
    fn(me, fb, torch.zeros(8, 2, 4), torch.arange(bs), torch.zeros(bs * D, 2))
    assert len(calls) == 1 and calls[0]["do_tracking"] is True
    return calls[0]


@FIXED_HERE
def test_stock_asks_the_kernel_to_write_at_slot_minus_one(monkeypatch):
    call = kernel_call(False, monkeypatch)
    assert call["crossed"].tolist() == [True, True, True] and call["mamba_track_indices"].tolist() == TRACK


@FIXED_HERE
def test_plugin_leaves_the_freed_row_untracked(monkeypatch):
    stock, ours = kernel_call(False, monkeypatch), kernel_call(True, monkeypatch)
    assert ours["crossed"].tolist() == [True, False, True]
    assert ours["track_step"].tolist() == stock["track_step"].tolist()
    assert ours["mamba_track_indices"].tolist() == TRACK
