"""#24413 (open upstream) on the real server: ``--grammar-backend outlines`` with a speculative algorithm. The
speculative verify walks the draft with ``spec_utils.traverse_tree``, which reads the grammar's vocab mask as 32
tokens packed per int32 word; ``OutlinesGrammar`` keeps one bool per token (True = not allowed), so the walk reads
token ``t // 32``'s bool for a draft token ``t``, and fills only the mask rows of the draft tokens it takes. What that
does to a request of the tiny walk (the same code on every release):

* a draft token that is not a multiple of 32 is never taken: the walk stops at the root, the mask rows of the other
  draft positions stay all-allowed, and the verify constrains only its first token. A greedy answer runs past the
  regex's end wherever the end falls inside an accepted run (tokens after it that the grammar forbids);
* a draft token ``t`` that is a multiple of 32 whose ``t // 32`` is not allowed (the tiny walk has t32 and t96: <s>
  and <pad> are never allowed) is taken, then rolled back: ``BaseGrammarObject.rollback`` raises
  NotImplementedError in the scheduler, and the server dies with every request in it.

The plugin's ``outlines-spec-guard`` refuses the combination at startup instead (``create_grammar_backend``: a
ValueError naming it and the way out), on every release it patches. Three servers, one per class, as a user meets
them:

* ``TestOutlinesWithEagle3``: the combination, EAGLE3 3/1/4 with overlap (spec v2). Where it starts (stock), every
  regex-constrained greedy answer must match its regex fully and be the grammar's greedy walk, and the server must
  stay up: on stock ``test_2`` (prompts whose walk has no multiple of 32 within reach) should see answers past the
  regex's end, and ``test_3`` (prompts whose first draft token is t32 / t96) the server die. Where it refuses (the plugin; required on this side), the refusal must be an
  exit at startup with an error line naming ``--grammar-backend outlines``, ``--speculative-algorithm`` and the way
  out (``--grammar-backend xgrammar`` or ``llguidance``), and the serving tests check that nothing answers on the port.
* ``TestXgrammarWithEagle3``: the way out with speculation, same cases, must pass on both sides.
* ``TestOutlinesWithoutSpeculation``: the way out keeping outlines, same cases, must pass on both sides (and shows
  that outlines itself works on the release, so the combination class fails for the combination).

outlines is in no GPU bundle: carry the release's outlines overlay (ci/gpu/make_outlines_overlay.sh,
docs/gpu-host.md); ``test_0`` fails without it, on both sides.
"""

import concurrent.futures
import os
import re
import tempfile
import time
import unittest

from sglang_specv2_fixes.testing.client import health_ok, post
from sglang_specv2_fixes.testing.config import common_with_grammar, prompts
from sglang_specv2_fixes.testing.finish_line import walk
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import AB, eagle3_args, launch, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="gpu&fix:outlines-spec-guard",
                   bug_in="gpu&fix:outlines-spec-guard")

EOS = 2  # the tiny tokenizer's </s>


def spec():
    """The speculative flags (read when a class launches: the tiny models' paths are the test run's)."""
    return eagle3_args(3, 1, 4) + ["--max-running-requests", "32"]


MISREAD_TAKEN = (32, 96)  # walk tokens t with t % 32 == 0 whose t // 32 (<s>, <pad>) the regex never allows


def start_before(token):
    """The walk token two steps before ``token``: a prompt ending on it gets ``token`` as its first draft token (the
    prefill answers the step before it)."""
    cycle = walk([token], 120)  # once round the tiny walk's cycle, ending on ``token``
    assert cycle[-1] == token
    return cycle[-3]


def regex_cases():
    """(prompt, K words, max_new_tokens): room for K words and EOS (the grammar ends the request), or exactly K (the
    length check comes first). Only prompts whose greedy walk holds no multiple of 32 within reach (no draft token
    the misread takes: on stock these show the unconstrained draft positions alone; test_3 has the others)."""
    ps = [p for p in prompts(160, seed=24) if all(t % 32 for t in walk(p, 17))][:28]
    assert len(ps) == 28
    return [(p, 1 + i % 7, 16 if i % 4 else 1 + i % 7) for i, p in enumerate(ps)]


def misread_cases():
    """Prompts whose first draft token is t32 or t96, K 2 .. 5, room for EOS."""
    out = []
    for j, token in enumerate(MISREAD_TAKEN):
        for i, p in enumerate(prompts(4, seed=60 + j)):
            out.append((p + [start_before(token)], 2 + i, 16))
    return out


def run_cases(cases):
    """Each case's answer, or the error its request got (a dead server answers nothing)."""
    def one(case):
        p, k, n = case
        try:
            return post({"input_ids": p, "sampling_params": {"temperature": 0, "max_new_tokens": n,
                                                             "regex": f"(t[0-9]+){{{k}}}"}})
        except Exception as e:  # noqa: BLE001 - what the client got is the result
            return e

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        return list(ex.map(one, cases))


def problems(cases, outs):
    """What is wrong with each answer a user got: an error, text that does not match the regex fully (the tiny
    tokenizer joins its words with spaces; the grammar sees them joined), or ids / finish reason other than the
    grammar's greedy walk (K walk tokens, then EOS, or the length cap)."""
    wrong = []
    for i, ((p, k, n), o) in enumerate(zip(cases, outs)):
        if isinstance(o, Exception):
            wrong.append(f"case {i} (k {k}): request failed: {o!r}"[:240])
            continue
        ids, reason = o["output_ids"], o["meta_info"]["finish_reason"]
        ids = ids[:-1] if n > k and ids[-1:] == [EOS] else ids  # a matched EOS may be trimmed from the ids
        want_reason = ("stop", EOS) if n > k else ("length", None)
        if not re.fullmatch(f"(t[0-9]+){{{k}}}", "".join(o["text"].split())):
            wrong.append(f"case {i} (k {k}): {o['text']!r} does not match (t[0-9]+){{{k}}}")
        elif ids != walk(p)[:k] or (reason["type"], reason.get("matched")) != want_reason:
            wrong.append(f"case {i} (k {k}): {o['output_ids']} {reason} != {walk(p)[:k]} {want_reason}")
    return wrong


def settled_text(path, quiet_s=1.0, limit_s=30.0):
    """The log at ``path`` once it stopped growing (threads still copy a dead server's last lines into it)."""
    size, deadline = -1, time.monotonic() + limit_s
    while time.monotonic() < deadline and os.path.getsize(path) != size:
        size = os.path.getsize(path)
        time.sleep(quiet_s)
    with open(path, errors="replace") as f:
        return f.read()


class RegexAnswers:
    """The regex-constrained greedy answers of the class's server (``cls.process``); mixed in before CustomTestCase."""

    def test_2_regex_answers_match_their_regex(self):
        cases = regex_cases()
        wrong = problems(cases, run_cases(cases))
        print(f"[{type(self).__name__} {AB}] regex answers: {len(wrong)} of {len(cases)} wrong; {wrong[:4]}",
              flush=True)
        self.assertEqual(wrong, [], "regex-constrained answers a user got")

    def test_3_first_draft_t32_t96(self):
        cases = misread_cases()
        wrong = problems(cases, run_cases(cases))
        print(f"[{type(self).__name__} {AB}] first draft t32/t96: {len(wrong)} of {len(cases)} wrong; {wrong[:4]}",
              flush=True)
        self.assertEqual(wrong, [], "regex-constrained answers whose first draft token is t32 or t96")

    def test_4_server_alive(self):
        self.assertTrue(health_ok(), "the server does not answer /health")
        self.assertIsNone(self.process.poll(), "the server exited")


class TestOutlinesWithEagle3(RegexAnswers, CustomTestCase):
    @classmethod
    def setUpClass(cls):
        # the server's output, also in the test's own: removed when closed
        cls.log = tempfile.NamedTemporaryFile("w", prefix=f"specv2-outlines-eagle3-{AB}-", suffix=".log")
        cls.refused = None
        try:
            cls.process = launch(spec(), common=common_with_grammar("outlines"), log=cls.log)
        except Exception as e:  # noqa: BLE001 - a refusal at startup is examined by test_1
            cls.process = None
            cls.refused = f"{settled_text(cls.log.name)}\n[launch] {e}"

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)
        cls.log.close()

    def assert_serves_nothing(self):
        """After a refusal at startup (test_1 checks how) no answer can reach a user: nothing listens on the port."""
        self.assertFalse(health_ok(), f"refused at startup ({self.reason_line()}), yet /health answers")

    def test_2_regex_answers_match_their_regex(self):
        if self.refused is not None:
            self.assert_serves_nothing()
        else:
            super().test_2_regex_answers_match_their_regex()

    def test_3_first_draft_t32_t96(self):
        if self.refused is not None:
            self.assert_serves_nothing()
        else:
            super().test_3_first_draft_t32_t96()

    def test_4_server_alive(self):
        if self.refused is not None:
            self.assert_serves_nothing()
        else:
            super().test_4_server_alive()

    def reason_line(self):
        """The last line of the refused start that names both flags (the error's message, after any source lines
        of its traceback), or None."""
        named = [ln for ln in (self.refused or "").splitlines()
                 if "--grammar-backend outlines" in ln and "--speculative-algorithm" in ln]
        return named[-1] if named else None

    def test_0_outlines_importable(self):
        try:
            import sglang.srt.constrained.outlines_backend  # noqa: F401
        except ImportError as e:
            self.fail(f"outlines is not importable here ({e!r}): carry the release's outlines overlay "
                      "(ci/gpu/make_outlines_overlay.sh, docs/gpu-host.md)")

    def test_1_starts_or_refuses_clearly(self):
        if self.refused is None:
            self.assertNotEqual(AB, "auto", "the plugin patches outlines-spec-guard on this release: the server must "
                                            "refuse --grammar-backend outlines with a speculative algorithm")
            return
        print(f"[{AB}] refused at startup:\n{self.refused[-3000:]}", flush=True)
        self.assertIn("exited", self.refused.splitlines()[-1], "not an exit at startup (a timeout is no refusal)")
        line = self.reason_line()
        self.assertIsNotNone(line, "no error line names --grammar-backend outlines and --speculative-algorithm")
        self.assertRegex(line, r"--grammar-backend (xgrammar|llguidance)", "the error names no way out")


class TestXgrammarWithEagle3(RegexAnswers, CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.process = launch(spec(), common=common_with_grammar("xgrammar"))

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)


class TestOutlinesWithoutSpeculation(RegexAnswers, CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.process = launch(["--max-running-requests", "32"], common=common_with_grammar("outlines"))

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)


if __name__ == "__main__":
    unittest.main()
