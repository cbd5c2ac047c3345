"""#28986 (open upstream as of 0.5.23): with spec v2, grammar and the overlap scheduler, a request that the pending
result finishes is launched in the next verify.

``Scheduler.event_loop_overlap`` builds the next batch (``get_next_batch_to_run``) before it processes the pending
result. For a speculative grammar decode step ``is_disable_overlap_for_batch`` then forces a sync:
``pop_and_process()`` runs the pending result, which finishes requests (grammar-forced EOS, stop token, length) and
releases their request slot and KV (``release_kv_cache``), and ``run_batch`` launches the verify that still holds
them. On hybrid Mamba/GDN targets that crashes (#27325 #28312 #28484: ``mamba_next_track_idx`` None); on dense
targets the verify computes and writes KV for requests whose slots are already free. Measured on a GPU with the
registered row ``test_grammar_overlap_28986.py`` (0.5.12, tiny EAGLE3, xgrammar, 64 concurrent regex requests):
stock launched 155 finished requests in 26 speculative decode launches.

The patch changes each release's own ``event_loop_overlap`` in two places. At the top of an iteration it asks the
release's own ``is_disable_overlap_for_batch`` about the pending decode batch: when that batch's next step would sync
on this result anyway, the result is processed *before* the next batch is built, so the scheduler's own filtering
drops the requests it finished; the later "process the last batch" pop is then skipped. The rule is the release's:
up to 0.5.16 every EAGLE/EAGLE3 spec-v2 grammar decode step syncs; from 0.5.17 EAGLE advances the grammar inside
verify (``supports_grammar_overlap``) and only host-draft algorithms (NGRAM) sync. Nothing changes for batches
without grammar. The only overlap given up is that of a prefill launched right after a speculative grammar decode
step (stock would overlap that result's processing with the prefill launch).

The pending batch can also be a prefill whose result finishes a grammar request: a retracted request re-prefilled up
to its grammar's end (or ``max_new_tokens`` 1). Its requests join the next speculative grammar decode, which syncs on
that result after it is built, and so launches the finished request (``tests/registered/test_hybrid_mamba_serves.py``:
tiny Qwen3-Next, forced retraction, regex requests; the probe's check mode stops at such a launch). So the release's own rule is also asked of a pending
prefill batch, as the decode step its requests join next (``syncs_as_decode``: a shallow copy with a DECODE forward
mode): up to 0.5.16 that says yes for every speculative grammar prefill, from 0.5.17 only where
``ScheduleBatch.grammar_needs_sync()`` does (host-draft algorithms). One patch text can then serve 0.5.16 and 0.5.17
alike, whose loops are the same function. A prefill right after such a prefill then loses its overlap. CPU:
tests/cpu/test_issue_28986_overlap_grammar.py ``test_a_prefill_result_that_finishes_a_grammar_request``.

The PD-disaggregation decode loop (``SchedulerDisaggregationDecodeMixin.event_loop_overlap_disagg_decode``) gets the
same two changes in every patch file. From 0.5.14 it has the same get-batch / sync / launch order as
``event_loop_overlap`` (upstream #28039) and so the same #28986 hazard. Up to 0.5.13 it never asks
``is_disable_overlap_for_batch`` at all (#28039, fixed upstream in 0.5.14): the pending result is processed only
after the next verify was launched, so that verify builds its vocab mask from a grammar that has not accepted the
previous step's tokens (grammar-illegal tokens, ``Tokens not accepted`` aborts; with DP attention one rank aborts
and the others hang in the next collective). There the patch adds 0.5.14's sync together with the result-first
order.
"""

from __future__ import annotations

import copy

from ..catalog import Fix

FIX = Fix(
    name="grammar-result-order",
    upstream=("#28986", "#28039"),
    title="spec + grammar + overlap: process the pending result before the next batch is built",
    what=(
        "Scheduler.event_loop_overlap: when the release's is_disable_overlap_for_batch says the pending speculative "
        "grammar decode batch syncs on its result, that result is processed before get_next_batch_to_run (and not "
        "popped again after the launch), and so is a prefill's result where the release's rule says the decode step "
        "its requests join syncs; the same in the PD decode loop (event_loop_overlap_disagg_decode), which up to 0.5.13 also gets "
        "0.5.14's missing grammar sync (#28039)"
    ),
    why=(
        "requests finished by the pending result (grammar EOS, stop, length) are launched in the next verify after "
        "their request slot and KV were released (hybrid Mamba/GDN targets crash; dense targets compute and write KV "
        "for freed slots); in PD decode up to 0.5.13 the verify's vocab mask comes from a grammar that has not "
        "accepted the previous step (grammar-illegal tokens, 'Tokens not accepted' aborts, a DP-attention hang)"
    ),
    removal=(
        "delete per release once upstream #28986 (open as of 0.5.23) or an equivalent reordering lands in both "
        "loops (the PD loop's sync alone, #28039, is upstream from 0.5.14)"
    ),
)


def syncs_as_decode(scheduler, batch, **kwargs) -> bool:
    """Whether the speculative decode step that the requests of the prefill ``batch`` join next syncs on its result:
    the release's own ``Scheduler.is_disable_overlap_for_batch`` (``kwargs``: its ``last_batch=`` from 0.5.16) asked of
    ``batch`` as a decode step (a shallow copy with ``forward_mode`` DECODE; nothing of ``batch`` changes). Up to 0.5.16
    that is every speculative grammar batch, from 0.5.17 what ``ScheduleBatch.grammar_needs_sync()`` says (host-draft
    algorithms): one rule, the release's, on every release the patch files serve."""
    view = copy.copy(batch)
    view.forward_mode = type(batch.forward_mode).DECODE
    return bool(scheduler.is_disable_overlap_for_batch(view, **kwargs))

