"""Structured output in the PD-disaggregation decode loop on the real server (#28039 up to 0.5.13, #28986 in that
loop from 0.5.14): the plugin's ``grammar-result-order`` gives ``event_loop_overlap_disagg_decode`` the grammar
sync it lacks up to 0.5.13 and, on every release, processes the pending result before the next batch is built.

One decode server, no prefill server: SGLang's own ``--disaggregation-mode decode
--disaggregation-transfer-backend fake``. Every request takes the fake transfer path (``_is_fake_transfer``): its
prompt's KV slots are allocated but never written and the "prefill" result is the metadata buffer's zeros, so the
first output token is always id 0 (``<unk>`` in the tiny vocabulary) and the draft starts from zero hidden states.
What this can show: the decode loop's own order of batch building, grammar accept, verify mask and launch, with
real grammar matchers, real verify masks and real spec-v2 launches; what it cannot: the text a real prefill would
lead to (the prompt's KV is not real, so outputs are not compared with a non-speculative server), KV transfer,
bootstrap, or a prefill server's grammar. The regex therefore allows the fake first token: ``(<unk>)?(t[0-9]+){K}``
(every tiny-vocabulary word is ``t<id>``; after K words xgrammar allows only EOS). JSON schemas cannot be served
by the tiny word-level vocabulary (no token spells ``{``), so the row is regex only.

EAGLE3 3/1/4 with overlap (spec v2), xgrammar, 64 concurrent regex requests per round, 3 rounds. A/B: every request
must end as its regex and ``max_new_tokens`` say (exactly K words then EOS, or ``length``; never ``abort``), and the
probe (``SGLANG_SPECV2_FIXES_PROBE=1``) must see no finished request in a speculative decode launch. Stock fails up
to 0.5.13 with grammar-illegal continuations or ``Tokens not accepted`` aborts (the verify's mask comes from a
grammar one step behind) and from 0.5.14 with finished requests launched in the next verify. On the GPU (triton):
stock 0.5.11-0.5.13.post1 gets requests wrong (words past the regex, aborts), 0.5.14-0.5.16 launches every request
once more after it finished (``finished_in_launch``); the plugin passes on all ten releases; 0.5.17 passes on both
sides (no EAGLE grammar sync there).
"""

import concurrent.futures
import os
import re
import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang_specv2_fixes.testing.client import health_ok, post, server_info, specv2_state
from sglang_specv2_fixes.testing.config import common_with_grammar, prompts
from sglang.test.test_utils import CustomTestCase

# the sync path exists for EAGLE up to 0.5.16 (0.5.17 advances the grammar inside verify: no sync, no hazard, both
# sides pass there; the plugin's patch still applies, for the host-draft algorithms that do sync)
register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu&fix:grammar-result-order",
                   bug_in="gpu&fix:grammar-result-order&up-to:0.5.16")

EOS = 2  # the tiny models' </s>
FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # sglang.srt.disaggregation.utils.FAKE_BOOTSTRAP_HOST on every release
N, ROUNDS = 64, 3
WORDS = re.compile(r"t[0-9]+( t[0-9]+)*")


def grammar_case(i):
    """(K words the regex allows, max_new_tokens): the fake first token counts as an output token, so K words and
    EOS fit in 16; 1 request of 4 ends by length after the fake token and one word."""
    k = 1 + i % 6
    return k, (16 if i % 4 else 2)


def generate_regex(input_ids, k, max_new_tokens, room):
    # the fake transfer path of the decode server: SGLang's own warmup and health check send this host
    payload = {"input_ids": input_ids, "bootstrap_host": FAKE_BOOTSTRAP_HOST, "bootstrap_room": room,
               "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                   "regex": f"(<unk>)?(t[0-9]+){{{k}}}"}}
    return post(payload)


def wrong_ending(k, max_new, out):
    """Why ``out`` is not what the regex and max_new_tokens allow (None when it is)."""
    reason, text = out["meta_info"]["finish_reason"], out["text"].strip()
    if reason is None or reason["type"] == "abort":
        return f"aborted: {reason}"
    if text and not WORDS.fullmatch(text):
        return f"grammar-illegal text {text!r}"
    words = len(text.split())
    if max_new > k + 2:  # <unk>, K words and EOS fit: the grammar ends first
        if (reason["type"], reason.get("matched")) != ("stop", EOS) or words != k:
            return f"{reason}, {words} words {text!r}"
    elif reason["type"] != "length" or words > k:
        return f"{reason}, {words} words {text!r}"
    return None


class TestGrammarPDDecode(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.process = launch(eagle3_args(3, 1, 4) + ["--max-running-requests", "32",
                                                      "--disaggregation-mode", "decode",
                                                      "--disaggregation-transfer-backend", "fake"],
                             env={"SGLANG_SPECV2_FIXES_PROBE": "1"},
                             common=common_with_grammar())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertEqual(info["disaggregation_mode"], "decode")
        self.assertEqual(info["disaggregation_transfer_backend"], "fake")
        self.assertFalse(info["disable_overlap_schedule"], "overlap off: no spec v2, not the overlap decode loop")
        self.assertEqual(info["grammar_backend"], "xgrammar")

    def test_2_every_constrained_request_ends_as_its_grammar_says(self):
        outs = []
        for rnd in range(ROUNDS):
            ps = prompts(N, seed=70 + rnd)
            with concurrent.futures.ThreadPoolExecutor(32) as ex:
                outs += list(ex.map(lambda i: (i, generate_regex(ps[i], *grammar_case(i), 1 + rnd * N + i)), range(N)))
        probe = specv2_state(server_info())["probe"]
        wrong = [f"request {i} (K {grammar_case(i)[0]}, max_new_tokens {grammar_case(i)[1]}): {why}"
                 for i, o in outs for why in [wrong_ending(*grammar_case(i), o)] if why]
        by_eos = sum(1 for i, o in outs if o["meta_info"]["finish_reason"] and
                     o["meta_info"]["finish_reason"].get("matched") == EOS)
        print(f"PD decode grammar ({os.environ.get('SPECV2_AB', 'auto')}): {len(outs)} requests, {by_eos} ended on "
              f"EOS, {len(wrong)} not as the regex says {wrong[:6]}; probe finished_in_launch="
              f"{probe['finished_in_launch']} launch_checks={probe['launch_checks']} examples={probe['examples'][:3]}")
        self.assertEqual(len(outs), N * ROUNDS)
        self.assertGreater(by_eos, 0, "no request ended on the grammar's EOS: the scenario did not run")
        self.assertGreater(probe["launch_checks"], 0, "the probe saw no speculative decode launch")
        self.assertEqual(wrong, [], "constrained requests did not end as their regex and max_new_tokens say")
        self.assertEqual(probe["finished_in_launch"], 0, f"finished requests at verify launch: {probe['examples']}")
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()
