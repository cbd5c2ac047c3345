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
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="grammar-result-order",
    upstream=("#28986",),
    title="spec + grammar + overlap: process the pending result before the next batch is built",
    what=(
        "Scheduler.event_loop_overlap: when the release's is_disable_overlap_for_batch says the pending speculative "
        "grammar decode batch syncs on its result, that result is processed before get_next_batch_to_run (and not "
        "popped again after the launch)"
    ),
    why=(
        "requests finished by the pending result (grammar EOS, stop, length) are launched in the next verify after "
        "their request slot and KV were released (hybrid Mamba/GDN targets crash; dense targets compute and write KV "
        "for freed slots)"
    ),
    removal="delete per release once upstream #28986 (open as of 0.5.23) or an equivalent reordering lands",
)
