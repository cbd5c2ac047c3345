"""#28986 (open upstream) on the real server: spec v2 + grammar + overlap launches a verify that holds a request the
forced sync has just finished; the plugin's ``grammar-result-order`` processes that result before the next batch is
built.

Up to 0.5.16 ``Scheduler.is_disable_overlap_for_batch`` forces a sync for every speculative grammar decode batch
with a pending result; ``event_loop_overlap`` has already built that batch, so ``pop_and_process`` finishes a
request (grammar-forced EOS, length) and releases its req-pool slot and KV, then ``run_batch`` launches the verify
with it (upstream #28986; CPU: tests/cpu/test_issue_28986_overlap_grammar.py on the real loop).

EAGLE3 3/1/4 with overlap (spec v2), xgrammar (COMMON's ``--grammar-backend none`` dropped), many concurrent short
requests constrained by a regex of K whole tokens (the tiny word-level vocabulary: every token is ``t<id>``; after
K tokens xgrammar allows only EOS), so most requests end on a grammar-forced EOS and the rest by length (EOS is an
output token: with ``max_new_tokens`` K + 1 the length check, which SGLang makes first, wins). The probe
(``SGLANG_SPECV2_FIXES_PROBE=1``, registered with fixes off too) counts at every speculative decode launch the
requests already finished (or with ``req_pool_idx`` None): ``finished_in_launch`` over ``launch_checks``.

A/B: the row requires ``finished_in_launch == 0`` after checking that the scenario ran (overlap on, xgrammar,
grammar-forced finishes, launches seen). Stock fails it (first GPU run, 0.5.12, stock and plugin without a fix:
155 and 136 finished requests in 26 and 27 launches). With the plugin in check mode (the runner's
``--mode-env auto:SGLANG_SPECV2_FIXES_CHECK=1``) such a launch would stop the scheduler at once.
"""

import concurrent.futures
import os
import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang_specv2_fixes.testing.client import health_ok, post, server_info, specv2_state
from sglang_specv2_fixes.testing.config import common_with_grammar, prompts
from sglang.test.test_utils import CustomTestCase

# where the sync path exists for EAGLE (need_grammar_sync without supports_grammar_overlap): 0.5.11 ... 0.5.16
register_specv2_ci(est_time=150, suite="specv2-gpu", releases="gpu&up-to:0.5.16",
                   bug_in="fix:grammar-result-order&up-to:0.5.16")

EOS = 2  # the tiny models' </s>
N, ROUNDS = 64, 3


def grammar_case(i):
    """(K tokens the regex allows, max_new_tokens): 3 of 4 requests end on the grammar-forced EOS, 1 of 4 by length."""
    k = 1 + i % 6
    return k, (16 if i % 4 else 2)


def generate_regex(input_ids, k, max_new_tokens):
    payload = {"input_ids": input_ids,
               "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "regex": f"(t[0-9]+){{{k}}}"}}
    return post(payload)


class TestGrammarOverlap28986(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.process = launch(eagle3_args(3, 1, 4) + ["--max-running-requests", "32"],
                             env={"SGLANG_SPECV2_FIXES_PROBE": "1"},
                             common=common_with_grammar())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"], "overlap off: no spec v2, no #28986 path")
        self.assertEqual(info["grammar_backend"], "xgrammar")

    def test_2_finished_request_at_verify_launch(self):
        outs = []
        for rnd in range(ROUNDS):
            ps = prompts(N, seed=40 + rnd)
            with concurrent.futures.ThreadPoolExecutor(32) as ex:
                outs += list(ex.map(lambda i: (i, generate_regex(ps[i], *grammar_case(i))), range(N)))
        probe = specv2_state(server_info())["probe"]
        print(f"#28986 probe ({os.environ.get('SPECV2_AB', 'auto')}): finished_in_launch={probe['finished_in_launch']} "
              f"launch_checks={probe['launch_checks']} examples={probe['examples']}")
        by_eos, wrong = 0, []
        for i, o in outs:
            k, max_new = grammar_case(i)
            reason = o["meta_info"]["finish_reason"]
            if max_new > k + 1:  # the regex ends first: xgrammar allows only EOS after K tokens, and EOS fits
                if (reason["type"], reason.get("matched")) != ("stop", EOS) or len(o["text"].split()) != k:
                    wrong.append(f"request {i} (K {k}, max_new_tokens {max_new}): {reason} {o['text']!r}")
                by_eos += 1
            elif reason["type"] != "length":
                wrong.append(f"request {i} (K {k}, max_new_tokens {max_new}): {reason} {o['text']!r}")
        print(f"grammar-forced EOS finishes expected: {by_eos} of {len(outs)}; not as expected: {len(wrong)} {wrong[:5]}")
        self.assertGreater(by_eos, 0)
        self.assertGreater(probe["launch_checks"], 0, "the probe saw no speculative decode launch")
        self.assertEqual(probe["finished_in_launch"], 0, f"finished requests at verify launch: {probe['examples']}")
        self.assertEqual(wrong, [], "requests did not end as the regex and max_new_tokens say")
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()
