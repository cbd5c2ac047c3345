"""The spec-v2 draft-extend CUDA graph publishes the overlap scheduler's WAR read-done event after its replay, not
before it (0.5.14 - 0.5.21; upstream's per-backend form, ``SharedReadEnds``, from 0.5.22; #37988 / #37936).

From 0.5.14 the overlap scheduler's write-after-read barrier (``Scheduler._apply_war_barrier``) waits on an event the
forward publishes once it is done reading the buffers the scheduler writes for the next batch (``req_to_token`` rows,
the hybrid-SWA pool's full-to-SWA index mapping), and on the whole forward stream only where none was published. For
spec v2 the last publisher is the draft extend's graph runner: ``EAGLEDraftExtendCudaGraphRunner.execute`` builds its
metadata out of the graph (``init_forward_metadata_out_graph``), records the event (``device_module.Event()``,
``record()``, into ``model_runner.war_fastpath_read_done_event``; ``shared_read_done_event`` from 0.5.18) and only
then replays the graph. That is right only where nothing inside the captured graph reads those buffers again; a backend
whose in-graph metadata re-reads them (trtllm_mha's in-graph page-table gather, DSV4's full-to-SWA translation; upstream
#36335, #31270, #31686) races the next schedule's writes: a request slot or KV slot freed and handed out again can be
rewritten while the graph still gathers it. 0.5.22 makes each backend declare where its shared reads end
(``AttentionBackend.shared_read_ends``: PRE_REPLAY / IN_REPLAY / POST_REPLAY, UNKNOWN by default for the draft extend,
which publishes nothing, so the scheduler falls back to the whole forward), and the runner publishes after the replay
for IN_REPLAY / POST_REPLAY ("a later event is safe; an event before replay cannot cover metadata reads inside the
graph").

The patch moves the release's three statements (event, ``record()``, the attribute the scheduler reads) to right after
``_replay_graph``: 0.5.22's POST_REPLAY for every backend, which is safe for all of them (the barrier only needs the
event not to come before the reads end). No backend audit is ported: that would be a ``shared_read_ends`` per backend.
No release in this range moves the event per backend (``draft_extend_metadata_captured_in_graph``, from 0.5.16, decides
where fa3's metadata lives, not where the event is published), so the move is the same on every code line. The decode
graph runner and the prefill paths (the non-speculative publishers) are left as they are.

Cost: the schedule stream's writes for the next batch wait for the end of the draft-extend graph instead of its start
(only those writes; the scheduler thread itself does not wait). At real size (bench/serving.py, the fix on and off,
chain and tree) TPOT is unchanged and output throughput moves within a few percent, through TTFT; so the fix is applied
by default, and ``auto,-draft-extend-read-done-order`` leaves it out. 0.5.22 itself publishes no event for the draft
extend on triton, flashinfer, fa3 or trtllm_mha (the base class's SharedReadEnds.UNKNOWN): its scheduler waits for the
whole forward, which ends no earlier than this event.

Proof: CPU only (tests/cpu/test_fix_draft_extend_read_done_order.py: each release's real ``execute`` records the event
before the graph replay stock and after it patched, and the release's real ``_apply_war_barrier`` waits on that event).
No GPU row: the race needs a backend that reads the shared buffers inside the draft-extend graph, which the lent GPUs
cannot run (trtllm_mha is Blackwell-only; no tiny DSV4 model exists here).

Removal: delete when 0.5.21 leaves the supported releases (upstream from 0.5.22).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="draft-extend-read-done-order",
    upstream=("#37988", "#37936"),
    title="the draft-extend graph's WAR read-done event after its replay",
    what=(
        "EAGLEDraftExtendCudaGraphRunner.execute records the read-done event the overlap scheduler's WAR barrier "
        "waits on after _replay_graph instead of before it (0.5.22's POST_REPLAY, for every backend); on by default: "
        "the schedule stream's next writes wait for the graph's end, which leaves TPOT unchanged at real size"
    ),
    why=(
        "the event is published once the out-of-graph metadata is built, before the replay: on a backend that reads "
        "req_to_token / the SWA mapping inside the graph, the next batch's writes race those reads"
    ),
    removal="delete when 0.5.21 leaves the supported releases (upstream from 0.5.22)",
    # on_import: the runner's module comes with the draft worker (a scheduler), not with the launcher
    on_import=True,
)
