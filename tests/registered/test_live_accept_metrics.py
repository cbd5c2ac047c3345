"""Beyond upstream (live-accept-metrics): the scheduler-wide acceptance counters behind
``avg_spec_accept_length`` must count the same verify steps and accepted tokens as the per-request
``meta_info`` of the same requests.

EAGLE3 3/1/4 on spec v2 (overlap) with forced retraction and staggered finishes, so late overlap
results keep carrying finished and retracted requests. The counters are SGLang's own
(``spec_total_num_accepted_tokens`` / ``..._accept_tokens`` and ``spec_total_num_forward_ct`` plus the
current log interval), read inside the scheduler by the plugin's test-only probe, before and after the
load. Stock (both releases) adds every stale request's accept length and verify step, so the deltas
exceed the per-request sums; with the plugin they are equal. ``--decode-log-interval 1`` flushes the
interval counters into the lifetime ones each step, so ``/server_info``'s average is over the same
counters.
"""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang_specv2_fixes.testing.client import concurrent_generate, health_ok, server_info, specv2_state
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=150, suite="specv2-gpu", releases="fix:live-accept-metrics&up-to:0.5.12.post1",
                   bug_in="fix:live-accept-metrics&up-to:0.5.12.post1")


def counters():
    info = server_info()
    return specv2_state(info)["spec_counters"], info["internal_states"][0].get("avg_spec_accept_length")


class TestLiveAcceptMetrics(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.process = launch(
            eagle3_args(3, 1, 4) + ["--max-running-requests", "32", "--decode-log-interval", "1"],
            env={"SGLANG_TEST_RETRACT": "1", "SGLANG_SPECV2_FIXES_PROBE": "1"},
        )

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_global_counters_equal_per_request_meta_info(self):
        c0, _ = counters()
        outs = concurrent_generate(96, lambda i: 8 + (i * 7) % 57, seed=1)
        c1, avg = counters()
        verify = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
        drafts = sum(o["meta_info"]["spec_accepted_drafts"] for o in outs)
        probe = specv2_state(server_info())["probe"]
        print("counters before", c0, "after", c1, "avg", avg, "| meta_info: verify", verify, "accepted drafts", drafts,
              "| stale seen: finished", probe["stale_finished_seen"], "retracted", probe["stale_retracted_seen"])
        # the scenario happened: late results carried finished and retracted requests
        self.assertGreater(probe["stale_finished_seen"] + probe["stale_retracted_seen"], 0)
        self.assertEqual(
            (c1["verify_steps"] - c0["verify_steps"], c1["accepted_tokens"] - c0["accepted_tokens"]),
            (verify, drafts + verify),
            "scheduler-wide spec counters (verify steps, accepted tokens) != sums of the requests' meta_info",
        )
        # /server_info's average is exactly the lifetime counters' ratio (flushed every step)
        self.assertAlmostEqual(avg, c1["accepted_tokens"] / c1["verify_steps"], places=9)
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()
