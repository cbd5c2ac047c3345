"""Beyond upstream (issue #39826, closed; PR #37450, open): ``usage.reasoning_tokens`` counts only the tokens sent.

A request with a reasoning parser counts its reasoning tokens in the decode loop. The loop extends
``output_ids`` with the accepted run, calls ``_maybe_update_reasoning_tokens`` (``Req.update_reasoning_tokens``
adds the run up to the think-end marker, or the whole run while the request is still reasoning) and then
runs the finish check that sets ``finished_len``. When a run crosses an EOS / stop token or
``max_new_tokens`` while the request is still reasoning, the tokens past the stop are counted too. The
output streamer sends ``output_ids_through_stop`` and ``completion_tokens = len(that)``, but passes
``req.reasoning_tokens`` unchanged, so ``usage.reasoning_tokens`` could exceed ``usage.completion_tokens``.
Upstream reports it in #39826 (EOS, DFlash; closed upstream, with no fix in any release up to 0.5.23) and
#37450 (length, open PR). Every release from 0.5.11 to 0.5.23 counts reasoning tokens this way.

The counted reasoning tokens are always a prefix of the output: counting starts at the first output token
and stops for good at the think-end marker; 0.5.23's self-opened counting starts only when the output
opens with the think-start tokens. Their exact number among the tokens sent is therefore
``min(req.reasoning_tokens, len(output_ids_through_stop))``. The patch reports that at the one place each
release builds a request's output batch: ``SchedulerOutputProcessorMixin.stream_output_generation``
(0.5.11 / 0.5.12.x) and ``_GenerationStreamAccumulator.accept`` (0.5.13+). The streamer already has that
list there (``output_ids_``, the one ``completion_tokens`` counts). A request that has not finished is
unchanged: its count never exceeds its output. ``req.reasoning_tokens`` itself is left as counted; its only
other reader, ``--strip-thinking-cache``, asks whether it is positive, and the cap keeps that answer.

Removal: per release once upstream counts reasoning tokens through the stop (#37450 or the change that closed
#39826; in no release up to 0.5.23).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="reasoning-tokens-through-stop",
    upstream=(),
    related=("#39826", "#37450"),
    title="usage.reasoning_tokens counts only the tokens sent",
    what=(
        "SchedulerOutputProcessorMixin.stream_output_generation (0.5.11 / 0.5.12.x), "
        "_GenerationStreamAccumulator.accept (0.5.13+): the reasoning token count sent with a request is "
        "min(req.reasoning_tokens, len(output_ids_through_stop)), the reasoning tokens among the tokens sent"
    ),
    why=(
        "a verify step adds its whole accepted run to the reasoning count before the stop / length trim, so "
        "usage.reasoning_tokens could exceed usage.completion_tokens"
    ),
    removal="delete per release once upstream counts reasoning tokens through the stop (#39826 is closed, but no "
    "release up to 0.5.23 has a fix)",
)
