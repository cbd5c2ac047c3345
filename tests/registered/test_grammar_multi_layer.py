"""#31978 on the real server: the multi-layer EAGLE v2 verify (``MultiLayerEagleWorkerV2``) samples under the grammar's
vocab mask. Up to 0.5.15.post1 its verify never applies the mask the scheduler built, so the target picks tokens the
grammar forbids and the request is aborted (``Tokens not accepted``). CPU: tests/cpu/test_issue_31978_multi_layer_grammar.py
on each release's real verify.

SGLang turns multi-layer EAGLE on for MiMo-V2 targets with ``--speculative-algorithm EAGLE``
(``ServerArgs._handle_model_specific_adjustments``). The draft runners are the target checkpoint's own MTP layers,
one ``MiMoV2MTP`` runner per step. The row serves the tiny MiMo-V2-Flash shape of
``sglang_specv2_fixes.testing.tiny_models.mimo_v2`` (4 layers of full and sliding-window attention with sinks, a
dense MLP, 3 MTP layers) with dummy weights as both target and draft, with xgrammar and EAGLE 3 steps / topk 1 /
4 tokens, on **fa3**: MiMo-V2 passes ``sinks=`` to every attention call, which flashinfer refuses. triton stops in
the multi-layer draft extend: with CUDA graphs on, the SWA window indices are None (``triton-draft-extend-swa``);
eager, ``seq_lens_sum`` is None. fa3 is not in the device bundle, so
its library is carried in parts first (``ci/gpu/lease.sh fa3-parts``, then ``add`` / ``inst``; see
docs/design/device-bundles.md). Without it, both sides stop at startup.

On 0.5.13 - 0.5.15.post1 the multi-layer draft needs the plugin's ``multi-layer-draft`` to serve (its tree mask sized
from a ``seq_lens_sum`` that can be None, its eager draft extend on unplanned backends), with its own row
(test_multi_layer_serves.py). There the stock
side of this row keeps that fix on (``--specv2-fixes multi-layer-draft``), so that what it shows is the
verify's grammar, with only ``multi-layer-grammar-mask`` off. On those releases the row also runs at most 8 requests
at once, the largest CUDA graph of the shared flags: a verify outside the graphs stops the stock scheduler for another
reason (``multi-layer-verify-unplanned``, which ``multi-layer-grammar-mask`` also patches there; the serving row runs
16 at once).

Dummy weights give near-flat logits, so greedy text is no oracle here: spec and non-spec numerics pick different
near-ties. The oracle is the grammar. The regex ``(t1[0-9]){K}`` allows 10 of the 1024 tokens (t10 ... t19) for K
steps, then only EOS. An unmasked target picks one of them by chance (~1 %), a masked one always does. A/B: every
request ends with exactly K words of the regex and finish ``stop`` on EOS (``max_new_tokens`` K + 3 leaves room for
it), none is aborted, and the scheduler stays alive. Stock aborts every request, the plugin none.
"""

import concurrent.futures
import re
import unittest

from sglang_specv2_fixes import installed, releases
from sglang_specv2_fixes.testing.client import health_ok, post, server_info, specv2_state
from sglang_specv2_fixes.testing.config import MODELS_DIR, common_with_grammar, prompts
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import AB, launch, mimo_multi_layer_args, stop
from sglang_specv2_fixes.testing.tiny_models import mimo_v2
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="gpu&fix:multi-layer-grammar-mask",
                   bug_in="gpu&fix:multi-layer-grammar-mask")

EOS = 2
N, ROUNDS = 48, 2
WORD = re.compile(r"t1[0-9]")
# what multi-layer EAGLE needs to serve at all on this release: kept on the stock side, which turns off only the fix
# under test (0.5.13 - 0.5.15.post1)
SERVES = "multi-layer-draft"
NEEDS_SERVES = installed.version() in releases.release_set(f"fix:{SERVES}")
FIXES = SERVES if AB == "off" and NEEDS_SERVES else AB
MAX_RUNNING = 8 if NEEDS_SERVES else 16  # 0.5.13+: within the CUDA graphs (--cuda-graph-bs 1 2 4 8), see above


def case(i):
    """K words the regex allows for request ``i``."""
    return 1 + i % 6


class TestGrammarMultiLayer(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        path = mimo_v2.build(MODELS_DIR)
        cls.process = launch(mimo_multi_layer_args(path, MAX_RUNNING), target=path, common=common_with_grammar(),
                             fixes=FIXES)

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertTrue(info.get("enable_multi_layer_eagle"), "multi-layer EAGLE is off: not the #31978 path")
        self.assertFalse(info["disable_overlap_schedule"], "overlap off: no spec v2")
        self.assertEqual(info["grammar_backend"], "xgrammar")
        fixes = specv2_state(info)["fixes"]
        self.assertEqual(fixes["multi-layer-grammar-mask"]["state"], "applied" if AB == "auto" else "disabled")
        if NEEDS_SERVES:  # both sides
            self.assertEqual(fixes[SERVES]["state"], "applied")

    def test_2_constrained_requests_follow_the_grammar(self):
        outs = []
        for rnd in range(ROUNDS):
            ps = prompts(N, seed=70 + rnd)

            def one(i):
                k = case(i)
                body = {"input_ids": ps[i], "sampling_params": {"temperature": 0, "max_new_tokens": k + 3,
                                                                "regex": f"(t1[0-9]){{{k}}}"}}
                return i, post(body)

            with concurrent.futures.ThreadPoolExecutor(16) as ex:
                outs += list(ex.map(one, range(N)))
        wrong = []
        for i, o in outs:
            k, reason, words = case(i), o["meta_info"]["finish_reason"], o["text"].split()
            if (reason["type"], reason.get("matched")) != ("stop", EOS) or len(words) != k \
                    or not all(WORD.fullmatch(w) for w in words):
                wrong.append(f"request {i} (K {k}): {reason} {o['text']!r}")
        print(f"#31978 ({AB}, --specv2-fixes {FIXES}): {len(wrong)} of {len(outs)} requests not as the regex says; "
              f"{wrong[:4]}; "
              f"avg_spec_accept_length {server_info()['internal_states'][0].get('avg_spec_accept_length')}")
        self.assertEqual(len(outs), N * ROUNDS)
        self.assertEqual(wrong, [])
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()
