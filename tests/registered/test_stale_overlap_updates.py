"""#23456 on the real server: stale overlap results must not touch finished or retracted requests.

EAGLE3 (3 steps, topk 1, 4 tokens, overlap on = spec v2) with forced retraction (SGLANG_TEST_RETRACT)
and staggered finishes under concurrent load. The plugin's test-only probe observes, inside the
scheduler, every request that a late decode result still carries after it finished or was retracted.
Stock 0.5.11 grows those requests' committed KV (a retracted one past its zero allocation) and counts
spurious verify steps; with the plugin none of that happens. 0.5.12.x has the fix upstream.
"""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import AB, eagle3_args, launch, stop
from sglang_specv2_fixes.testing.client import concurrent_generate, health_ok, server_info, specv2_state
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=150, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1", bug_in="fix:skip-stale-overlap-updates")


class TestStaleOverlapUpdates(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.process = launch(
            eagle3_args(3, 1, 4) + ["--max-running-requests", "32"],
            env={"SGLANG_TEST_RETRACT": "1", "SGLANG_SPECV2_FIXES_PROBE": "1"},
        )

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_stale_results_leave_released_requests_alone(self):
        outs = concurrent_generate(96, lambda i: 8 + (i * 7) % 57, seed=1)
        for i, o in enumerate(outs):
            self.assertEqual(o["meta_info"]["completion_tokens"], 8 + (i * 7) % 57)
        info = server_info()
        state = specv2_state(info)
        probe = state["probe"]
        print("specv2 state:", state["fixes"]["skip-stale-overlap-updates"]["state"], "probe:", probe)
        accept = info["internal_states"][0].get("avg_spec_accept_length")
        print("avg_spec_accept_length:", accept)
        # the scenario really happened: late results for finished and for retracted requests
        self.assertGreater(probe["stale_finished_seen"], 0)
        self.assertGreater(probe["stale_retracted_seen"], 0)
        self.assertEqual(
            (probe["stale_finished_kv_gain"], probe["stale_retracted_kv_gain"],
             probe["committed_over_allocated"], probe["stale_stat_updates"]),
            (0, 0, 0, 0),
            f"stale overlap results changed released requests: {probe['examples']}",
        )
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())

    def test_reported_state_matches_selection(self):
        fixes = specv2_state(server_info())["fixes"]
        state = fixes["skip-stale-overlap-updates"]["state"]
        self.assertIn(state, ("applied", "upstream") if AB == "auto" else ("disabled", "upstream"))


if __name__ == "__main__":
    unittest.main()
