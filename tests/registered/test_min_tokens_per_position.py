"""``min_tokens`` with multi-token accepts equals decoding without speculation (min-tokens-per-position, beyond
upstream).

The tiny target's greedy output is a known walk with no token twice in 64 (``finish_line.walk``), so the cases are
built before any server starts: per prompt a stop token ``w[k]`` at several offsets ``k`` and ``min_tokens`` at, just
below and well below ``k`` (the oracle stops at index ``k``), just above and well above it (the oracle masks ``w[k]``
there and goes on by the target's second choice), with and without streaming, plus controls without ``min_tokens``.
The oracle is the same target served without speculation: text, output ids, finish reason and completion tokens must
be equal for every case, on an EAGLE3 chain and a tree.

Stock counts ``min_tokens`` in verify steps (about k / accept length at index k) and masks every draft position of a
step alike: a stop token at index k >= min_tokens is still masked, the request runs on (to ``max_new_tokens`` when
the walk never meets the token again). Expected: stock fails test 2 on every release (open upstream, #33643); the
plugin passes. Met A/B on 0.5.11 - 0.5.17."""

import unittest

from sglang_specv2_fixes.testing import finish_line
from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.config import prompts
from sglang_specv2_fixes.testing.reference import reference_responses
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import FinishLineRow
from sglang_specv2_fixes.testing.server import AB
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu&fix:min-tokens-per-position",
                   bug_in="gpu&fix:min-tokens-per-position")

FIX = "min-tokens-per-position"
PROMPTS = prompts(10, seed=47)  # as tests/cpu/test_finish_line_cases.py
CASES = finish_line.min_tokens_cases(PROMPTS, seed=11)
BODIES = [body for _, body, _ in CASES]


class _MinTokens(FinishLineRow):
    BODIES = BODIES

    def test_1_the_oracle_stops_where_predicted(self):
        """The premise: where min_tokens <= k the target alone stops at the walk's index k (the stop token is
        allowed there), and where it is above k it does not stop at k."""
        want = reference_responses(BODIES, keep=finish_line.received)
        self.assertEqual(len(want), len(CASES))
        self.assertGreaterEqual(len(CASES), 200)
        stops_at_k = 0
        for (label, body, k), w in zip(CASES, want):
            walk, m = finish_line.walk(body["input_ids"]), body["sampling_params"].get("min_new_tokens", 0)
            if m <= k:
                self.assertEqual(w["finish_reason"]["type"], "stop", label)
                self.assertEqual(w["completion_tokens"], k + 1, label)
                stops_at_k += 1
            else:  # min_tokens above k: the walk until k, then another token, and no stop before min_tokens
                self.assertEqual(w["output_ids"][:k], walk[:k], label)
                self.assertNotEqual(w["output_ids"][k], walk[k], label)
                self.assertGreater(w["completion_tokens"], m, label)
        self.assertGreater(stops_at_k, len(CASES) // 2)

    def test_2_every_case_equals_non_speculative(self):
        want = reference_responses(BODIES, keep=finish_line.received)
        n, bad = finish_line.differing([(label, body) for label, body, _ in CASES], want)
        self.assertEqual(n, len(CASES))
        self.assertFalse(bad, f"{len(bad)} of {n} cases differ from the non-speculative server:\n"
                         + "\n".join(bad[:25]))

    def test_3_multi_token_accepts_and_the_fix_state(self):
        """What makes stock differ is the step count, not the acceptance: both sides accept several tokens a step;
        the plugin side reports the fix applied, stock disabled."""
        info = server_info()
        accept = info["internal_states"][0].get("avg_spec_accept_length")
        print("avg_spec_accept_length:", accept)
        self.assertGreater(accept, 1.5)
        state = specv2_state(info)["fixes"][FIX]["state"]
        self.assertEqual(state, "applied" if AB in ("auto", FIX) else "disabled")


class TestMinTokensChain(_MinTokens, CustomTestCase):
    SPEC = (3, 1, 4)


class TestMinTokensTree(_MinTokens, CustomTestCase):
    SPEC = (3, 4, 8)


if __name__ == "__main__":
    unittest.main()
