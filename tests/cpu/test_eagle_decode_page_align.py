"""Known bug eagle-decode-page-align (#31616, survey K): does spec v2's unaligned EAGLE decode allocation leak KV
pages at page_size > 1? Reproduction attempt on each release's real objects; outcome: NOT reproduced.

Upstream (#31616, in 0.5.16) rounds ``nxt = kv_committed_len + 2 * alloc_len`` up to the page, calling the unaligned
``kv_allocated_len`` of 0.5.11 - 0.5.15.post1 "a stranded-tail KV leak". This test runs the release's own decode
allocation (``EagleDraftInputV2Mixin.prepare_for_decode`` up to 0.5.14, ``eagle_utils.eagle_prepare_for_decode``
from 0.5.15) on a real ``PagedTokenToKVPoolAllocator`` / ``MHATokenToKVPool`` / ``ReqToTokenPool`` on CPU at page
16 and 64, behind the release's ``RadixCache`` (EAGLE bigram keys) or ``ChunkCache`` (radix cache off), for a few
requests of mixed lengths over several decode rounds with mixed accept lengths and the overlap scheduler's one-round
lag of ``kv_committed_len``; then one request is retracted mid-run (``release_kv_cache(is_insert=False)`` +
``reset_for_retract``, what ``ScheduleBatch.release_req`` does), the rest decode on, one is aborted and the others
finish (``release_kv_cache``). Only GPU kernels are replaced: by the release's own torch versions
(``alloc_extend_naive`` for ``alloc_extend_kernel``, ``get_last_loc_torch`` for ``get_last_loc_triton``) and a torch
copy of ``assign_req_to_token_pool`` (row[start:end] = the request's slice of out_cache_loc); the verify itself is
its effect on the counters (committed += accepted).

After every round and at the end, the whole pool is partitioned into pages: free (the allocator's free list), held
by a live request (pages of its ``req_to_token[:kv_allocated_len]``), or in the radix tree; no page twice, none
missing. A stranded tail (a page allocated but referenced by no row) or a double free would break that.

Findings (recorded in ``known_bugs`` entry ``eagle-decode-page-align``): the unaligned
allocation is real on 0.5.11 - 0.5.15.post1 (asserted: some ``kv_allocated_len % page_size != 0``), yet the pages
balance: the allocator hands out and frees whole pages (``free`` frees ``unique(index // page_size)``), the next
round's ``alloc_extend`` fills the unrecorded tail from ``last_loc + 1`` before taking a new page, and
``release_kv_cache`` frees ``[ceil_align(committed), kv_allocated_len)``, which names every page past the committed
one (that one the cache frees with the committed tail). 0.5.16 is the control (aligned, balanced too).
"""

import inspect
from types import SimpleNamespace

import pytest
import torch
from conftest import LINE, requires_sglang

from sglang_specv2_fixes import releases
from sglang_specv2_fixes.testing import scenarios
from sglang_specv2_fixes.testing.scenarios import kv_len, set_kv, token_ids

_AT = list(releases.RELEASES).index(releases.RELEASES[LINE].version) if LINE is not None else -1
# the releases of the question (0.5.11 - 0.5.15.post1) and 0.5.16, the page-aligned control; later releases move the
# objects this test drives (0.5.20+: no mem_cache.chunk_cache, the allocation helpers' returns) and align as 0.5.16
pytestmark = [requires_sglang, pytest.mark.release_scoped,
              pytest.mark.skipif(_AT > list(releases.RELEASES).index("0.5.16"),
                                 reason="page-aligned upstream from 0.5.16 (the control); the question is 0.5.11 - "
                                        "0.5.15.post1")]

ALIGNED_UPSTREAM = LINE is not None and _AT >= list(releases.RELEASES).index("0.5.16")
POOL_PAGES = 48
ROW = 1024
PROMPTS = (37, 16, 50, 63)  # prompt lengths: mid-page, page-aligned (16), crossing a page, one short of 64
ACCEPTS = ((1, 4, 2, 3), (4, 4, 1, 2), (2, 1, 4, 4), (3, 2, 2, 1))  # accepted tokens per request, cycled per round
SPEC = dict(speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
            speculative_num_draft_tokens=4, attention_backend="torch_native")


# ------------------------------------------------------------------------------ the release's objects
def prepare_for_decode():
    """The release's spec-v2 EAGLE decode allocation: fn(batch)."""
    try:
        from sglang.srt.speculative.eagle_utils import eagle_prepare_for_decode  # 0.5.15+

        return eagle_prepare_for_decode
    except ImportError:
        from sglang.srt.speculative.eagle_info_v2 import EagleDraftInputV2Mixin

        return lambda batch: EagleDraftInputV2Mixin.prepare_for_decode(None, batch)


def _cpu_kernels(monkeypatch):
    """The two Triton launches of the allocation path, on CPU: the allocator's own torch reference and a copy."""
    import sglang.srt.mem_cache.allocator as alloc_pkg

    paged = inspect.getmodule(alloc_pkg.PagedTokenToKVPoolAllocator)

    class _Extend:
        def __getitem__(self, grid):
            def run(prefix_lens, seq_lens, last_loc, free_pages, out_indices, _pow2, page_size):
                paged.alloc_extend_naive(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, "cpu")
            return run

    monkeypatch.setattr(paged, "alloc_extend_kernel", _Extend())

    try:
        from sglang.srt.speculative.spec_utils import assign_req_to_token_pool_func
    except ImportError:
        from sglang.srt.mem_cache.allocation import assign_req_to_token_pool_func
    owner = inspect.getmodule(assign_req_to_token_pool_func)

    class _Assign:
        def __getitem__(self, grid):
            def run(req_pool_indices, req_to_token, start, end, out_cache_loc, *_):
                off = 0
                for i in range(len(req_pool_indices)):
                    s, e = int(start[i]), int(end[i])
                    req_to_token[int(req_pool_indices[i]), s:e] = out_cache_loc[off:off + e - s].to(req_to_token.dtype)
                    off += e - s
            return run

    monkeypatch.setattr(owner, "assign_req_to_token_pool", _Assign())

    # get_last_loc: the release's own torch implementation (0.5.15 picks the kernel by its flags, not server args)
    import importlib

    for name in ("sglang.srt.mem_cache.common", "sglang.srt.mem_cache.allocation"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "get_last_loc_triton") and hasattr(mod, "get_last_loc_torch"):
            monkeypatch.setattr(mod, "get_last_loc_triton", mod.get_last_loc_torch)


def build(kind, page):
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    size = POOL_PAGES * page
    kv = MHATokenToKVPool(size=size, page_size=page, dtype=torch.float32, head_num=1, head_dim=4, layer_num=1,
                          device="cpu", enable_memory_saver=False)
    rtp = ReqToTokenPool(size=8, max_context_len=ROW, device="cpu", enable_memory_saver=False)
    alloc = PagedTokenToKVPoolAllocator(size, page, torch.float32, "cpu", kv, need_sort=False)
    params = CacheInitParams(disable=False, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, page_size=page,
                             is_eagle=True)
    if kind == "radix":
        from sglang.srt.mem_cache.radix_cache import RadixCache

        cache = RadixCache(params)
    else:
        from sglang.srt.mem_cache.chunk_cache import ChunkCache

        cache = ChunkCache(params)
    return alloc, cache


def admit(cache, alloc, rid, n, page):
    """A request after its prefill: prompt of ``n`` tokens in ceil(n / page) fresh pages (what alloc_extend from
    prefix 0 hands out), committed = allocated = n."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=512)
    sp.normalize(None)
    req = Req(rid, "", token_ids([100 + (7 * i + n) % 800 for i in range(n)]), sp, vocab_size=1000)
    req.init_next_round_input(cache)
    if hasattr(req, "lock") and hasattr(cache, "lock"):  # 0.5.22+
        req.lock = cache.lock(req.last_node)
    elif hasattr(req, "lock_receipt"):
        req.lock_receipt = cache.inc_lock_ref(req.last_node).to_dec_params()
    else:
        cache.inc_lock_ref(req.last_node)
    cache.req_to_token_pool.alloc([req])
    slots = alloc.alloc(-(-n // page) * page)
    assert slots is not None
    cache.req_to_token_pool.req_to_token[kv_len(req, "req_pool_idx"), :n] = slots[:n].to(torch.int32)
    set_kv(req, n, n)
    return req


def batch_of(reqs, cache, alloc):
    rtp = cache.req_to_token_pool
    idx = torch.tensor([kv_len(r, "req_pool_idx") for r in reqs], dtype=torch.int64)
    return SimpleNamespace(
        reqs=reqs, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, tree_cache=cache, req_pool_indices=idx,
        device="cpu", seq_lens=torch.tensor([kv_len(r, "kv_committed_len") + 1 for r in reqs], dtype=torch.int64),
        sampling_info=SimpleNamespace(penalizer_orchestrator=SimpleNamespace(is_required=False)),
        maybe_evict_swa=lambda: None, maybe_wait_verify_done=lambda: None, batch_size=lambda: len(reqs))


def page_map(live, cache, alloc, page):
    """{page: owner} over the whole pool; raises on a page owned twice."""
    owners = {}

    def own(p, who):
        assert p not in owners, f"page {p} is both {owners[p]} and {who}"
        owners[p] = who

    for p in alloc.free_pages.tolist() + getattr(alloc, "release_pages", torch.empty(0)).tolist():
        own(int(p), "free")
    rtt = cache.req_to_token_pool.req_to_token
    for r in live:
        row = rtt[kv_len(r, "req_pool_idx"), : kv_len(r, "kv_allocated_len")].to(torch.int64)
        for p in torch.unique(row // page).tolist():
            own(int(p), r.rid)
    if hasattr(cache, "all_values_flatten") and cache.total_size():  # an empty tree has nothing to concatenate
        for p in torch.unique(cache.all_values_flatten().to(torch.int64) // page).tolist():
            own(int(p), "tree")
    return owners


def assert_partition(live, cache, alloc, page, when):
    owners = page_map(live, cache, alloc, page)
    expected = set(range(1, POOL_PAGES + 1))  # page 0 is the allocator's padding page
    assert set(owners) == expected, (f"{when}: pages neither free, held nor cached: {sorted(expected - set(owners))}; "
                                     f"unknown: {sorted(set(owners) - expected)}")
    assert alloc.available_size() == sum(1 for o in owners.values() if o == "free") * page


def release(req, cache, insert=True):
    from sglang.srt.mem_cache.common import release_kv_cache

    kw = {"checkpoint": True} if "checkpoint" in inspect.signature(release_kv_cache).parameters else {}
    release_kv_cache(req, cache, is_insert=insert, **kw)


# ----------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("kind", ["radix", "chunk"])
def test_decode_rounds_retract_abort_finish_balance(monkeypatch, kind, page):
    from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH

    _cpu_kernels(monkeypatch)
    prepare = prepare_for_decode()
    with scenarios.published_server_args(monkeypatch, page_size=page, **SPEC):
        alloc, cache = build(kind, page)
        reqs = [admit(cache, alloc, f"r{i}", n, page) for i, n in enumerate(PROMPTS)]
        assert_partition(reqs, cache, alloc, page, "after prefill")
        pending = []  # (request, pre-claimed, accepted) of the round in flight
        unaligned = 0
        tok = 500

        def resolve(done):
            nonlocal tok
            for r, pre, k in done:
                if kv_len(r, "req_pool_idx") is None:
                    continue  # retracted meanwhile: its stale result is dropped
                set_kv(r, kv_len(r, "kv_committed_len") + k - pre, kv_len(r, "kv_allocated_len"))
                r.output_ids.extend(token_ids(range(tok, tok + k)))
                tok += k

        def past_committed_page(rs):
            """Requests holding a page past their committed one: what release_kv_cache itself frees."""
            return [r for r in rs if kv_len(r, "kv_allocated_len") > -(-kv_len(r, "kv_committed_len") // page) * page]

        # each round as the overlap scheduler runs it: round N+1 is allocated, then round N's result is resolved.
        # Retract (once) and finish happen in that state, the first time a request holds a page past its committed
        # one: the in-flight round's result is then stale and dropped.
        live, retracted = list(reqs), None
        for rnd in range(120):
            before = [kv_len(r, "kv_committed_len") for r in live]
            prepare(batch_of(live, cache, alloc))
            done = []
            for j, r in enumerate(live):
                pre = kv_len(r, "kv_committed_len") - before[j]  # the bonus slot pre-claimed up to 0.5.14
                assert pre in (0, 1)
                unaligned += kv_len(r, "kv_allocated_len") % page != 0
                done.append((r, pre, ACCEPTS[int(r.rid[1:])][rnd % 4]))
                assert kv_len(r, "kv_allocated_len") <= cache.req_to_token_pool.req_to_token.shape[1]
            resolve(pending)
            pending = done
            assert_partition(live, cache, alloc, page, f"round {rnd}")
            past = past_committed_page(live)
            if retracted is None and rnd >= 2 and past:  # as retract_decode / release_req do
                retracted = past[0]
                live.remove(retracted)
                release(retracted, cache, insert=False)
                retracted.reset_for_retract()
                pending = [d for d in pending if d[0] is not retracted]
                assert_partition(live, cache, alloc, page, f"after retracting {retracted.rid}")
            elif retracted is not None and rnd >= 8 and past:
                break
        else:
            pytest.fail("no request came to hold a page past its committed one at a retract / finish point")
        if ALIGNED_UPSTREAM:
            assert unaligned == 0, "0.5.16+ rounds the decode allocation up to the page"
        else:
            assert unaligned > 0, "the unaligned kv_allocated_len #31616 describes did not occur"
        # abort one, finish the others (the scheduler releases both through release_kv_cache)
        live[0].finished_reason = FINISH_ABORT("aborted by the test")
        for r in live[1:]:
            r.finished_reason = FINISH_LENGTH(length=len(r.output_ids))
        for i, r in enumerate(live):
            release(r, cache)
            assert_partition(live[i + 1:], cache, alloc, page, f"after releasing {r.rid}")
        owners = page_map([], cache, alloc, page)
        cached = sum(1 for o in owners.values() if o == "tree")
        assert (cached > 0) == (kind == "radix")
        assert alloc.available_size() + cache.evictable_size() == POOL_PAGES * page
