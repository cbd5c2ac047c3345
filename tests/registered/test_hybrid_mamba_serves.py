"""mamba-track-freed-rows on the real server: a hybrid Gated-DeltaNet target (the tiny Qwen3-Next shape, dummy
weights) with its MTP draft on spec v2 (``--speculative-algorithm NEXTN``, 3 steps / topk 1 / 4 tokens), the radix
cache on with the mamba ``extra_buffer`` strategy, xgrammar, forced retraction (``SGLANG_TEST_RETRACT``) and the strict
busy memory check. A request freed before a verify launch that still holds it has ``mamba_next_track_idx`` None:
stock up to 0.5.15.post1 then stops the scheduler with a ``TypeError`` in the verify's track indices (#27325,
#28407); 0.5.16 / 0.5.17 point the freed row at a slot a live request may own (#29449), which dummy weights cannot
show as wrong text. The known way in is #28986 (up to 0.5.16): with a grammar, a speculative decode batch forces a
sync that finishes requests of the batch already built, and the verify is launched with them
(test_grammar_overlap_28986.py); also a retracted grammar request whose re-prefill ends it. The probe
(``SGLANG_SPECV2_FIXES_PROBE``) counts such launches, and the row requires none (``grammar-result-order``): on 0.5.12.x
stock launches them (seen on the GPU) without reaching the ``TypeError`` (their track index was
still set at the launch). Besides the A/B modes, run the mode ``mamba-track-freed-rows`` (this fix alone, ``grammar-result-order``
off, so the freed rows do reach the verify): it must pass where stock fails. CPU:
tests/cpu/test_fix_mamba_track_freed_rows.py on each release's real functions.

On 0.5.14 - 0.5.16 both sides first stop at the largest captured batch size in the triton verify graph (the draft's
mask sized for ``bs * context_len``, copied into a buffer one draft-width short: ``triton-verify-mask-size``), so
there the plugin side passes with that fix and stock fails on it (seen on the GPU).

Dummy weights give near-flat logits, so greedy text is no oracle: plain requests return exactly ``max_new_tokens``
tokens (``ignore_eos``) with finish ``length``, regex requests end as their regex and ``max_new_tokens`` say (K whole
tokens then the grammar-forced EOS, or ``length``), aborted requests return with finish ``abort``, speculative verify
steps ran and the scheduler stays alive. Server flags: ``tiny_models/qwen3_next.py``'s docstring.
"""

import concurrent.futures
import unittest

from sglang_specv2_fixes.testing.client import post, server_info, specv2_state
from sglang_specv2_fixes.testing.config import MODELS_DIR, common_with_grammar, prompts
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import AB, eagle3_args, launch, stop
from sglang_specv2_fixes.testing.tiny_models import qwen3_next
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="gpu&fix:mamba-track-freed-rows",
                   bug_in="gpu&fix:mamba-track-freed-rows&up-to:0.5.16")

N, ROUNDS = 32, 2
FIX = "mamba-track-freed-rows"
EOS = 2  # the tiny tokenizer's </s>


def max_new_tokens(i):
    return 4 + 5 * (i % 11)


class TestHybridMambaServes(CustomTestCase):
    # no target-only reference (dummy weights): SpecChecks' length, liveness and abort checks only
    check_alive = SpecChecks.check_alive
    check_concurrent_abort = SpecChecks.check_concurrent_abort
    check_length_rounds = SpecChecks.check_length_rounds

    @classmethod
    def setUpClass(cls):
        path = qwen3_next.build(MODELS_DIR)
        cls.process = launch(
            eagle3_args(3, 1, 4, algorithm="NEXTN", draft_path=path)
            + ["--load-format", "dummy", "--speculative-draft-load-format", "dummy",
               "--mamba-scheduler-strategy", "extra_buffer", "--max-running-requests", "16"],
            target=path, env={"SGLANG_TEST_RETRACT": "1", "SGLANG_SPECV2_FIXES_PROBE": "1"},
            common=common_with_grammar())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"], "overlap off: no spec v2")
        self.assertFalse(info.get("disable_radix_cache"), "radix cache off: no extra_buffer tracking")
        self.assertEqual(info["grammar_backend"], "xgrammar")
        state = specv2_state(info)["fixes"][FIX]["state"]
        self.assertEqual(state, "applied" if AB in ("auto", FIX) else "disabled")

    def test_2_mixed_lengths_with_retraction(self):
        self.check_length_rounds(f"hybrid mamba serves ({AB})", N, ROUNDS, 60, max_new_tokens, N)
        self.check_alive()

    def test_3_regex_requests_finish_in_launched_verifies(self):
        outs = []
        for rnd in range(3):
            ps = prompts(64, seed=70 + rnd)

            def one(i):
                k, max_new = 1 + i % 6, (16 if i % 4 else 2)  # 3 of 4 end on the grammar-forced EOS
                body = {"input_ids": ps[i], "sampling_params": {"temperature": 0, "max_new_tokens": max_new,
                                                                "regex": f"(t[0-9]+){{{k}}}"}}
                return k, max_new, post(body)

            with concurrent.futures.ThreadPoolExecutor(32) as ex:
                outs += list(ex.map(one, range(64)))
        probe = specv2_state(server_info())["probe"]
        wrong, by_eos = [], 0
        for k, max_new, o in outs:
            reason = o["meta_info"]["finish_reason"]
            if max_new > k + 1:
                by_eos += 1
                if (reason["type"], reason.get("matched")) != ("stop", EOS) or len(o["text"].split()) != k:
                    wrong.append(f"K {k}: {reason} {o['text']!r}")
            elif reason["type"] != "length":
                wrong.append(f"K {k}, max_new_tokens {max_new}: {reason}")
        print(f"hybrid regex ({AB}): finished_in_launch={probe['finished_in_launch']} launch_checks="
              f"{probe['launch_checks']}; {by_eos} grammar-forced EOS expected; not as expected: {len(wrong)} {wrong[:4]}")
        self.assertGreater(by_eos, 0)
        self.assertGreater(probe["launch_checks"], 0, "the probe saw no speculative decode launch")
        self.assertEqual(wrong, [])
        self.check_alive()
        if AB != FIX:  # alone, the fix lets freed rows reach the verify (grammar-result-order off) and must survive them
            self.assertEqual(probe["finished_in_launch"], 0, f"finished requests at verify launch: {probe['examples']}")

    def test_4_concurrent_abort(self):
        self.check_concurrent_abort(n=16, tokens=600)

    def test_5_mixed_lengths_after_aborts(self):
        self.test_2_mixed_lengths_with_retraction()


if __name__ == "__main__":
    unittest.main()
