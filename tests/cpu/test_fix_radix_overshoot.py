"""radix-overshoot (#35694) through the release's real cache path on CPU.

Real objects of the release under test: ``MHATokenToKVPool`` / ``ReqToTokenPool`` / ``TokenToKVPoolAllocator``
on CPU, the release's ``RadixCache`` and ``UnifiedRadixCache`` (full-attention component; the scheduler's
default for a dense model is the first up to 0.5.18, the second from 0.5.19), a ``Req`` admitted with its own
``init_next_round_input`` and the release's lock call, and ``mem_cache.common.release_kv_cache`` when it
finishes. Only the decode steps themselves are not run: the request is left as they leave it. The prompt is 10
tokens. The last verify run was ``[202, 203, 7, 301, 302, 303]``, accepted whole after one earlier output token
201, and 7 is a stop token. The real finish check sets ``finished_len`` 4, so the client gets ``201 202 203 7``.
The committed KV covers prompt + output but the last token (16): two overshoot tokens past the stop. KV slots
are allocated up to 21, the spec over-allocation.

Stock (0.5.11 … 0.5.21) keys and keeps 16 tokens in the tree: prompt + answer + 2 overshoot tokens. The
plugin keeps 14 (prompt + answer) and frees the rest with the over-allocated range; 0.5.22+ does that
upstream. Either way every slot is in the tree or free again. A follow-up turn built from the answer hits
all 14 on stock too, because a dense tree splits at the divergence. The overshoot is KV that only a
sequence nobody sends can reach.
"""

import contextlib
import inspect

import pytest
import torch
from conftest import LINE, requires_sglang, where_patched

from sglang_specv2_fixes import core, releases
from sglang_specv2_fixes.catalog import Patched
from sglang_specv2_fixes.fixes import radix_overshoot as fix_module
from sglang_specv2_fixes.testing import scenarios
from sglang_specv2_fixes.testing.scenarios import kv_len, token_ids

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = fix_module.FIX.name
PATCHED = LINE is not None and isinstance(releases.entry(FIX, LINE), Patched)
plugin_only = where_patched(FIX, "the cache path with the patched length")

PROMPT = list(range(100, 110))
FIRST, RUN = [201], [202, 203, 7, 301, 302, 303]  # one earlier output token, then the last verify run
STOP = 7
ANSWER = [201, 202, 203, STOP]  # output_ids_through_stop
OVERSHOOT = [301, 302, 303]
COMMITTED = len(PROMPT) + len(FIRST) + len(RUN) - 1  # 16: the last accepted token's KV is not written yet
ALLOCATED = COMMITTED + 5
RETURNED = len(PROMPT) + len(ANSWER)  # 14
POOL = 256


# ------------------------------------------------------------------------------ the release's objects
SPEC = dict(speculative_algorithm="EAGLE3", page_size=1)


def build_cache(kind, bigram=False, session=False):
    """(allocator, cache): a CPU pool of POOL slots and the release's ``kind`` cache over it; ``session``: with
    the streaming-session layer (the wrapper up to 0.5.21, the unified cache's own from 0.5.22)."""
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    kv = MHATokenToKVPool(size=POOL, page_size=1, dtype=torch.float32, head_num=1, head_dim=4, layer_num=1,
                          device="cpu", enable_memory_saver=False)
    rtp = ReqToTokenPool(size=4, max_context_len=128, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(POOL, torch.float32, "cpu", kv, need_sort=False)
    params = CacheInitParams(disable=False, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, page_size=1,
                             is_eagle=bigram)
    if kind == "radix":
        from sglang.srt.mem_cache.radix_cache import RadixCache

        cache = RadixCache(params)
        if session:
            from sglang.srt.session.streaming_session import StreamingSession

            if "inner" not in inspect.signature(StreamingSession.__init__).parameters:
                pytest.skip("the streaming-session layer is the unified cache's own on this release")
            cache = StreamingSession(cache)
    else:
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        try:
            from sglang.srt.mem_cache.unified_cache.components import ComponentType
        except ImportError:  # up to 0.5.16
            from sglang.srt.mem_cache.unified_cache_components import ComponentType
        params.tree_components = (ComponentType.FULL,)
        cache = UnifiedRadixCache(params)
        if session and getattr(cache, "session", None) is None:
            pytest.skip("this release's unified cache has no streaming-session layer")
    return alloc, cache


def finished_request(cache, alloc, max_new_tokens=64, run=RUN, session=None):
    """A request admitted into ``cache`` and left as its decode steps leave it when the last verify run was
    ``run``; the release's own finish check decides finished_len."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    from sglang_specv2_fixes.testing.scenarios import set_kv

    sp = SamplingParams(max_new_tokens=max_new_tokens, stop_token_ids=[STOP])
    sp.normalize(None)
    req = Req("r", "", token_ids(PROMPT), sp, vocab_size=1000)
    if session is not None:
        req.session = session
    req.init_next_round_input(cache)
    if hasattr(req, "lock") and hasattr(cache, "lock"):  # 0.5.22+
        req.lock = cache.lock(req.last_node)
    elif hasattr(req, "lock_receipt"):  # 0.5.21
        req.lock_receipt = cache.inc_lock_ref(req.last_node).to_dec_params()
    else:
        cache.inc_lock_ref(req.last_node)
    cache.req_to_token_pool.alloc([req])
    if session is not None and hasattr(cache, "maybe_hand_to_session"):  # 0.5.22+: the session takes the row here
        cache.maybe_hand_to_session(req)
    req.output_ids.extend(FIRST)
    req.output_ids.extend(run)
    (getattr(req, "update_finish_state", None) or req.check_finished)(len(run))
    assert req.finished() and req.finished_len is not None
    committed = len(PROMPT) + len(req.output_ids) - 1
    slots = alloc.alloc(committed + 5)
    cache.req_to_token_pool.req_to_token[kv_len(req, "req_pool_idx"), : committed + 5] = slots
    set_kv(req, committed, committed + 5)
    return req


def release(req, cache):
    from sglang.srt.mem_cache.common import release_kv_cache

    if "checkpoint" in inspect.signature(release_kv_cache).parameters:  # 0.5.22+
        release_kv_cache(req, cache, checkpoint=True)
    else:
        release_kv_cache(req, cache)


def matched(cache, ids, bigram=False):
    """Length of the cached prefix a new request with prompt ``ids`` would get."""
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    r = cache.match_prefix(MatchPrefixParams(key=RadixKey(token_ids(ids), None, is_bigram=bigram)))
    return r.device_prefix_len if hasattr(r, "device_prefix_len") else len(r.device_indices)


@contextlib.contextmanager
def plugin(monkeypatch, on):
    """The release's Req with the patched function in place (as the plugin registers it), or stock."""
    if on:
        from sglang.srt.managers.schedule_batch import Req

        ((target, fn),) = core.build_fix(FIX).items()
        monkeypatch.setattr(Req, target.rsplit(".", 1)[1], fn)
    yield


def run_case(monkeypatch, kind, bigram, use_plugin, max_new_tokens=64, run=RUN, **flags):
    with plugin(monkeypatch, use_plugin), scenarios.published_server_args(monkeypatch, **dict(SPEC, **flags)):
        alloc, cache = build_cache(kind, bigram)
        req = finished_request(cache, alloc, max_new_tokens, run)
        assert alloc.available_size() == POOL - ALLOCATED
        release(req, cache)
        out = dict(finished_len=req.finished_len, cached=cache.evictable_size(), free=alloc.available_size(),
                   whole_run=matched(cache, PROMPT + FIRST + run, bigram),
                   follow_up=matched(cache, PROMPT + ANSWER + [999, 998], bigram))
    return out


CACHES = ["radix", "unified"]


# ----------------------------------------------------------------------------------------------- tests
def test_table_entry():
    """Patched up to 0.5.21; 0.5.22's Req.owned_kv_len carries the rule (checked by fingerprint in the table)."""
    e = releases.entry(FIX, LINE)
    assert PATCHED == (list(releases.RELEASES).index(releases.RELEASES[LINE].version)
                       < list(releases.RELEASES).index("0.5.22"))
    if not PATCHED:
        assert e.state == "upstream" and e.check[1] == "Req.owned_kv_len"


@pytest.mark.parametrize("bigram", [False, True], ids=["plain", "eagle-bigram"])
@pytest.mark.parametrize("kind", CACHES)
def test_stock(monkeypatch, kind, bigram):
    s = run_case(monkeypatch, kind, bigram, use_plugin=False)
    assert s["finished_len"] == len(ANSWER)
    kept = COMMITTED if PATCHED else RETURNED  # the bug: 2 overshoot tokens keyed into the tree (0.5.22+: not)
    assert s["cached"] == kept - bigram  # EAGLE's bigram key covers one token less
    assert s["whole_run"] == kept - bigram  # the tree holds exactly that sequence
    assert s["follow_up"] == RETURNED - bigram  # a dense tree splits at the divergence: the follow-up hits anyway
    assert s["free"] + s["cached"] == POOL  # no leak


@plugin_only
@pytest.mark.parametrize("bigram", [False, True], ids=["plain", "eagle-bigram"])
@pytest.mark.parametrize("kind", CACHES)
def test_plugin_keys_prompt_and_answer_only(monkeypatch, kind, bigram):
    s = run_case(monkeypatch, kind, bigram, use_plugin=True)
    assert s["cached"] == RETURNED - bigram
    assert s["whole_run"] == RETURNED - bigram  # nothing past the answer in the tree
    assert s["follow_up"] == RETURNED - bigram
    assert s["free"] == POOL - (RETURNED - bigram)  # the overshoot and the over-allocation are free again


@pytest.mark.parametrize("use_plugin", [False, pytest.param(True, marks=plugin_only)], ids=["stock", "plugin"])
def test_length_finish(monkeypatch, use_plugin):
    """The run crosses max_new_tokens (4): the length finish sets finished_len 4, the same boundary."""
    s = run_case(monkeypatch, "radix", False, use_plugin, max_new_tokens=4, run=[202, 203, 204, 301, 302, 303])
    assert s["finished_len"] == 4
    assert s["cached"] == (COMMITTED if PATCHED and not use_plugin else RETURNED)
    assert s["free"] + s["cached"] == POOL


@pytest.mark.parametrize("use_plugin", [False, pytest.param(True, marks=plugin_only)], ids=["stock", "plugin"])
@pytest.mark.parametrize("kind", CACHES)
def test_strip_thinking_cache_keeps_the_prompt_only(monkeypatch, kind, use_plugin):
    """--strip-thinking-cache with reasoning: the prompt is cached, everything after it freed (both sides)."""
    with plugin(monkeypatch, use_plugin), scenarios.published_server_args(monkeypatch, strip_thinking_cache=True, **SPEC):
        alloc, cache = build_cache(kind)
        req = finished_request(cache, alloc)
        req.reasoning_tokens = 3
        release(req, cache)
        assert cache.evictable_size() == len(PROMPT)
        assert alloc.available_size() == POOL - len(PROMPT)


@plugin_only
def test_gates(monkeypatch):
    """The patched length applies to finished speculative requests without mamba state only; the others get the
    stock length (what the cache would key): non-speculative decoding, a request holding mamba state, an
    unfinished (retracted / aborted) request."""
    from sglang.srt.managers.schedule_batch import Req

    ((target, fn),) = core.build_fix(FIX).items()
    name = target.rsplit(".", 1)[1]

    def length(flags, tweak=lambda r: None):
        with scenarios.published_server_args(monkeypatch, **flags):
            alloc, cache = build_cache("radix")
            req = finished_request(cache, alloc)
            tweak(req)
            if name == "pop_committed_kv_cache":  # 0.5.11 … 0.5.15: lowers the length the cache then reads
                fn(req)
                return Req._cache_commit_len(req)
            return fn(req)

    def hold_mamba(req):
        kv = getattr(req, "kv", None)
        setattr(kv if kv is not None and hasattr(kv, "mamba_pool_idx") else req, "mamba_pool_idx",
                torch.tensor([0]))

    def unfinished(req):
        req.finished_len = None

    assert length(SPEC) == RETURNED
    assert length(dict(SPEC, speculative_algorithm=None)) == COMMITTED
    assert length(SPEC, hold_mamba) == COMMITTED
    assert length(SPEC, unfinished) == COMMITTED


@pytest.mark.parametrize("use_plugin", [False, pytest.param(True, marks=plugin_only)], ids=["stock", "plugin"])
@pytest.mark.parametrize("kind", CACHES)
def test_streaming_session_keeps_its_own_boundary(monkeypatch, kind, use_plugin):
    """A streaming-session turn: the session layer trims the request to prompt + finished_len itself and keeps the
    row for the next turn; the slot's committed length is that boundary, the tree gets nothing at finish, the
    overshoot past the boundary is freed. The same with and without the plugin (the boundary the plugin gives a
    request outside a session)."""
    import types

    session = types.SimpleNamespace(session_id="s", streaming=True, finish_req=lambda req: None,
                                    abort_req=lambda: None)
    with plugin(monkeypatch, use_plugin), scenarios.published_server_args(monkeypatch, **SPEC):
        alloc, cache = build_cache(kind, session=True)
        req = finished_request(cache, alloc, session=session)
        release(req, cache)
        slots = cache.slots if hasattr(cache, "slots") else cache.session.slots
        slot = slots["s"]
        kept = slot.kv_committed_len if hasattr(slot, "kv_committed_len") else slot.kv.kv_committed_len
        assert kept == RETURNED
        assert cache.evictable_size() == 0
        assert alloc.available_size() == POOL - RETURNED  # the slot holds prompt + answer, the rest is free
