"""The multi-step EAGLE draft CUDA graph after the eager input registry grew (draft-graph-eager-registry, 0.5.13.x;
known bug flush-then-prefill-0513; upstream from 0.5.14 by the EagerRunner redesign). EAGLE3 chain 3/1/4 on spec v2,
triton, page size 1, CUDA graphs for bs 1 2 4 8 (COMMON's ``--cuda-graph-bs``), at most 32 running requests.

The draft graphs bake the draft runner's eager decode registry, built at bs 8 during their capture. Test 1 runs 24
concurrent requests: their draft decodes run eagerly above bs 8, and stock 0.5.13.x rebuilds the registry at bs 32 and
frees the one the graphs replay into (every later draft replay writes freed memory); their greedy outputs must equal
the target served without speculation. Test 2: ``POST /flush_cache`` succeeds (its ``torch.cuda.empty_cache()`` hands
the freed blocks back to the driver). Test 3: the server is alive and requests after the flush (one alone, then four
at once: draft graph replays at bs 1 and 4) still equal the target-only greedy text.

Expected: stock 0.5.13.x dies at test 3 (CUDA illegal memory access at the draft graph's replay, as
test_page_align_decode.py's flush step did on 0.5.13 and 0.5.13.post1), or already fails test 1 if the freed blocks
were reused by then; the plugin passes (it keeps the replaced registry alive). Whether the freed blocks' segment is
unmapped by the flush depends on the allocator's layout, so stock's failure at this row's load is a prediction from
the source reading (known bug flush-then-prefill-0513). Met A/B on 0.5.13 and 0.5.13.post1: stock passed tests 1 - 2
and died at test 3; the plugin passed all three."""

import concurrent.futures
import unittest

from sglang_specv2_fixes.testing.client import flush_cache, generate, server_info
from sglang_specv2_fixes.testing.config import prompts
from sglang_specv2_fixes.testing.reference import prefetch_reference, reference_outputs
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:draft-graph-eager-registry",
                   bug_in="fix:draft-graph-eager-registry")

N_LOAD, TOKENS = 24, 64  # 24 requests decoding together: draft decode batches above the largest captured bs (8)
MAX_RUNNING = 32


def load_prompts():
    return prompts(N_LOAD, seed=41)


class TestDraftGraphEagerRegistry(SpecChecks, CustomTestCase):
    @classmethod
    def setUpClass(cls):
        prefetch_reference(load_prompts(), TOKENS)  # the target-only greedy oracle, started beside the server
        cls.process = launch(eagle3_args(3, 1, 4) + ["--page-size", "1", "--max-running-requests", str(MAX_RUNNING)])

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def assert_equal_target_only(self, indices):
        """Prompts ``indices`` of the load sent at once; each greedy output equals the target-only one."""
        ps, ref = load_prompts(), reference_outputs(load_prompts(), TOKENS)
        with concurrent.futures.ThreadPoolExecutor(len(indices)) as ex:
            got = list(ex.map(lambda i: generate(ps[i], TOKENS)["output_ids"], indices))
        for i, g in zip(indices, got):
            self.assertEqual(g, ref[i], f"prompt {i}: speculative greedy output differs from target-only")

    def test_1_concurrent_load_above_the_graph_sizes(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"], "spec v2 (overlap) expected")
        self.assertEqual((info["attention_backend"], info["page_size"], info["speculative_eagle_topk"]),
                         ("triton", 1, 1))
        self.assertEqual(max(info["cuda_graph_bs"]), 8, "the load must run the draft decode above the graphs")
        self.assertGreaterEqual(info["max_running_requests"], N_LOAD)
        self.assert_equal_target_only(list(range(N_LOAD)))
        self.check_accept_length(1.5)
        self.check_alive()

    def test_2_flush_cache(self):
        self.assertTrue(flush_cache(), "flush_cache refused: the server is not idle")

    def test_3_serves_after_the_flush(self):
        self.check_alive()  # /health runs a one-token generate: the first draft replay after the flush
        self.assert_equal_target_only([0])
        self.assert_equal_target_only([1, 2, 3, 4])
        self.check_alive()


if __name__ == "__main__":
    unittest.main()
