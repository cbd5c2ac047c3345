"""#25015 draft-decode-positions: EAGLE3 3/1/4 on spec v2, prompts of 24-47 tokens, 16 new tokens, one request at
a time, with the previous-token detector draft (``testing.tiny_models.detectors.prevtoken_weights``: heads 0/2
attend to distance 1, and with a correct draft chain every draft is accepted).

Stock 0.5.11 runs draft decode step ``i`` at RoPE position ``seq_lens + i + 1`` while it writes the KV slot of
``seq_lens + i``: the previous position is at distance 2 for that step, the detector's attention splits, and the
step's draft is often wrong. 16 tokens then take more than 4 verify steps for most prompts (reference emulation,
tests/cpu/test_detector_drafts.py: 10 of these 12 prompts). With the fix every prompt takes exactly 4. The standard
tiny draft (self-attention to distance 0) cannot see this bug. Greedy text equals target-only on both sides.
"""

import unittest

from sglang_specv2_fixes.testing.client import server_info
from sglang_specv2_fixes.testing.config import prompts
from sglang_specv2_fixes.testing.reference import prefetch_reference
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import eagle3_args, launch, models, stop
from sglang_specv2_fixes.testing.tiny_models import detectors
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=150, suite="specv2-gpu", releases="fix:draft-decode-positions",
                   bug_in="fix:draft-decode-positions")

TOKENS, STEPS = 16, 3  # a fully accepted verify step gives STEPS + 1 tokens


def row_prompts():
    return prompts(12, seed=41, lo=24, hi=48)


class TestDraftDecodePositions(SpecChecks, CustomTestCase):
    @classmethod
    def setUpClass(cls):
        models()  # the tiny models the detector is derived from
        draft = detectors.draft("prevtoken")
        prefetch_reference(row_prompts(), TOKENS)
        cls.process = launch(eagle3_args(STEPS, 1, STEPS + 1, draft_path=draft))

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        self.assertFalse(server_info()["disable_overlap_schedule"])  # spec v2

    def test_2_every_draft_accepted(self):
        steps = self.verify_steps(row_prompts(), TOKENS)
        print("verify steps:", steps)
        self.assertEqual(len(steps), 12)
        self.assertEqual(steps, [TOKENS // (STEPS + 1)] * len(steps),
                         "a draft decode step ran at the wrong position (the detector draft lost acceptance)")

    def test_3_greedy_equals_target_only(self):
        self.check_prompts_equal_target_only(row_prompts(), TOKENS)

if __name__ == "__main__":
    unittest.main()
