"""Beyond upstream (open upstream: #33643's report; #22049 called the per-step feed "relaxed"): spec v2 counts
``min_tokens`` in verify steps, not tokens, and masks every draft position of a step alike (every release).

SGLang's ``BatchedMinNewTokensPenalizer`` keeps one counter per request that ``cumulate_output_tokens`` raises by 1 per
call, and masks the request's stop tokens (EOS, ``stop_token_ids``, the tokenizer's extra stop ids) while the counter
is below ``min_new_tokens``. Without speculation it is called once per token. The spec-v2 decode preparation
(``EagleDraftInputV2Mixin.prepare_for_decode`` up to 0.5.14, ``eagle_utils.eagle_prepare_for_decode`` from 0.5.15)
calls it once per verify step, and the verify adds that one mask to every draft position
(``acc_additive_penalties`` repeated ``draft_token_num`` times). With a mean accept length L, EOS and the stop tokens
stay masked for about L x min_tokens tokens: a request asking for at least 16 tokens gets about 50 at L = 3, and a
greedy speculative server returns other text than the target alone would.

The fix computes the answer per draft position, on the device, from what the verify already has: the token a draft
position predicts has output index ``positions[j] - len(origin_input_ids) + 1`` (``positions`` = the KV length before
the step plus the position's depth in the draft tree, the verify's own position ids), so its stop tokens are masked
exactly while ``positions[j] < min_new_tokens + len(origin_input_ids) - 1``. That is the rule decoding without
speculation applies to each token, so greedy output equals the target served alone, chains and trees alike, under the
overlap scheduler too (the device's positions are never a step late, unlike the host's ``output_ids``).

Three code lines per release, one mechanism:

* the spec-v2 decode feed (scheduler side, right after the release's own ``cumulate``): :func:`after_feed` builds each
  request's last masked position (host ints, one small copy, only while some request of the batch has
  ``min_tokens``) and holds the penalizer's step counter at ``min_new_tokens``, so the per-step mask in
  ``acc_additive_penalties`` no longer masks the whole step (the prefill's sampling, output index 0, keeps it:
  the counter is 0 there, which is exact);
* ``SamplingBatchInfo.copy_for_forward``: the copy the forward gets carries that gate for one step (:func:`carry`);
* the verify's sampling (``EagleVerifyInputV2Mixin.sample`` up to 0.5.13.post1, ``eagle_utils.eagle_sample`` from
  0.5.14), after the release's penalties and before the grammar mask: :func:`gate_stop_tokens` masks the stop tokens
  at the positions below the gate (no host sync: a compare and a ``masked_fill_``).

Requests without ``min_tokens`` cost nothing: the penalizer is not prepared, no gate is built. The other penalties
(frequency, presence, repetition) stay per step, as upstream: known bug ``spec-penalties-per-step``.

GPU row: tests/registered/test_min_tokens_per_position.py (240 greedy cases with min_tokens and stop tokens against the
target served alone, chain and tree): stock fails test 2 (every case equals decoding without speculation), the
plugin passes. On by default.
Start cost: three more targets to build per process (bench/import_overhead.py).
"""

from __future__ import annotations

import logging

from ..catalog import Fix

logger = logging.getLogger("sglang_specv2_fixes")

FIX = Fix(
    name="min-tokens-per-position",
    upstream=(),
    related=("#33643", "#22049"),
    title="min_tokens counted per draft position, not per verify step",
    what=(
        "the spec-v2 decode feed (EagleDraftInputV2Mixin.prepare_for_decode up to 0.5.14, "
        "eagle_utils.eagle_prepare_for_decode from 0.5.15) hands the verify each request's last masked position "
        "(min_new_tokens + prompt length - 1) and holds the per-step counter at min_new_tokens; "
        "SamplingBatchInfo.copy_for_forward carries that gate to the forward; the verify's sampling "
        "(EagleVerifyInputV2Mixin.sample / eagle_sample) masks the stop tokens at the draft positions whose "
        "position id is below it"
    ),
    why=(
        "spec v2 counts min_tokens in verify steps: EOS and the stop tokens stay masked for about (mean accept length) "
        "x min_tokens tokens, every draft position of a step alike, so the output is longer than asked and differs "
        "from the target served without speculation"
    ),
    removal="delete when upstream checks min_new_tokens per draft position in the spec-v2 verify (open: #33643)",
)

_GATE = "specv2_min_tokens"  # instance attribute of SamplingBatchInfo: (last masked position [bs], stop penalties)
_warned = []


def after_feed(batch) -> None:
    """At the spec-v2 decode feed, after the release's own ``cumulate``: the gate for this step's verify, and the
    per-step counter held at ``min_new_tokens`` (its mask would otherwise cover every draft position of the step)."""
    import torch
    from sglang.srt.sampling.penaltylib import BatchedMinNewTokensPenalizer

    info = batch.sampling_info
    penalizer = info.penalizer_orchestrator.penalizers.get(BatchedMinNewTokensPenalizer)
    if penalizer is None or not penalizer.is_prepared():
        info.__dict__.pop(_GATE, None)
        return
    device = penalizer.min_new_tokens.device
    last = torch.tensor([r.sampling_params.min_new_tokens + len(r.origin_input_ids) - 1 for r in batch.reqs],
                        dtype=torch.int64, pin_memory=device.type == "cuda").to(device, non_blocking=True)
    penalizer.len_output_tokens.copy_(penalizer.min_new_tokens)
    info.__dict__[_GATE] = (last, penalizer.stop_token_penalties)


def carry(source, copy):
    """``SamplingBatchInfo.copy_for_forward``'s result, with the gate :func:`after_feed` left on ``source`` (taken
    off it: it holds for the one forward launched after the feed)."""
    gate = source.__dict__.pop(_GATE, None)
    if gate is not None:
        copy.__dict__[_GATE] = gate
    return copy


def gate_stop_tokens(sampling_info, verify_input, logits) -> None:
    """In the verify's sampling: mask the stop tokens at each draft position whose position id
    (``verify_input.positions``) is below the request's gate (``logits``: ``[bs * draft_token_num, vocab]``, in place).
    No gate (no request with min_tokens, or no feed before this forward): nothing, not even a read of the verify
    input."""
    gate = sampling_info.__dict__.get(_GATE)
    if gate is None:
        return
    import torch

    positions = getattr(verify_input, "positions", None)
    draft_token_num = getattr(verify_input, "draft_token_num", 0)
    last, stop_penalties = gate
    bs = last.shape[0]
    rows = bs * draft_token_num
    if positions is None or positions.numel() < rows or logits.shape[0] != rows \
            or stop_penalties.shape != (bs, logits.shape[1]):
        if not _warned:
            _warned.append(True)
            logger.warning("specv2-fixes min-tokens-per-position: verify shapes differ from the gate's (logits %s, "
                           "positions %s, gate %s): min_tokens is not applied to this step",
                           tuple(logits.shape), None if positions is None else tuple(positions.shape),
                           tuple(stop_penalties.shape))
        return
    masked = positions[:rows].view(bs, draft_token_num) < last.unsqueeze(1)
    stop = torch.isneginf(stop_penalties)
    logits.masked_fill_((masked.unsqueeze(-1) & stop.unsqueeze(1)).view(rows, -1), float("-inf"))
