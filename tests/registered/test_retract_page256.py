"""Retract guard (no bug targeted) at page_size 256: EAGLE3 3/1/4 on spec v2, forced retraction
(SGLANG_TEST_RETRACT), long prompts split by a chunked-prefill size of one page while short requests decode,
64 concurrent mixed-length requests. ``--enable-mixed-chunk`` is passed, and SGLang turns it off for
EAGLE in these releases (asserted, so the row notices if a release starts mixing). Greedy output must
equal the target-only server's and every request must get exactly its max_new_tokens; strict busy/idle
memory checks are on (a leak stops the server)."""

import concurrent.futures
import unittest

from _registry import register_specv2_ci
from _server import SpecChecks, eagle3_args, generate, launch, prompts, reference_outputs, server_info, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=150, suite="specv2-gpu", releases=["0.5.11", "0.5.12.post1"])


class TestRetractPage256(CustomTestCase, SpecChecks):
    @classmethod
    def setUpClass(cls):
        cls.process = launch(
            eagle3_args(3, 1, 4) + ["--page-size", "256", "--enable-mixed-chunk", "--chunked-prefill-size", "256",
                                    "--max-running-requests", "32"],
            env={"SGLANG_TEST_RETRACT": "1"},
        )

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertEqual(info["page_size"], 256)
        self.assertFalse(info["disable_overlap_schedule"])  # spec v2
        self.assertEqual(info["chunked_prefill_size"], 256)  # must divide by page_size
        self.assertFalse(info["enable_mixed_chunk"], "SGLang now mixes chunked prefill with EAGLE: extend this row")

    def test_2_long_prompts_chunked_under_retract_equal_target_only(self):
        ps = prompts(24, seed=21, lo=300, hi=700) + prompts(24, seed=22)
        ref = reference_outputs(ps, 40)
        with concurrent.futures.ThreadPoolExecutor(48) as ex:
            got = list(ex.map(lambda p: generate(p, 40)["output_ids"], ps))
        for i, (g, r) in enumerate(zip(got, ref)):
            self.assertEqual(g, r, f"prompt {i} (len {len(ps[i])}): output differs from target-only")

    def test_3_concurrent_mixed_lengths(self):
        self.check_concurrent_load(64)
        self.check_accept_length(1.5)
        self.check_alive()


if __name__ == "__main__":
    unittest.main()
