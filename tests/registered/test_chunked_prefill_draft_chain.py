"""#26800 chunked-prefill-draft-chain: EAGLE3 3/1/4 on spec v2 with ``--chunked-prefill-size 64``, prompts of
65 and 129 tokens (the prompt's last token is alone in the final chunk), one request at a time.

The standard tiny EAGLE3 draft cannot show this bug: its heads attend to their own position only, so the draft
KV written at a chunk's last position is never read by another position. This row builds a *detector* draft
from it (``testing.tiny_models.detectors.prevtoken_weights``): heads 0/2 attend to the previous position (the self-focus query phase-shifted
by one RoPE step: score ~120 at distance 1, >= 27 lower elsewhere), and the MLP reads the copied token through
the walk map (out = 0.3 * P(h_T) + 0.7 * P(copy)). The previous position's draft input is the current token, so
with a correct chain the two halves agree (every draft accepted). Stock feeds the target's prediction at the end
of a non-final chunk; the prompt's last position reads that entry, so the first draft after prefill is wrong:
8 tokens take 3 verify steps instead of 2. Prompts of 69 tokens (no chunk end two positions before the end) are
the control: 2 steps on both sides. On 0.5.11 the control also needs #25015 (draft decode steps one RoPE position
off, which this draft sees too): stock fails it there, the plugin applies draft-decode-positions as well.
Reference emulation: tests/cpu/test_detector_drafts.py.
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

register_specv2_ci(est_time=150, suite="specv2-gpu", releases="fix:chunked-prefill-draft-chain",
                   bug_in="fix:chunked-prefill-draft-chain")

CHUNK, TOKENS = 64, 8


def boundary_prompts():  # the last prompt token alone in the final chunk
    return prompts(6, seed=31, lo=CHUNK + 1, hi=CHUNK + 2) + prompts(6, seed=32, lo=2 * CHUNK + 1, hi=2 * CHUNK + 2)


def control_prompts():  # chunked too, but no chunk end right before the last prompt token
    return prompts(6, seed=33, lo=CHUNK + 5, hi=CHUNK + 6)


class TestChunkedPrefillDraftChain(SpecChecks, CustomTestCase):
    @classmethod
    def setUpClass(cls):
        models()  # the tiny models the detector is derived from
        draft = detectors.draft("prevtoken")
        prefetch_reference(boundary_prompts() + control_prompts(), TOKENS)
        cls.process = launch(eagle3_args(3, 1, 4, draft_path=draft) + ["--chunked-prefill-size", str(CHUNK)])

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"])  # spec v2
        self.assertEqual(info["chunked_prefill_size"], CHUNK)

    def test_2_control_prompts_draft_perfectly(self):
        steps = self.verify_steps(control_prompts(), TOKENS)
        print("control verify steps:", steps)
        self.assertEqual(steps, [2] * len(steps), "the detector draft itself is off (expected 2 steps for 8 tokens)")

    def test_3_chunk_boundary_prompts(self):
        steps = self.verify_steps(boundary_prompts(), TOKENS)
        print("chunk-boundary verify steps:", steps)
        self.assertEqual(steps, [2] * len(steps),
                         "the draft chain saw the target's prediction instead of the prompt token at a chunk end")

    def test_4_greedy_equals_target_only(self):
        self.check_prompts_equal_target_only(boundary_prompts() + control_prompts(), TOKENS)

if __name__ == "__main__":
    unittest.main()
