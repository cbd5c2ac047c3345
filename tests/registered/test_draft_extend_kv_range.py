"""#26651 draft-extend-kv-range: EAGLE3 3/1/4 on spec v2 with the triton backend and the draft-extend CUDA graph
(captured for triton at topk 1), tiny Llama target.

The standard tiny EAGLE3 draft cannot show this bug: its attention heads 0/2 attend to their own position only
(score ~120 there, >= 22 lower everywhere else) and its drafts are always accepted, so the draft extend's select
row is the last row and a key counted twice is the same key (stock 0.5.11 accepts every draft token on
this configuration). This row builds a *detector* draft from it (``testing.tiny_models.detectors.lookahead_weights``):
heads 0/2 gain 48 score per position towards later keys (and lose it towards earlier ones), so with correct causal
metadata they still attend to themselves, but a draft-extend row that can see the rows after it (stock: its
kv range is ``seq_lens`` already bumped by the draft tokens) copies the next row's token instead; the token copy
carries 0.7 of the logit, and the draft mispredicts the successor of every third walk slot, so verifies reject
and the select row is not the last one. Reference emulation (tests/cpu/test_detector_drafts.py): accept ~2.9
with causal draft-extend metadata, ~1.05 with stock's range. Greedy text equals target-only on both sides (the
draft only changes speed).
"""

import unittest

from sglang_specv2_fixes.testing.client import concurrent_generate, server_info
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import eagle3_args, launch, models, stop
from sglang_specv2_fixes.testing.tiny_models import detectors
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=150, suite="specv2-gpu", releases="fix:draft-extend-kv-range",
                   bug_in="fix:draft-extend-kv-range")

MIN_ACCEPT = 2.0  # tokens per verify step; emulation: ~2.9 correct, ~1.05 stock
class TestDraftExtendKvRange(SpecChecks, CustomTestCase):
    @classmethod
    def setUpClass(cls):
        models()  # the tiny models the detector is derived from
        draft = detectors.draft("lookahead")
        cls.prefetch_target_only()
        cls.process = launch(eagle3_args(3, 1, 4, draft_path=draft))

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"])  # spec v2
        self.assertEqual(info["attention_backend"], "triton")
        self.assertFalse(info["disable_cuda_graph"])  # the draft-extend CUDA graph is captured for triton

    def test_2_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_3_acceptance(self):
        # at most 8 requests in flight: the draft-extend graph is captured for bs <= 8 (COMMON's --cuda-graph-bs);
        # a larger decode batch runs the draft extend eagerly, whose metadata is right on both sides
        outs = concurrent_generate(16, lambda i: 64, seed=4, workers=8)
        tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
        verify = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
        print(f"tokens per verify step: {tokens / verify:.3f} ({tokens} tokens, {verify} verify steps)")
        self.assertGreater(tokens / verify, MIN_ACCEPT,
                           "draft acceptance collapsed: draft-extend rows see the rows after them")
        self.check_alive()


if __name__ == "__main__":
    unittest.main()
