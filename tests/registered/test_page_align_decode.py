"""Spec-v2 EAGLE decode allocation at page_size > 1 (#31616, survey K, known bug eagle-decode-page-align): does the
unaligned ``kv_allocated_len`` of 0.5.11 - 0.5.15.post1 (``kv_committed_len + 2 * alloc_len`` per round; 0.5.16 rounds
it up to the page) strand KV pages? EAGLE3 chain 3/1/4 on spec v2, triton, one server per page size: 16 with the
radix cache, 64 without it (ChunkCache: the other finish path). Each server gets a small KV pool
(``--max-total-tokens``) and SGLANG_TEST_RETRACT, so decode retracts both by force and for memory.

Load: 48 concurrent requests whose prompt and output lengths end at many offsets inside a page, then 16 long decodes
aborted mid-run (half by rid, the rest with abort_all). After each load the server goes idle and is checked with
SGLang's own accounting only: its idle self-check (strict by default: a leaked page stops the scheduler), the busy
check ``launch()`` turns on (SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY, every busy iteration), and ``/v1/loads``
``num_used_tokens`` (``max_total_num_tokens - available - evictable``) must be 0 with nothing running or waiting. The
probe (SGLANG_SPECV2_FIXES_PROBE) must count no request ending a step with more committed than allocated KV. Greedy
output equals the same target served without speculation at the same page size (the target-only reference).

The CPU proof (tests/cpu/test_eagle_decode_page_align.py) found the page accounting balanced on every release 0.5.11 -
0.5.16 on the finish, abort and retract paths, radix cache on and off (the paged allocator returns whole pages
for any slot of them), so #31616 is expected to fail nothing: the row is a guard for page sizes > 1 that fails on any
stranded page the CPU model missed. 0.5.16 (page-aligned upstream) is the control. On the GPU it agreed on
0.5.15 (stock passed) and on 0.5.11 saw no page left in use at idle, but 0.5.11's stock side failed the probe
check: finished or retracted requests gained committed KV from a stale overlap result, #23456,
which ``skip-stale-overlap-updates`` fixes there. So ``bug_in`` is that fix's release (0.5.11), not #31616's.
Every flag exists in 0.5.11's server_args (``--page-size``, ``--disable-radix-cache``, ``--max-total-tokens``,
``--max-running-requests``)."""

import concurrent.futures
import unittest

from sglang_specv2_fixes.testing.client import flush_cache, generate, server_info
from sglang_specv2_fixes.testing.config import prompts
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=420, suite="specv2-gpu", releases="gpu&up-to:0.5.16",
                   bug_in="fix:skip-stale-overlap-updates")

N_MIXED = 48
POOL_TOKENS = 8192  # 48 requests of up to ~200 + 160 tokens need more: decode retracts for memory too


def mixed_lengths():
    """(prompt, max_new_tokens) pairs: prompts of 8 - 200 tokens, outputs of 1 - 160, so committed and allocated
    lengths end at many offsets inside 16- and 64-token pages."""
    ps = prompts(N_MIXED, seed=31, lo=8, hi=200)
    return [(p, 1 + (i * 37) % 160) for i, p in enumerate(ps)]


class _PageAlignRow(SpecChecks):
    PAGE_SIZE = None
    EXTRA = []
    BACKEND_ARGS = ()  # ("--page-size", N): the row's server and its target-only reference (SpecChecks)

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()  # the greedy oracle at the same page size, started beside the server
        cls.process = launch(
            eagle3_args(3, 1, 4) + list(cls.BACKEND_ARGS) + ["--max-running-requests", "32",
                                                             "--max-total-tokens", str(POOL_TOKENS)] + list(cls.EXTRA),
            env={"SGLANG_TEST_RETRACT": "1", "SGLANG_SPECV2_FIXES_PROBE": "1"},
        )

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"], "spec v2 (overlap) expected")
        self.assertEqual(info["page_size"], self.PAGE_SIZE)
        self.assertEqual(info["speculative_eagle_topk"], 1)
        self.assertEqual(info["attention_backend"], "triton")
        self.assertEqual(info["disable_radix_cache"], "--disable-radix-cache" in self.EXTRA)

    def test_2_mixed_lengths_then_idle(self):
        cases = mixed_lengths()
        with concurrent.futures.ThreadPoolExecutor(N_MIXED) as ex:
            outs = list(ex.map(lambda c: generate(c[0], c[1]), cases))
        for i, ((p, n), o) in enumerate(zip(cases, outs)):
            self.assertEqual(o["meta_info"]["completion_tokens"], n, f"request {i} (prompt {len(p)} tokens)")
        self.check_accept_length(1.5)
        self.assert_idle_balanced("after mixed lengths")

    def test_3_second_wave_reuses_the_cache_then_idle(self):
        # the same prompts again (radix hits at page boundaries where the cache is on) with other output lengths
        cases = [(p, 1 + (i * 53) % 120) for i, (p, _) in enumerate(mixed_lengths())]
        with concurrent.futures.ThreadPoolExecutor(N_MIXED) as ex:
            outs = list(ex.map(lambda c: generate(c[0], c[1]), cases))
        for i, ((p, n), o) in enumerate(zip(cases, outs)):
            self.assertEqual(o["meta_info"]["completion_tokens"], n, f"request {i} (prompt {len(p)} tokens)")
        self.assert_idle_balanced("after the second wave")

    def test_4_aborts_then_idle(self):
        self.check_concurrent_abort(n=16, tokens=3000)
        self.assert_idle_balanced("after aborts")

    def test_5_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_6_flush_still_works(self):
        self.assertTrue(flush_cache(), "flush_cache refused: the server is not idle")
        self.check_alive()


class TestPageAlignDecodePage16Radix(_PageAlignRow, CustomTestCase):
    PAGE_SIZE = 16
    BACKEND_ARGS = ("--page-size", "16")


class TestPageAlignDecodePage64NoRadix(_PageAlignRow, CustomTestCase):
    PAGE_SIZE = 64
    BACKEND_ARGS = ("--page-size", "64")
    EXTRA = ["--disable-radix-cache"]


if __name__ == "__main__":
    unittest.main()
