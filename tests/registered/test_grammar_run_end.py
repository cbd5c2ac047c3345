"""#28682 on the real server: with spec v2 and a grammar, an accepted run ends at the token that terminates the
grammar. Up to 0.5.13.post1 the verify's vocab mask allows every token after the grammar's terminal token, so the
target accepts the draft's tokens past it, and the result processor appends the whole run to ``output_ids`` and
commits it to KV (CPU: tests/cpu/test_issue_28682_grammar_run_end.py on the release's real objects).

xgrammar ends a grammar only on a stop token (the model's ``eos_token_id``), which the tiny walk never proposes.
The row therefore serves the tiny target under a config whose ``eos_token_id`` also lists one walk token, X
(``tiny_models.llama.derived_target``: same weights; xgrammar's stop tokens are ``model_config.hf_eos_token_id``).
Each request's prompt ends on the walk token J steps before X and asks for the regex ``(t[0-9]+){J}``: J walk tokens
match it, then the mask allows only stop tokens, X is the walk's own next token, so the grammar terminates on X
inside an accepted run wherever X is not the run's last token (EAGLE3 chain 3/1/4, the walk drafts and accepts
runs of 4). J runs over 1 ... 24 so X falls at every position of a run.

What the client receives is the same on stock (on the GPU, 0.5.11-0.5.13.post1: no request differs):
X is also a stop token, and ``check_finished`` runs before the grammar accepts the run, so the token check sets
``finished_len`` at X and the answer is cut there. The bug is in the scheduler's state: ``output_ids`` (and the
committed KV, the acceptance counters) keep the run past X. The probe (``SGLANG_SPECV2_FIXES_PROBE=1``) counts a
request with a grammar that finishes on a matched token with ``output_ids`` past ``finished_len``
(``grammar_past_end`` over ``grammar_finishes``); with ``ignore_eos`` the grammar is the only end and the tokens
past it would reach the client, but then the non-speculative server, too, appends one unconstrained token after
the grammar's end (its mask skips a terminated grammar), so there is no oracle for that case and the row does not
use it.

A/B: every case equals the same target (same config) served without speculation, with xgrammar (text, output ids,
finish reason with ``matched`` X, completion tokens; the oracle ends on X after exactly J tokens, the premise),
and ``grammar_past_end == 0`` after checking that grammar requests finished. Stock fails the probe check on
0.5.11-0.5.13.post1; with the plugin in check mode such a finish would stop the scheduler.
"""
import concurrent.futures
import functools
import os
import unittest

from sglang_specv2_fixes.testing import finish_line
from sglang_specv2_fixes.testing.client import send, server_info, specv2_state
from sglang_specv2_fixes.testing.config import MODELS_DIR, common_with_grammar, prompts
from sglang_specv2_fixes.testing.reference import prefetch_responses, reference_responses
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import AB, eagle3_args, launch, stop
from sglang_specv2_fixes.testing.tiny_models import llama as tiny
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=200, suite="specv2-gpu", releases="gpu&fix:grammar-run-end",
                   bug_in="gpu&fix:grammar-run-end")

EOS = 2  # the tiny models' </s>
J_MAX, PREFIXES = 24, 4


X = int(tiny.plan()[1][0])  # the walk token the derived target's config adds to ``eos_token_id`` (the first of the walk)
CYCLE = finish_line.walk([X], len(tiny.plan()[1]))  # the walk after X, once round its cycle (ends on X)


def start_for(j):
    """The walk token whose greedy continuation has X at index ``j`` (``j`` tokens before it): ``j + 1`` steps
    before X on the cycle (``j`` < the cycle's length, so X is not among the ``j``)."""
    return CYCLE[len(CYCLE) - 2 - j]


def cases():
    """(J, /generate body): prompts of the usual random prefix ending on the start token for J; max_new_tokens
    leaves room for a whole run after X."""
    out = []
    for j in range(1, J_MAX + 1):
        w = start_for(j)
        for p in prompts(PREFIXES, seed=100 + j):
            body = {"input_ids": p + [w],
                    "sampling_params": {"temperature": 0, "max_new_tokens": j + 9, "regex": f"(t[0-9]+){{{j}}}"}}
            out.append((j, body))
    return out


CASES = cases()
BODIES = [b for _, b in CASES]
GRAMMAR = ["--grammar-backend", "xgrammar"]  # the reference server's COMMON has `--grammar-backend none` first


@functools.cache
def target():
    return tiny.derived_target(os.path.join(MODELS_DIR, f"target-eos-{X}"), __file__, eos_token_id=[EOS, X])


class TestGrammarRunEnd(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        prefetch_responses(BODIES, target=target(), extra_args=GRAMMAR, keep=finish_line.received)
        cls.process = launch(eagle3_args(3, 1, 4) + ["--max-running-requests", "32"], target=target(),
                             env={"SGLANG_SPECV2_FIXES_PROBE": "1"}, common=common_with_grammar())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config_and_premise(self):
        """Overlap and xgrammar on; the oracle ends every case on X after exactly J tokens."""
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"], "overlap off: no spec v2")
        self.assertEqual(info["grammar_backend"], "xgrammar")
        want = reference_responses(BODIES, target=target(), extra_args=GRAMMAR, keep=finish_line.received)
        self.assertEqual(len(want), J_MAX * PREFIXES)
        for (j, body), w in zip(CASES, want):
            self.assertEqual(w["output_ids"], finish_line.walk(body["input_ids"], j + 1), f"J {j}")
            self.assertEqual((w["finish_reason"]["type"], w["finish_reason"].get("matched")), ("stop", X), f"J {j}")

    def test_2_every_output_ends_at_the_grammar_end(self):
        want = reference_responses(BODIES, target=target(), extra_args=GRAMMAR, keep=finish_line.received)
        with concurrent.futures.ThreadPoolExecutor(32) as ex:
            got = list(ex.map(lambda b: finish_line.received(send(b)), BODIES))
        wrong = [f"J {j}: got {g} want {w}" for (j, _), g, w in zip(CASES, got, want) if g != w]
        past = sum(1 for g, w in zip(got, want) if len(g["output_ids"] or []) > len(w["output_ids"]))
        print(f"#28682 ({AB}): {len(wrong)} of {len(CASES)} differ from the "
              f"non-speculative server, {past} with tokens past the grammar's end; {wrong[:3]}")
        info = server_info()
        probe = specv2_state(info)["probe"]
        print(f"probe: grammar_finishes={probe['grammar_finishes']} grammar_past_end={probe['grammar_past_end']} "
              f"examples={probe['examples']}; avg_spec_accept_length "
              f"{info['internal_states'][0].get('avg_spec_accept_length')}")
        self.assertEqual(len(got), len(CASES))
        self.assertEqual(wrong, [])
        self.assertGreaterEqual(probe["grammar_finishes"], len(CASES) // 2, "grammar requests did not finish in decode")
        self.assertEqual(probe["grammar_past_end"], 0, f"output_ids past the grammar's end: {probe['examples']}")
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()
