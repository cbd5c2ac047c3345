"""The overlap scheduler's write-after-read barrier (upstream #26380, CUDA-only by #26646; in 0.5.13) at the place
#31687 gives it in 0.5.16, right after each launch: the schedule stream's writes wait for the forward just launched
(0.5.11 - 0.5.15.post1).

With the overlap scheduler the scheduler thread builds batch N+1 on ``schedule_stream`` while batch N's forward, launched
on ``forward_stream``, still runs. ``run_batch`` orders the forward after the schedule stream
(``forward_stream.wait_stream(schedule_stream)``: read after write), but nothing orders the schedule stream after the
forward: the writes that building N+1 issues to buffers N's forward reads can land before those reads. They are the
``req_to_token`` rows and, on hybrid-SWA pools, ``full_to_swa_index_mapping``: allocation (``prepare_for_extend``,
the spec-v2 decode preparation ``EagleDraftInputV2Mixin.prepare_for_decode`` with ``alloc_token_slots`` and
``assign_req_to_token_pool_func``), SWA eviction (``ScheduleBatch.maybe_evict_swa``), retraction and the frees of
aborted / timed-out requests. A request slot or KV slot freed by the previous result and handed out again here can be
rewritten while the in-flight forward (which, under overlap, may still hold the freed request) reads it. Upstream saw
it as flaky accuracy (DeepSeek-V4 PD disaggregation, gsm8k ~0.87); hybrid-SWA targets (gpt-oss + EAGLE3, DSv4) are the
exposed ones.

Where. 0.5.13 puts ``schedule_stream.wait_stream(forward_stream)`` at the top of each overlap loop, right before the
next batch is built (``event_loop_overlap``, ``event_loop_overlap_disagg_prefill``, ``event_loop_overlap_disagg_decode``),
behind ``_war_barrier_enabled = is_cuda()`` (#26646: on HIP it hung and cost throughput); 0.5.14 makes it
``_apply_war_barrier`` (#28363: the forward's read-done event where one was published, else the whole forward stream).
That leaves a gap (#31687): each loop launches batch N and only then processes batch N-1's result (radix insert,
recovery writes and frees of ``req_to_token`` rows and ``full_to_swa_index_mapping``), on the schedule stream, unordered
against N's reads (wrong KV, illegal memory access on hybrid SWA). 0.5.16 issues the barrier right after ``run_batch``
instead (and no longer at the loop top): the result processing and the next iteration's writes both come after it.
The patch does the same in the three loops: on 0.5.11 / 0.5.12.x (no barrier upstream) through ``war_barrier`` below,
which keeps upstream's rule (only for a scheduler running an overlap loop, ``enable_overlap``, on CUDA; pipeline
parallelism, MLX and the normal loops have it False) with the default below; on 0.5.13 - 0.5.15.post1 it moves the
release's own barrier (``_war_barrier_enabled`` / ``_apply_war_barrier``, the release's gate) from the loop top to
there. ``event_loop_overlap`` and the PD decode loop are grammar-result-order's targets too: the patch files compose
with its (``compose:``); that fix's early ``pop_and_process`` at the loop top then comes after the previous
iteration's barrier as well.

Cost. The barrier itself is asynchronous, but it ties the schedule stream to the whole previous forward, so every
blocking host sync the scheduler issues on that stream afterwards waits for that forward to end. 0.5.13 made those
non-blocking so the barrier costs nothing (#26380: "no measurable throughput change"; #26376, the barrier alone, cost
~4 % forward occupancy): the spec-v2 decode preparation's H2D copies of the KV lengths became
``.to(device, non_blocking=True)``, and the ``seq_lens`` D2H moved to a private stream gated on the verify's publish
event (``FutureMap.resolve_seq_lens_cpu``, after #25879 had removed the ``verify_done`` host waits). 0.5.11 / 0.5.12.x
still run ``prepare_for_decode`` with blocking ``cur/nxt_kv_lens_cpu.to(device)`` copies and ``batch.seq_lens.cpu()``
on the schedule stream: with the barrier the scheduler thread waits there for the previous forward's draft extend
(stock waits only for its verify, through ``maybe_wait_verify_done``), which it otherwise overlaps. That move is not
part of this fix (``prepare_for_decode`` is another fix's target); deselecting this fix turns the barrier off per
server (``--specv2-fixes`` / ``SGLANG_SPECV2_FIXES`` with every other name), which is how its cost is measured.

Default: hybrid-SWA pools only. At real size (bench/real_size.py: an 8B-shaped Llama + EAGLE3 chain,
``SGLANG_SIMULATE_ACC_LEN=3``, the same KV pool, alternating pairs) the barrier on every overlap scheduler costs a
chain a few percent of its output throughput at low and medium concurrency, and a non-speculative server less: the
blocking host syncs above, which this fix does not move.
That was the barrier at the loop top (the next batch waits for the forward launched before it, as here); after the
launch it also orders the previous result's processing behind the forward just launched, so a blocking host sync there
on the schedule stream waits for that forward too: its cost at this place is not measured.
Read from 0.5.11's loop (not shown on a GPU): where a request's ``req_to_token`` row is reused, the in-flight forward
reading it holds a request that already finished (its output is dropped), and new slots are written past what it reads; the exposed write is the
hybrid-SWA pool's index mapping (SWA eviction frees window slots the in-flight forward may still map), where upstream
saw the race. So the barrier is on by default where the scheduler has a hybrid-SWA pool (``is_hybrid_swa``: gpt-oss,
MiMo-V2, ...) and on every overlap scheduler with ``SGLANG_SPECV2_FIXES_WAR_BARRIER=all`` (upstream's rule);
``--specv2-fixes auto,-overlap-war-barrier`` removes it.

Not backported: 0.5.14's fine-grained read-done events (#28363) on 0.5.11 - 0.5.13.post1 (the barrier there waits
for the whole forward stream).

Removal: delete when 0.5.15.post1 and the releases before it leave the supported releases (upstream from 0.5.16).
"""

from __future__ import annotations

from ..catalog import Fix, switch

FIX = Fix(
    name="overlap-war-barrier",
    upstream=("#26380", "#26646", "#31687"),
    title="overlap scheduler: the schedule stream's writes wait for the forward just launched",
    what=(
        "event_loop_overlap, event_loop_overlap_disagg_prefill and event_loop_overlap_disagg_decode issue "
        "schedule_stream.wait_stream(forward_stream) right after run_batch launches a batch, where 0.5.16 has it "
        "(#31687): on 0.5.11 / 0.5.12.x through war_barrier (an overlap loop on CUDA; by default for hybrid-SWA pools "
        "only, SGLANG_SPECV2_FIXES_WAR_BARRIER=all: every overlap scheduler, which costs a chain's throughput), "
        "on 0.5.13 - 0.5.15.post1 the release's own barrier moved there from the loop top"
    ),
    why=(
        "with the overlap scheduler, processing the previous batch's result (radix insert, frees) and building the "
        "next batch write req_to_token rows and the SWA index mapping on the schedule stream while the forward just "
        "launched may still read them: a write-after-read race (flaky accuracy, wrong KV, illegal memory access on "
        "hybrid-SWA targets such as gpt-oss + EAGLE3, DSv4); a barrier at the loop top (0.5.13 - 0.5.15.post1) "
        "leaves the result processing after the launch unordered"
    ),
    removal="delete when 0.5.15.post1 and the releases before it leave the supported releases (upstream from 0.5.16)",
    # not on_import: the targets live in sglang.srt.managers.scheduler and the disaggregation modules it imports,
    # which grammar-result-order and live-accept-metrics load here anyway
    switches=(switch("SGLANG_SPECV2_FIXES_WAR_BARRIER", "hybrid-SWA pools only",
                     "=all: the barrier on every overlap scheduler, as upstream 0.5.13"),),
)

_CUDA = None  # sglang.srt.utils.is_cuda(), read once per process


def on_cuda() -> bool:
    """Upstream's gate (#26646): ``is_cuda()`` (CUDA torch with a GPU; HIP, NPU and CPU keep no barrier)."""
    global _CUDA
    if _CUDA is None:
        from sglang.srt.utils import is_cuda

        _CUDA = bool(is_cuda())
    return _CUDA


def war_barrier(scheduler) -> None:
    """0.5.16's post-launch barrier (0.5.11 / 0.5.12.x): the schedule stream waits for everything launched on the
    forward stream so far (the forward just launched), so the result processing and the writes that build the next
    batch come after its reads. Only in an overlap loop on CUDA
    (``enable_overlap`` is False for the normal, pipeline-parallel and MLX loops, where schedule and forward share a
    stream or none exists), and by default only for a hybrid-SWA pool (``is_hybrid_swa``; see "Default" above):
    ``SGLANG_SPECV2_FIXES_WAR_BARRIER=all`` applies upstream's rule, every overlap scheduler."""
    if scheduler.enable_overlap and on_cuda() and (getattr(scheduler, "is_hybrid_swa", False) or everywhere()):
        scheduler.schedule_stream.wait_stream(scheduler.forward_stream)


def everywhere() -> bool:
    """``SGLANG_SPECV2_FIXES_WAR_BARRIER=all``: the barrier for every overlap scheduler, as upstream 0.5.13 has it.
    Read once per process (``war_barrier`` runs every scheduler iteration)."""
    global _EVERYWHERE
    if _EVERYWHERE is None:
        import os

        _EVERYWHERE = os.environ.get(ENV, "").strip().lower() == "all"
    return _EVERYWHERE


ENV = "SGLANG_SPECV2_FIXES_WAR_BARRIER"
_EVERYWHERE = None
