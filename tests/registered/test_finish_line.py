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
from sglang_specv2_fixes.testing.rows import FinishLineCases, FinishLineRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu&fix:multi-token-finish",
                   bug_in="gpu&fix:multi-token-finish")

PROMPTS = prompts(10, seed=31)
CASES = finish_line.cases(PROMPTS, seed=5)
BODIES = [body for _, body in CASES]


class _FinishLine(FinishLineCases, FinishLineRow):
    BODIES, CASES, N_PROMPTS = BODIES, CASES, len(PROMPTS)

    def oracle(self):
        return reference_responses(BODIES, keep=finish_line.received)


class TestFinishLineChain(_FinishLine, CustomTestCase):
    SPEC = (3, 1, 4)


class TestFinishLineTree(_FinishLine, CustomTestCase):
    SPEC = (3, 4, 8)


if __name__ == "__main__":
    unittest.main()
