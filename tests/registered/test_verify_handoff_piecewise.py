"""verify-handoff with **piecewise CUDA graphs on**, as every release defaults them (the other rows pass
``--disable-piecewise-cuda-graph``): triton, CUDA graphs, overlap on, page size 1, forced retraction, the probe on, the
harness's strict idle / busy memory checks; the checks of test_verify_handoff.py (``testing.rows.HandoffRow``). Two
servers, one class each: an EAGLE3 chain 3 / 1 / 4 and an EAGLE3 tree 3 / 4 / 8 (``--page-size 1``).

On 0.5.13 / 0.5.13.post1 this is the row of the fix: #25879 removed the host wait on ``verify_done`` there, but
``decide_needs_cpu_seq_lens`` still forces the host mirror under piecewise graphs, and ``FutureMap.resolve_seq_lens_cpu``
then makes the host wait for each verify's publish event (its D2H stream's ``synchronize()``, which the probe counts in
``verify_host_waits``). The plugin drops that force as 0.5.14 does (#28633): it must count no host wait on a verify, and
everything else must hold. Stock (``--specv2-fixes off``) fails only ``test_7_no_host_wait_on_verify`` in both classes
there. On 0.5.11 / 0.5.12.x the same classes check the decode-preparation patch with piecewise graphs on (the target's
prefill runs in them; no decode or verify batch does): stock waits on ``verify_done`` (the chain fails test_7) and
routes explicit topk > 1 to spec v1 (the tree fails test_7's spec-v2 count)."""

import unittest

from sglang_specv2_fixes.testing.config import common_with_piecewise_graphs
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import HandoffRow
from sglang_specv2_fixes.testing.server import launch
from sglang.test.test_utils import CustomTestCase

# two servers, each capturing piecewise graphs too (~10 s more per start than test_verify_handoff.py's)
register_specv2_ci(est_time=480, suite="specv2-gpu", releases="fix:verify-handoff&gpu", bug_in="fix:verify-handoff&gpu")


class PiecewiseHandoffRow(HandoffRow):
    """HandoffRow's server with the shared flags less ``--disable-piecewise-cuda-graph``."""

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        cls.process = launch(cls.launch_args(), env=cls.server_env(), common=common_with_piecewise_graphs())


class TestVerifyHandoffPiecewise(PiecewiseHandoffRow, CustomTestCase):
    STEPS, TOPK, TOKENS = 3, 1, 4


class TestVerifyHandoffPiecewiseTree(PiecewiseHandoffRow, CustomTestCase):
    STEPS, TOPK, TOKENS = 3, 4, 8
    LAUNCH_ARGS = ("--page-size", "1")


if __name__ == "__main__":
    unittest.main()
