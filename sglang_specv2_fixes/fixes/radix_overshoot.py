"""Upstream #35694: the speculative overshoot past the stop is kept out of the radix cache.

A verify step commits a whole accepted run, so when a request stops inside the run (EOS, a stop token,
``max_new_tokens``) its ``output_ids`` and committed KV run past the stop point (``finished_len``). The
client gets ``output_ids_through_stop``; the radix cache was keyed on
``(origin_input_ids + output_ids)[:kv_committed_len]``. The tree then holds a suffix past the stop that no
continuation reproduces (a follow-up turn is built from what the client received). On a dense model that
is KV kept in the tree until eviction, with the overshoot as an extra leaf. The follow-up's hit length is
the same, because the tree splits at the divergence. On hybrid models upstream describes a miss of the
whole decode region: the mamba checkpoint lands past the divergence point. 0.5.22 shipped an equivalent
change: ``Req.owned_kv_len`` is ``min(kv_committed_len, len(origin_input_ids) +
len(output_ids_through_stop))`` once ``finished_len`` is set. For hybrid caches it adds a fallback to the
previous mamba checkpoint.

The patch ports that rule to each release that lacks it, with the release's own names:

* 0.5.11 … 0.5.15.post1: ``Req.pop_committed_kv_cache`` lowers ``kv_committed_len`` to that length. It is
  the first call of every cache's finish path (radix, chunk, SWA, mamba, unified, the PD offload manager).
  ``_cache_commit_len`` is called twice there: by ``pop_committed_kv_cache`` (what the cache inserts and
  frees) and by ``pop_overallocated_kv_cache`` (what ``release_kv_cache`` frees as over-allocated). Lowering
  the length once makes both calls agree, whatever the cache changed in between. A mamba cache drops
  ``mamba_pool_idx`` between the two calls (and 0.5.13+ the ping-pong buffer).
* 0.5.16 … 0.5.20: ``Req.effective_kv_committed_len``, 0.5.21: ``Req.owned_kv_len``. ``release_kv_cache``
  reads each once and passes it to the cache (``kv_len_to_handle`` / ``insert_req(up_to=)``) and to the
  over-allocated free.

The trimmed tail is freed with the over-allocated range (``release_kv_cache`` frees
``[cached length, kv_allocated_len)``). Before that the cache frees what it does not insert up to the
cached length. Every KV slot is either in the tree or free again (CPU test: the allocator's free size plus
the tree's evictable size equals the pool).

Left as stock, on purpose:

* Non-speculative decoding. It appends one token per step, so nothing runs past the stop.
  ``release_kv_cache`` asserts there that the committed length is the allocated one (up to 0.5.21).
* Hybrid (mamba) requests. Their cache inserts the mamba state the request tracked: the last checkpoint
  (extra_buffer) or the live state (no_buffer). It can lie past the stop, and a shorter key would then
  trip ``MambaRadixCache``'s ``cache_len == page_aligned_len`` assertion, or in the unified cache pair the
  key with a state that has seen the overshoot. 0.5.22's previous-checkpoint fallback (tracking
  ``mamba_prev_track_seqlen`` in the decode loop and selecting it in the cache) is not backported.
* Streaming sessions. ``StreamingSession``'s finish path already trims the request to
  ``len(origin_input_ids) + finished_len`` (``_trim_overshoot``, every release) and saves that length in
  the session slot. It never reads the value this fix changes: on 0.5.11 … 0.5.15 it pops the committed KV
  after the trim (a no-op then), and from 0.5.16 ``release_kv_cache`` returns before using it. The slot
  keeps the same boundary the fix gives non-session requests (CPU test).
* ``--strip-thinking-cache`` requests with reasoning keep caching the prompt only (that branch runs first).

Needs ``finished_len``. EOS, stop tokens and ``max_new_tokens`` set it on every release. On 0.5.11 …
0.5.13 a stop string does not (the ``multi-token-finish`` fix adds that), so those requests keep the stock
length there until that fix is applied too.

Removal: per release once it ships the rule (0.5.22: ``Req.owned_kv_len``); delete with 0.5.21.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="radix-overshoot",
    upstream=("#35694",),
    title="speculative overshoot past the stop kept out of the radix cache",
    what=(
        "Req.pop_committed_kv_cache (0.5.11 … 0.5.15.post1), Req.effective_kv_committed_len (0.5.16 … 0.5.20), "
        "Req.owned_kv_len (0.5.21): a finished speculative request's cached KV length is the prompt plus "
        "output_ids_through_stop; the accepted tokens past the stop are freed with the over-allocated range "
        "(hybrid mamba requests and non-speculative decoding unchanged)"
    ),
    why=(
        "a verify step commits the whole accepted run, so the radix tree keyed and kept the tokens past the stop "
        "that no follow-up turn reproduces: KV held by an unreachable suffix (hybrid models: the follow-up misses "
        "the decode region)"
    ),
    removal="delete when 0.5.21 leaves the supported releases (an equivalent change is upstream from 0.5.22)",
)
