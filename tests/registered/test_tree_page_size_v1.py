"""Routing guard: topk > 1 with page_size > 1 stays on spec v1, with one warning naming the reason.

EAGLE3 3 steps / topk 4 / 8 draft tokens at page_size 16 on the flashinfer attention backend (the only
backend these releases allow for paged tree drafting; triton refuses it). Spec v2 tree drafting needs
page_size 1, so with the plugin the server must run spec v1 (overlap off) and log why; stock also runs v1
(it sends every topk > 1 to v1). Both must serve greedy output equal to the target-only server.
flashinfer JIT-builds its attention kernels on first use: this row's first start is slow."""

import os
import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.config import COMMON, nccl_args
from sglang_specv2_fixes.testing.server import AB, URL, eagle3_args, models, stop
from sglang_specv2_fixes.testing.client import server_info
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang.test.test_utils import CustomTestCase, popen_launch_server

register_specv2_ci(est_time=420, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")

REASON = "spec v2 tree drafting (topk > 1) requires page_size == 1, got page_size=16"


class TestTreePageSizeV1(CustomTestCase, SpecChecks):
    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        args = [a for a in COMMON]
        args[args.index("--attention-backend") + 1] = "flashinfer"
        cls.log_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"specv2-page16-{AB}-{os.getpid()}.log")
        cls.log = open(cls.log_path, "w")
        cls.process = popen_launch_server(
            models()["target"], URL, timeout=600,
            other_args=args + nccl_args(URL) + eagle3_args(3, 4, 8) + ["--page-size", "16", "--decode-log-interval", "1", "--specv2-fixes", AB],
            env={"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1"}, return_stdout_stderr=(cls.log, cls.log),
        )

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)
        cls.log.close()

    def test_1_spec_v1_with_reason(self):
        info = server_info()
        self.assertTrue(info["disable_overlap_schedule"], "topk 4 at page_size 16 must run spec v1")
        self.assertEqual((info["page_size"], info["speculative_eagle_topk"]), (16, 4))
        if AB == "auto":
            self.log.flush()
            text = open(self.log_path).read()
            self.assertIn(REASON, text)
            self.assertNotIn("Spec v2 is enabled", text)

    def test_2_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_3_concurrent_load(self):
        self.check_concurrent_load(32)
        self.check_accept_length(1.5)
        self.check_alive()


if __name__ == "__main__":
    unittest.main()
