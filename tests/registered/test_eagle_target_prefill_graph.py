"""eagle-target-prefill-graph on the real server (0.5.11 - 0.5.13.post1): EAGLE3 and EAGLE chains 3/1/4 on spec v2,
triton, with the piecewise prefill CUDA graph on (the release's default: this row's shared flags are COMMON without
``--disable-piecewise-cuda-graph``, its target-only reference's too), the probe on (``SGLANG_SPECV2_FIXES_PROBE``)
and the fix's opt-in switch set where the fix has one (``FIX.opt_in``).

The release captures that graph with NULL hidden states, the spec-v2 target asks FULL on every prefill, and the
runner's ``can_run`` rejects the mismatch: every target prefill runs eagerly. The probe counts the runner's answers
inside the scheduler (``prefill_graph_checks``: extend forwards asked about; ``prefill_graph_replays``: answered
True, so the graph replayed). The tiny drafts carry half of each draft logit on the target's hidden states (EAGLE3:
the auxiliary layers the logits processor concatenates; EAGLE: the graph's final hidden states themselves), so wrong
hidden states from a replayed prefill show as rejected first drafts.

1. config: spec v2, the piecewise graph on, the fix applied (plugin) / disabled (stock).
2. 16 concurrent prompts: greedy outputs equal the same target served without speculation.
3. 8 prompts alone from an empty cache: 8 new tokens take 2 verify steps (every draft accepted, the first chain built
   from the prefill's hidden states), and each prompt's prefill was asked of the graph.
4. every target prefill of the server so far replayed the graph (replays == checks > 0).

Expected: stock fails test 4 (no replay: ``prefill_graph_replays`` 0); the plugin passes every test. CPU:
tests/cpu/test_fix_eagle_target_prefill_graph.py on each release's real runner."""

import concurrent.futures
import unittest

from sglang_specv2_fixes.fixes.eagle_target_prefill_graph import FIX
from sglang_specv2_fixes.selection import ENV_PROBE
from sglang_specv2_fixes.testing.client import generate, server_info, specv2_state
from sglang_specv2_fixes.testing.config import common_with_piecewise_graph, prompts
from sglang_specv2_fixes.testing.reference import prefetch_reference, reference_outputs
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import AB, eagle3_args, launch, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=420, suite="specv2-gpu", releases="fix:eagle-target-prefill-graph",
                   bug_in="fix:eagle-target-prefill-graph")

N_REF, REF_TOKENS, STEP_TOKENS = 16, 48, 8


def graph_counts():
    probe = specv2_state(server_info())["probe"]
    return probe["prefill_graph_checks"], probe["prefill_graph_replays"]


class _TargetPrefillGraph(SpecChecks):
    ALGORITHM, DRAFT = "EAGLE3", "eagle3"

    @classmethod
    def setUpClass(cls):
        prefetch_reference(prompts(N_REF, seed=7), REF_TOKENS, common=common_with_piecewise_graph())
        env = {ENV_PROBE: "1", **({FIX.opt_in: "1"} if FIX.opt_in else {})}
        cls.process = launch(eagle3_args(3, 1, 4, algorithm=cls.ALGORITHM, draft=cls.DRAFT), env=env,
                             common=common_with_piecewise_graph())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"], "overlap off: no spec v2")
        self.assertFalse(info["disable_piecewise_cuda_graph"], "the piecewise prefill graph is off")
        self.assertEqual((info["attention_backend"], info["speculative_eagle_topk"]), ("triton", 1))
        state = specv2_state(info)["fixes"][FIX.name]["state"]
        self.assertEqual(state, "applied" if AB in ("auto", FIX.name) else "disabled")

    def test_2_greedy_equals_target_only(self):
        ps = prompts(N_REF, seed=7)
        ref = reference_outputs(ps, REF_TOKENS, common=common_with_piecewise_graph())
        with concurrent.futures.ThreadPoolExecutor(N_REF) as ex:
            got = list(ex.map(lambda p: generate(p, REF_TOKENS)["output_ids"], ps))
        for i, (g, r) in enumerate(zip(got, ref)):
            self.assertEqual(g, r, f"prompt {i}: speculative greedy output differs from target-only")
        self.check_alive()

    def test_3_first_drafts_after_each_prefill_accepted(self):
        ps = prompts(8, seed=21)
        checks0, _ = graph_counts()
        steps = self.verify_steps(ps, STEP_TOKENS)
        checks1, replays = graph_counts()
        print(f"{type(self).__name__}: verify steps {steps}; prefill graph checks {checks1 - checks0} for "
              f"{len(ps)} prompts, replays so far {replays}")
        self.assertEqual(steps, [2] * len(ps), "a draft chain after the prefill was rejected (its hidden states)")
        self.assertGreaterEqual(checks1 - checks0, len(ps), "a prompt's prefill was not asked of the graph")

    def test_4_every_target_prefill_replayed_the_graph(self):
        checks, replays = graph_counts()
        print(f"{type(self).__name__} ({AB}): prefill_graph_checks {checks}, prefill_graph_replays {replays}")
        self.assertGreater(checks, 0, "the probe saw no prefill asked of the piecewise graph")
        self.assertEqual(replays, checks, "target prefills ran eagerly instead of replaying the piecewise graph")
        self.check_alive()


class TestEagle3TargetPrefillGraph(_TargetPrefillGraph, CustomTestCase):
    ALGORITHM, DRAFT = "EAGLE3", "eagle3"


class TestEagleTargetPrefillGraph(_TargetPrefillGraph, CustomTestCase):
    ALGORITHM, DRAFT = "EAGLE", "eagle"


if __name__ == "__main__":
    unittest.main()
