"""What a client receives at the finish line equals non-speculative decoding: stop strings (inside, at the start and
at the end of accepted runs, over two tokens, regex, kept, untrimmed), stop tokens around ``max_new_tokens`` and
length finishes, streamed and not, on an EAGLE3 chain and a tree. The oracle is the same target served without
speculation: text, output ids, finish reason (with ``matched``) and completion tokens must be equal for every case.

Stock 0.5.11-0.5.13 miss stop strings early in an accepted run, stream the tokens after a matched stop string and
finish on EOS / a stop token before a stop string of the same run; stock 0.5.11-0.5.17 finish on length when a stop
token lies inside a run that crosses ``max_new_tokens`` (the client gets the tokens after the stop)."""

import unittest

from sglang_specv2_fixes.testing import finish_line
from sglang_specv2_fixes.testing.config import prompts
from sglang_specv2_fixes.testing.reference import reference_responses
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import FinishLineRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu&fix:multi-token-finish",
                   bug_in="gpu&fix:multi-token-finish")

PROMPTS = prompts(10, seed=31)
CASES = finish_line.cases(PROMPTS, seed=5)
BODIES = [body for _, body in CASES]


class _FinishLine(FinishLineRow):
    BODIES = BODIES

    def test_1_the_cases_reach_their_finish(self):
        """The premise: the oracle's greedy output is the predicted walk, and the stops are reached."""
        want = reference_responses(BODIES, keep=finish_line.received)
        self.assertEqual(len(want), len(CASES))
        self.assertGreaterEqual(len(CASES), 200)
        for (label, body), w in zip(CASES, want):
            if label.endswith("max_new_tokens"):
                n = body["sampling_params"]["max_new_tokens"]
                self.assertEqual(w["output_ids"], finish_line.walk(body["input_ids"])[:n], label)
        kinds = [w["finish_reason"]["type"] for w in want]
        self.assertGreater(kinds.count("stop"), len(CASES) // 2, kinds)
        self.assertGreater(kinds.count("length"), len(PROMPTS), kinds)

    def check_cases(self, earlier_token_later_string):
        """Every case of one group equals the non-speculative server. The group of a stop token followed by a stop
        string (``stop token then stop string``) is apart: upstream's check order lets the later string win inside
        one accepted run (stock fails it on 0.5.14-0.5.23; the plugin's first finish in the run wins)."""
        want = reference_responses(BODIES, keep=finish_line.received)
        mine = [i for i, (label, _) in enumerate(CASES)
                if label.endswith("stop token then stop string") == earlier_token_later_string]
        n, bad = finish_line.differing([CASES[i] for i in mine], [want[i] for i in mine])
        self.assertGreaterEqual(n, 10)
        self.assertFalse(bad, f"{len(bad)} of {len(mine)} cases differ from the non-speculative server:\n"
                         + "\n".join(bad[:25]))

    def test_2_every_case_equals_non_speculative(self):
        self.check_cases(earlier_token_later_string=False)

    def test_3_an_earlier_stop_token_beats_a_later_stop_string(self):
        self.check_cases(earlier_token_later_string=True)


class TestFinishLineChain(_FinishLine, CustomTestCase):
    SPEC = (3, 1, 4)


class TestFinishLineTree(_FinishLine, CustomTestCase):
    SPEC = (3, 4, 8)


if __name__ == "__main__":
    unittest.main()
