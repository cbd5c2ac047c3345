"""The catalogue of known upstream spec-v2 bugs: one record per bug, and this plugin's answer to it.

    BUGS                 every record (the fixes of the release table and every item of the upstream survey)
    problems()           where the catalogue and the release table disagree (a CPU test requires none)
    evidence_affected()  a record's source markers read in one release tree: affected or not
    markdown()           docs/known-bugs.md;  readme_claim(): the README's sentence about known bugs

    python -m sglang_specv2_fixes.known_bugs > docs/known-bugs.md     # regenerate (CI fails while it is stale)

A record says which releases of the table have the bug in their stock source (``affected``, read from each
release's wheel) and what this plugin does about it (``answer``):

* a fix name: the fix of the release table that covers it. The table must patch that fix on exactly the releases
  its records call affected (see ``problems()``);
* ``upstream``: every release of the table already has upstream's fix (none is affected);
* ``not-affected``: no release of the table has the bug's code path (none is affected);
* ``not-backported``: some releases are affected and this plugin does not patch it; ``reason`` says why (planned
  in an issue, needs hardware or a setup no test here can show, the bug is outside SGLang's Python, ...).

How ``affected`` was read is in ``verified``; where that reading is a marker in the source (a regular
expression in a file), ``evidence`` holds it and tests/cpu/test_known_bugs.py re-reads it in every release tree
it finds, so a record that disagrees with a release's source fails there. Records of the table's fixes are
verified by the table's own fingerprints (tests/cpu/test_source_only_releases.py, test_fingerprints.py).
Nothing here is imported by the plugin at start-up.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import sys
import textwrap
from typing import Dict, List, Optional, Tuple

from . import catalog, releases
from .catalog import Patched

UPSTREAM = catalog.UPSTREAM  # "upstream"
NOT_AFFECTED = "not-affected"
NOT_BACKPORTED = "not-backported"
ANSWERS = (UPSTREAM, NOT_AFFECTED, NOT_BACKPORTED)  # or the name of a fix of the release table

ORDER = list(releases.RELEASES)


def span(first: str, last: str) -> Tuple[str, ...]:
    """The releases of the table from ``first`` to ``last`` (both included)."""
    return tuple(ORDER[ORDER.index(first): ORDER.index(last) + 1])


def since(first: str) -> Tuple[str, ...]:
    """``first`` and every later release of the table (a bug still open upstream: a release added to the table is
    affected until a record says otherwise, and the evidence test reads its source)."""
    return tuple(ORDER[ORDER.index(first):])


NONE: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Evidence:
    """A marker in a release's source: ``pattern`` (regular expression, ``re.M``) searched in the files that match
    ``files`` (a glob relative to the folder holding ``sglang/``; ``**`` spans folders). ``fixed=True``: a match
    means the release has upstream's fix (no match: affected); ``fixed=False``: a match means it has the bug."""

    files: str
    pattern: str
    fixed: bool


@dataclasses.dataclass(frozen=True)
class Bug:
    id: str  # stable slug
    title: str
    refs: Tuple[str, ...]  # upstream issues / PRs ("#23802"); () for a bug found here (beyond upstream)
    found: str  # where it was found: "release table" or the survey's item ("survey A", "survey watch list", ...)
    symptom: str  # what the user sees
    affected: Tuple[str, ...]  # releases of the table whose stock source has the bug (table order)
    fixed_in: Optional[str]  # first release of the table with upstream's fix; None: open upstream (as of the last)
    answer: str  # a fix name, or one of ANSWERS
    reason: str  # why this answer (what is missing for a backport, where upstream fixed it, ...)
    verified: str  # how ``affected`` was read: function / fingerprint / grep
    evidence: Tuple[Evidence, ...] = ()  # re-read by tests/cpu/test_known_bugs.py in every release tree present

    @property
    def is_fix(self) -> bool:
        return self.answer not in ANSWERS


_TABLE = "release table: the patch file's `before` fingerprints match the stock source where it is applied, " \
         "each note's checked function elsewhere (tests/cpu/test_source_only_releases.py, test_fingerprints.py)"
_SB = "sglang/srt/managers/schedule_batch.py"
_SPEC = "sglang/srt/speculative/*.py"
# the spec-v2 verify's sampling: EagleVerifyInputV2Mixin.sample (eagle_info_v2.py, up to 0.5.13.post1), eagle_sample
# (eagle_utils.py, from 0.5.14)
_VERIFY_SAMPLING = ("sglang/srt/speculative/eagle_info_v2.py", "sglang/srt/speculative/eagle_utils.py")


# the spec-v2 decode feed of the penalizers, once per verify step (spec-penalties-per-step, spec-min-tokens-per-step)
_SPEC_PENALTY_FEED = Evidence(_SPEC, r"# This is a relaxed version of penalties for speculative decoding\.\n\s+"
                                     r"if batch\.sampling_info\.penalizer_orchestrator\.is_required:", fixed=False)


def _fixed_in_verify_sampling(pattern: str) -> Tuple[Evidence, ...]:
    """Evidence that a release has the fix where ``pattern`` appears in either file of the verify's sampling."""
    return tuple(Evidence(f, pattern, fixed=True) for f in _VERIFY_SAMPLING)


def _fix_record(name, refs, symptom, affected, fixed_in, reason, extra=""):
    return Bug(id=name, title=_fix_title(name), refs=refs, found="release table", symptom=symptom,
               affected=affected, fixed_in=fixed_in, answer=name, reason=reason, verified=_TABLE + extra)


def _fix_title(name):
    from .fixes import ALL_FIXES

    return next(f.title for f in ALL_FIXES if f.name == name)


BUGS: Tuple[Bug, ...] = (
    # ------------------------------------------------------------------------ the release table's fixes
    _fix_record(
        "skip-stale-overlap-updates", ("#23456",),
        "late overlap results extend the committed KV of finished / retracted requests past their allocation and "
        "add spurious acceptance statistics",
        span("0.5.11", "0.5.11"), "0.5.12", "patched on 0.5.11; upstream from 0.5.12"),
    _fix_record(
        "tree-drafting", ("#26866",),
        "the default EAGLE / EAGLE3 parameters (auto-chosen topk 4) run the unfinished spec-v2 tree path: "
        "'vectorized gather kernel index out of bounds' under concurrency, wrong bonus tokens / hidden states / KV",
        span("0.5.11", "0.5.12.post1"), "0.5.13", "patched on 0.5.11 … 0.5.12.post1; upstream from 0.5.13"),
    _fix_record(
        "live-accept-metrics", (),
        "avg_spec_accept_length, verify counts and generation throughput count requests whose tokens were "
        "discarded (late overlap results), so they disagree with the per-request meta_info",
        since("0.5.11"), None, "beyond upstream (open as of 0.5.23): patched on every release"),
    _fix_record(
        "routed-experts-draft-guard", ("#26980",),
        "--enable-return-routed-experts with an EAGLE draft: the scheduler dies at startup (draft re-creates the "
        "capturer; upstream from 0.5.15); with tree drafting the routed experts of accepted tokens are other tree "
        "nodes' rows (not upstream)",
        since("0.5.11"), None, "patched on every release (the capture-row compaction is open upstream)"),
    _fix_record(
        "draft-extend-kv-range", ("#26651", "#27545"),
        "the triton spec-v2 draft-extend CUDA graph counts the just-written draft KV twice: lower acceptance on "
        "triton (text unaffected)",
        span("0.5.11", "0.5.12.post1"), "0.5.13", "patched on 0.5.11 … 0.5.12.post1; upstream from 0.5.13"),
    _fix_record(
        "chunked-prefill-draft-chain", ("#26800",),
        "the draft KV at each chunked-prefill boundary is built from the target's prediction instead of the prompt "
        "token: lower acceptance for prompts longer than --chunked-prefill-size (text unaffected)",
        span("0.5.11", "0.5.12.post1"), "0.5.13", "patched on 0.5.11 … 0.5.12.post1; upstream from 0.5.13"),
    _fix_record(
        "bonus-slot-accounting", ("#22651",),
        "a finished turn's cached KV is one token short, breaking streaming-session KV inheritance",
        NONE, "0.5.11", "upstream in 0.5.11 … 0.5.14; the pre-claim scheme is gone from 0.5.15 (#28754); reported "
        "only"),
    _fix_record(
        "accept-length-split", ("#23962",),
        "one field meant both 'accepted drafts' and 'accepted drafts + bonus', inviting off-by-one bugs",
        NONE, "0.5.11", "upstream in every release; reported only"),
    _fix_record(
        "seq-lens-helper", ("#25818",),
        "stale seq_lens_cpu / seq_lens_sum after an overlap snapshot / restore",
        NONE, "0.5.13", "no overlap snapshot before 0.5.13 (not applicable), upstream from 0.5.13; reported only"),
    _fix_record(
        "grammar-result-order", ("#28986",),
        "requests finished by the pending overlap result (grammar EOS, stop, length) are launched in the next "
        "verify after their slot and KV were released: hybrid Mamba/GDN targets crash, dense targets write KV into "
        "freed slots",
        since("0.5.11"), None, "open upstream: patched on every release (Scheduler.event_loop_overlap; the PD "
        "decode loop: records pd-decode-grammar-sync and pd-decode-grammar-order)"),
    _fix_record(
        "draft-decode-positions", ("#25015",),
        "EAGLE draft decode step i runs at RoPE position seq_lens + i + 1 while writing slot seq_lens + i: lower "
        "acceptance (text unaffected)",
        span("0.5.11", "0.5.11"), "0.5.12", "patched on 0.5.11; upstream from 0.5.12"),
    # ------------------------------------------------------------------------ survey section 1, items A-M
    Bug(
        id="stop-string-multi-token", title="multi-token finish: stop strings missed or leaked",
        refs=("#23802", "#25980", "#28802", "#27637"), found="survey A",
        symptom="a stop string early in a long accepted run is never seen (generation runs past `stop`); a matched "
        "stop string leaves the tokens after it in the output; EOS and a stop string in one run finish on EOS and "
        "leak the stop string; token id == vocab_size passes the range check",
        affected=span("0.5.11", "0.5.13.post1"), fixed_in="0.5.14", answer="multi-token-finish",
        reason="patched on 0.5.11 … 0.5.13.post1 (with stop-beats-max-new-tokens); upstream from 0.5.14",
        verified="grep `def _stop_match_tail_len` in schedule_batch.py (Req): absent up to 0.5.13.post1, present "
        "from 0.5.14 (with `_locate_str_stop_finished_len` and the string check before the token check)",
        evidence=(Evidence(_SB, r"def _stop_match_tail_len\(", fixed=True),)),
    Bug(
        id="stop-beats-max-new-tokens", title="EOS / stop inside an accepted run that crosses max_new_tokens",
        refs=("#33758", "#31599", "#31569", "#30291", "#33045"), found="survey B",
        symptom="the output is `[..., <eos>, <junk>]` with finish_reason 'length' instead of 'stop' when the step "
        "that reaches max_new_tokens also accepted EOS / a stop before the cap",
        affected=span("0.5.11", "0.5.17"), fixed_in="0.5.18", answer="multi-token-finish",
        reason="patched on 0.5.11 … 0.5.17; upstream from 0.5.18 (multi-token-finish stays patched there for "
        "record first-finish-in-run)",
        verified="grep `def _cap_finished_len_at_max_new_tokens` in schedule_batch.py: absent up to 0.5.17 (the "
        "length check runs first in check_finished / update_finish_state), present from 0.5.18",
        evidence=(Evidence(_SB, r"def _cap_finished_len_at_max_new_tokens\(", fixed=True),)),
    Bug(
        id="first-finish-in-run", title="multi-token finish: the check first in the release's order wins, not the "
        "first finish in the run",
        refs=(), found="found here: multi-token-finish C, issue 25, beyond upstream",
        symptom="an accepted run holding two finishes ends at the one the release checks first, wherever in the run "
        "it is: from 0.5.14 a stop token followed by a stop string in the same run ends at the string and emits "
        "the tokens after the stop token (and an EOS followed by an out-of-range id ends at the id); on 0.5.11 … "
        "0.5.13.post1 a stop string (or an out-of-range id) followed by a stop token ends at the token; of two stop "
        "strings the one listed first wins. One-token decoding stops at the first finish",
        affected=since("0.5.11"), fixed_in=None, answer="multi-token-finish",
        reason="patched on every release, beyond upstream (open as of 0.5.23): each release's finish check calls "
        "first_finish, the earliest finish position in the run wins and a tie goes to the release's own "
        "one-token order; 0.5.18 … 0.5.23 get patches/multi-token-finish/0.5.18.patch for this alone",
        verified="release table: multi-token-finish's patch files replace check_finished / update_finish_state on "
        "every release (0.5.18 … 0.5.23: update_finish_state byte-identical, ac20519c269e99ac); "
        "tests/cpu/test_fix_multi_token_finish.py runs each release's own finish check on a stop token then a stop "
        "string in one run and on the reverse, and requires stock to end one of the two at the later finish on "
        "every release"),
    Bug(
        id="pd-decode-grammar-sync", title="PD-disaggregation decode loop has no spec + grammar overlap guard",
        refs=("#28039",), found="survey C",
        symptom="disaggregated decode + EAGLE/MTP + constrained decoding: the verify mask comes from a stale grammar "
        "state ('Tokens not accepted' aborts, grammar-illegal tokens); with DP attention one rank diverges and the "
        "engine hangs",
        affected=span("0.5.11", "0.5.13.post1"), fixed_in="0.5.14", answer="grammar-result-order",
        reason="patched on 0.5.11 … 0.5.13.post1: the PD decode loop gets 0.5.14's sync together with the "
        "result-first order; upstream from 0.5.14",
        verified="grep `is_disable_overlap_for_batch` in disaggregation/decode.py "
        "(event_loop_overlap_disagg_decode): absent up to 0.5.13.post1, present from 0.5.14",
        evidence=(Evidence("sglang/srt/disaggregation/decode.py", r"is_disable_overlap_for_batch", fixed=True),)),
    Bug(
        id="grammar-run-past-end", title="spec v2 + grammar: tokens past the grammar's end committed and emitted",
        refs=("#28682",), found="survey D",
        symptom="the verify's vocab mask allows every token after the grammar's terminating token: tokens past the "
        "grammar's end are accepted, committed to KV and appended to output_ids (sent to the client where no stop "
        "token cuts them)",
        affected=span("0.5.11", "0.5.13.post1"), fixed_in="0.5.14", answer="grammar-run-end",
        reason="patched on 0.5.11 … 0.5.13.post1 (the accepted run is cut at the terminating token); upstream "
        "from 0.5.14",
        verified="grep `_accept_grammar_tokens` under sglang/srt/managers/: absent up to 0.5.13.post1 (grammar "
        "tokens accepted in the result loop after the finish check, whole run), present from 0.5.14",
        evidence=(Evidence("sglang/srt/managers/**/*.py", r"_accept_grammar_tokens", fixed=True),)),
    Bug(
        id="pd-decode-grammar-double-accept", title="PD decode + EAGLE + grammar: the prefill token accepted twice",
        refs=("#29110",), found="survey D",
        symptom="disaggregated decode with EAGLE: every grammar-constrained request ends FINISH_ABORT ('Tokens not "
        "accepted: <tok>', the token already accepted)",
        affected=span("0.5.11", "0.5.13.post1"), fixed_in="0.5.14", answer=NOT_BACKPORTED,
        reason="the double-accept site was not located in these releases' source (process_prebuilt_extend accepts "
        "the prefill token only while current_token is None, as in 0.5.14; issue 26's reading), so there is "
        "nothing known to patch; reproducing it needs PD disaggregation with EAGLE and a json_schema request",
        verified="report only (#29110, against main of 2026-06-24, fixed there by #28682): the site is not located "
        "in the code, so no release before the fix is ruled out"),
    Bug(
        id="pd-decode-grammar-order", title="#28986's ordering missing from the PD decode loop",
        refs=("#28986",), found="survey E",
        symptom="disaggregated decode with spec + grammar on the forced-sync path: requests finished by the pending "
        "result are launched in the next verify after their slot was released (EAGLE up to 0.5.16; NGRAM on every "
        "release from 0.5.14): crash on hybrid Mamba targets, KV written into freed slots",
        affected=since("0.5.14"), fixed_in=None, answer="grammar-result-order",
        reason="patched on every release from 0.5.14 (event_loop_overlap_disagg_decode gets the result-first rule "
        "of event_loop_overlap); open upstream. 0.5.11 … 0.5.13.post1 have no sync there at all (record "
        "pd-decode-grammar-sync)",
        verified="regex in disaggregation/decode.py: get_next_disagg_decode_batch_to_run(), then "
        "is_disable_overlap_for_batch(), then pop_and_process() (next batch built before the pending result is "
        "processed): 0.5.14 … 0.5.23",
        evidence=(Evidence("sglang/srt/disaggregation/decode.py",
                           r"get_next_disagg_decode_batch_to_run\((?:.|\n){0,700}?is_disable_overlap_for_batch\("
                           r"(?:.|\n){0,200}?pop_and_process\(\)", fixed=False),)),
    Bug(
        id="mamba-track-idx-none", title="hybrid Mamba/GDN + MTP/EAGLE: mamba_next_track_idx None in verify",
        refs=("#27325", "#28312", "#28407", "#28484", "#31249", "#34786", "#34787", "#27998", "#29449"),
        found="survey F",
        symptom="hybrid Mamba/GDN targets with MTP/EAGLE and the radix extra_buffer: TypeError crash when a freed / "
        "retracted request reaches a verify launch (up to 0.5.15); from 0.5.16 the None guard defaults to slot 0 "
        "and the post-verify scatter can overwrite a slot reallocated to a live request (silent state corruption)",
        affected=span("0.5.11", "0.5.21"), fixed_in="0.5.22", answer="mamba-track-freed-rows",
        reason="patched on 0.5.11 … 0.5.21 as 0.5.22 has it: the verify's track index of a request whose "
        "mamba_next_track_idx is None is -1, which the post-verify track scatter skips (beyond upstream's own "
        "0.5.16 guard, which picks slot 0). On 0.5.11 the function that builds the indices is also "
        "tbo-verify-seq-lens's target: the two patch files compose there (compose line). The known trigger on the overlap and PD decode loops (a finished "
        "request launched in the next verify, #28986) is closed by grammar-result-order on every release. CPU "
        "proof only: the GPU row needs a tiny hybrid target with MTP (issue 27)",
        verified="grep `freed_rows` in schedule_batch.py (set_mamba_track_indices_from_reqs writes -1 for freed "
        "rows): absent up to 0.5.21, present from 0.5.22 (the survey's 0.5.16-0.5.23 risk ends at 0.5.22); the None "
        "guard `is not None else 0` is there from 0.5.16 (prepare_for_v2_verify / set_mamba_track_indices_from_reqs "
        "build the index list unguarded before)",
        evidence=(Evidence(_SB, r"freed_rows", fixed=True),)),
    Bug(
        id="inkling-draft-extend-freed-track",
        title="Inkling MTP draft extend tracks a freed request's window at its stale or -1 track slot",
        refs=(), found="source reading of the track-index consumers for mamba-track-freed-rows (2026-11-26)",
        symptom="Inkling with MTP and the mamba extra_buffer: the draft extend after a verify that still holds a "
        "freed request writes that request's short-convolution window at its track index: slot 0 of its request "
        "row, which may be a live request's by then (0.5.16 … 0.5.21, as #29449 for the target), or slot -1, before "
        "the draft's conv cache (0.5.22 / 0.5.23, which mark freed rows -1)",
        affected=since("0.5.16"), fixed_in=None, answer="inkling-draft-extend-track-guard",
        reason="patched on every release with Inkling (0.5.16 on): rows with a negative track index are not "
        "tracked; with mamba-track-freed-rows (0.5.16 … 0.5.21) a freed row is -1 there too. Read from the source "
        "only: no Inkling model runs on the GPU machines here",
        verified="regex in models/inkling_common/sconv.py: the draft extend's `crossed` mask computed from the "
        "sequence lengths alone, directly followed by the tracking boundary (no look at the track index), from "
        "0.5.16 (the module is absent before); the fused kernels (Triton, CUDA draft_extend_sconv.cuh) index the "
        "cache with the track index unchecked",
        evidence=(Evidence("sglang/srt/models/inkling_common/sconv.py",
                           r"crossed = \(pre_seqlen // mamba_track_interval\) != \(\n\s+post_seqlen // "
                           r"mamba_track_interval\n\s+\)\n\s+tracking_boundary = ", fixed=False),)),
    Bug(
        id="hybrid-verify-mask-overflow",
        title="hybrid linear-attention target on triton: a verify at the largest captured batch size overflows the "
        "graph's tree-mask buffer",
        refs=("#32920",), found="GPU row test_hybrid_mamba_serves.py on 0.5.14, 0.5.15.post1 and 0.5.16",
        symptom="a hybrid GDN target (Qwen3-Next shape) with its MTP draft on spec v2, --attention-backend triton and "
        "CUDA graphs: the first verify at the largest captured batch size stops the scheduler in "
        "TritonAttnBackend._update_target_verify_buffers (RuntimeError: The expanded size of the tensor (131072) must "
        "match the existing size (131200), tiny model: 4096 context, 4 draft tokens, graphs up to bs 8)",
        affected=span("0.5.14", "0.5.16"), fixed_in="0.5.17", answer="triton-verify-mask-size",
        reason="patched on 0.5.14 … 0.5.16: the triton verify graph's cuda_graph_custom_mask gets 0.5.17's size, "
        "max_num_tokens * (max_context_len + num_draft_tokens), which holds the draft's bs * max_context_len mask at "
        "every captured batch size. Not affected up to 0.5.13.post1 (HybridLinearAttnBackend keeps needs_cpu_seq_lens "
        "True, so the draft sizes the mask by the real seq_lens_sum); upstream from 0.5.17 (#32920: VerifyMask sized "
        "with the draft term, handed out by the hybrid backend)",
        verified="regex: HybridLinearAttnBackend.__init__ ORs its sub-backends' needs_cpu_seq_lens (0.5.14 on; before, "
        "the base class's True) and triton_backend.py allocates cuda_graph_custom_mask as max_num_tokens * "
        "max_context_len (up to 0.5.16; 0.5.17 on: maybe_create_verify_mask). Both: 0.5.14 … 0.5.16",
        evidence=(Evidence("sglang/srt/layers/attention/hybrid_linear_attn_backend.py",
                           r"self\.needs_cpu_seq_lens = \(\n\s+full_attn_backend\.needs_cpu_seq_lens", fixed=False),
                  Evidence("sglang/srt/layers/attention/triton_backend.py",
                           r"self\.cuda_graph_custom_mask = torch\.zeros\(\n\s+\(max_num_tokens \* "
                           r"self\.max_context_len\),", fixed=False))),
    Bug(
        id="radix-overshoot", title="speculative overshoot past the stop inserted into the radix cache",
        refs=("#35694",), found="survey G",
        symptom="tokens accepted past the stop (never sent to the client) are inserted into the radix tree: KV held "
        "until eviction by a suffix no follow-up turn reproduces (dense models: the follow-up's hit length is the "
        "same, the tree splits at the divergence); hybrid models: record radix-overshoot-hybrid",
        affected=span("0.5.11", "0.5.21"), fixed_in="0.5.22", answer="radix-overshoot",
        reason="patched on 0.5.11 … 0.5.21 for speculative requests on dense (non-mamba) caches: the cached KV "
        "ends at the prompt plus output_ids_through_stop (Req.pop_committed_kv_cache up to 0.5.15.post1, "
        "effective_kv_committed_len 0.5.16 … 0.5.20, owned_kv_len 0.5.21); upstream from 0.5.22. Needs "
        "finished_len, which a stop string sets on 0.5.11 … 0.5.13.post1 only with multi-token-finish. Hybrid "
        "(mamba) requests: record radix-overshoot-hybrid",
        verified="grep `the client never sees those tokens` in schedule_batch.py (owned_kv_len trims at "
        "output_ids_through_stop): absent up to 0.5.21 (_cache_commit_len / effective length = kv_committed_len), "
        "present from 0.5.22",
        evidence=(Evidence(_SB, r"the client never sees those tokens", fixed=True),)),
    Bug(
        id="radix-overshoot-hybrid", title="speculative overshoot past the stop in the radix cache: hybrid (mamba) "
        "requests",
        refs=("#35694",), found="survey G",
        symptom="hybrid Mamba/GDN targets with speculative decoding and the radix cache: the mamba checkpoint the "
        "finished request caches lies past the stop (tokens the client never saw), so a follow-up turn built from "
        "the returned text misses the whole decode region",
        affected=span("0.5.11", "0.5.21"), fixed_in="0.5.22", answer=NOT_BACKPORTED,
        reason="radix-overshoot leaves requests holding mamba state at the stock length on purpose: a key shorter "
        "than the tracked state trips MambaRadixCache's page-aligned length assertion or pairs the key with a "
        "state that has seen the overshoot; 0.5.22's fallback to the previous checkpoint (mamba_prev_track_seqlen "
        "tracked in the decode loop, chosen by the cache) is not backported, and showing it needs a hybrid "
        "target with MTP/EAGLE on a GPU",
        verified="grep `mamba_prev_track_seqlen` under sglang/srt/: absent up to 0.5.21, present from 0.5.22 "
        "(schedule_batch.py, the batch result processor, the mamba cache components)",
        evidence=(Evidence("sglang/srt/**/*.py", r"mamba_prev_track_seqlen", fixed=True),)),
    Bug(
        id="multi-layer-verify-grammar", title="multi-layer EAGLE v2 verify ignores the grammar vocab mask",
        refs=("#31978", "#31979"), found="survey H",
        symptom="--enable-multi-layer-eagle with structured output: drafts are accepted unconstrained and the "
        "grammar rejects them at commit: FINISH_ABORT",
        affected=span("0.5.11", "0.5.15.post1"), fixed_in="0.5.16", answer="multi-layer-grammar-mask",
        reason="patched on 0.5.11 … 0.5.15.post1 (the release's EAGLEWorkerV2.verify grammar block in the "
        "multi-layer verify); upstream from 0.5.16 (run_eagle_verify)",
        verified="grep `run_eagle_verify` in multi_layer_eagle_worker_v2.py: absent up to 0.5.15.post1 (its verify "
        "calls eagle_sample without a vocab mask), present from 0.5.16 (eagle_worker_common.run_eagle_verify builds "
        "the bitmask)",
        evidence=(Evidence("sglang/srt/speculative/multi_layer_eagle_worker_v2.py", r"run_eagle_verify",
                           fixed=True),)),
    Bug(
        id="overlap-war-barrier", title="no WAR barrier between schedule-stream writes and the previous forward",
        refs=("#26380", "#26646", "#27967"), found="survey I",
        symptom="with the overlap scheduler, req_to_token / SWA mapping writes race the previous forward's reads "
        "(flaky accuracy; hybrid-SWA targets such as gpt-oss + EAGLE3)",
        affected=span("0.5.11", "0.5.12.post1"), fixed_in="0.5.13", answer="overlap-war-barrier",
        reason="backported as 0.5.13 has it (#26380, CUDA-only by #26646): schedule_stream.wait_stream(forward_stream) "
        "right before the next batch is built, as the first statement of get_next_batch_to_run and of the two PD "
        "loops' batch getters, in an overlap loop on CUDA. #26380's host-sync move (non-blocking H2D in the spec-v2 "
        "decode preparation, the seq_lens D2H off the schedule stream) is not ported, so the scheduler thread waits "
        "for the previous forward's draft extend there: measured 2 - 3 % of a chain's tok/s at real size (0.5.11, "
        "H100), so by default the barrier is issued for hybrid-SWA pools only, the exposed writes "
        "(SGLANG_SPECV2_FIXES_WAR_BARRIER=all: every overlap scheduler, upstream's rule). CPU proof on each release's real loop and batch getters with recorded stream "
        "waits (tests/cpu/test_fix_overlap_war_barrier.py); no GPU row: the race needs hybrid-SWA targets under load",
        verified="grep `wait_stream(self.forward_stream)` in managers/scheduler.py: absent up to 0.5.12.post1, "
        "present from 0.5.13 (_apply_war_barrier from 0.5.14)",
        evidence=(Evidence("sglang/srt/managers/scheduler.py", r"wait_stream\(self\.forward_stream\)", fixed=True),)),
    Bug(
        id="fa3-draft-extend-graph", title="fa3 missing from the spec-v2 draft-extend CUDA graph's backend list",
        refs=("#40762", "#36324"), found="survey section 2 (P5 draft-extend CUDA graph coverage)",
        symptom="EAGLE / EAGLE3 on fa3 (Hopper's default for a chain and for the default invocation's tree) run the "
        "draft extend eagerly every decode step while verify and draft decode replay graphs: slower than the other "
        "backends (text unaffected)",
        affected=span("0.5.11", "0.5.22"), fixed_in="0.5.23", answer="fa3-draft-extend-graph",
        reason="patched on 0.5.11 … 0.5.22 as 0.5.23 has it (FlashAttentionBackend appended to the draft-extend "
        "graph's backend list: _capture_cuda_graphs', init_cuda_graphs' before 0.5.14, after tree-drafting's change "
        "on 0.5.11 / 0.5.12.x), CUDA only, for fa3 chains and trees (at their width) whose draft-extend metadata lives in "
        "the graph: chains by default since their row met on every torch-2.11 release (0.5.11 - 0.5.17; side by side "
        "up to 1.29x on 0.5.16), trees with SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1 (their row passed on every one; "
        "at real size the default invocation's tree gained 1.02x at c = 8 and lost to 0.99x at c = 32). Before 0.5.16 fa3's DRAFT_EXTEND_V2 graph metadata is the same out-of-graph rebuild before each "
        "replay that 0.5.16 runs (0.5.16 adds an in-graph copy of it): tests/cpu/test_fix_fa3_draft_extend_graph.py",
        verified="regex: `graph_supported_backend_types.append(FlashAttentionBackend)` in speculative/eagle_worker_v2.py "
        "(absent up to 0.5.22, present in 0.5.23)",
        evidence=(Evidence("sglang/srt/speculative/eagle_worker_v2.py",
                           r"graph_supported_backend_types\.append\(FlashAttentionBackend\)", fixed=True),)),
    Bug(
        id="verify-handoff", title="spec-v2 decode preparation blocks the host until the previous verify ends",
        refs=("#25879",), found="upstream parity (docs/bench/upstream-parity.md) and its source comparison",
        symptom="EAGLE / EAGLE3 chains with the overlap scheduler decode 4 - 10 % slower than 0.5.17 at TP 1 and "
        "13 - 20 % at TP 2: the scheduler builds the next batch only during the draft extend (verify_done.synchronize, "
        "seq_lens.sum().item(), seq_lens.cpu()), and the GPU idles 0.5 - 0.9 ms per decode step (text unaffected)",
        affected=span("0.5.11", "0.5.12.post1"), fixed_in="0.5.13", answer="verify-handoff",
        reason="patched on 0.5.11 … 0.5.12.post1 for triton with CUDA graphs, chains and trees (the schedule stream "
        "waits for verify_done, no seq_lens D2H, device prefix lengths for the draft extend; every other batch keeps "
        "the release's synchronous path); on by default since its GPU row met for chains (2026-11-27; at real size "
        "1.06 - 1.23x a 0.5.11 chain's tok/s, 0.98 - 1.02x upstream 0.5.17's at TP 1; the row's tree class passed on "
        "0.5.11 / 0.5.12 / 0.5.12.post1 on 2026-11-27), auto,-verify-handoff leaves it out; for fa3 "
        "(fa3's metadata takes the page tables' static width without the host mirror, as 0.5.17) since its row met on "
        "the same three releases (2026-11-29: the default invocation on fa3 went from 0.90 - 0.93 to 1.00 - 1.10x "
        "upstream 0.5.17's at c = 8), SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3=0 leaves fa3 out. 0.5.13 has no host wait on verify_done (#25879); but on 0.5.13.x "
        "two-batch overlap and piecewise CUDA graphs (on by default) still force the host mirror, and the host waits "
        "for the verify's publish to read it (resolve_seq_lens_cpu), unless --disable-piecewise-cuda-graph",
        verified="regex: `verify_done.synchronize()` in managers/schedule_batch.py (present up to 0.5.12.post1, "
        "absent from 0.5.13)",
        evidence=(Evidence("sglang/srt/managers/schedule_batch.py", r"verify_done\.synchronize\(\)", fixed=False),)),
    Bug(
        id="flashinfer-draft-extend-graph", title="flashinfer's spec-v2 draft extend runs eagerly (no CUDA graph)",
        refs=("#28782",), found="issue 30 (Hopper trees run on flashinfer)",
        symptom="EAGLE / EAGLE3 on flashinfer (on Hopper: every tree, topk > 1) runs the draft extend eagerly every "
        "decode step (one launch per layer, a paged_kernel_lens.sum().item() sync) while verify and draft decode "
        "replay graphs: slower (#28782: ~10% median latency; text and acceptance unaffected)",
        affected=span("0.5.11", "0.5.13.post1"), fixed_in="0.5.14", answer="flashinfer-draft-extend-graph",
        reason="patched on 0.5.11 … 0.5.12.post1 for trees (the spec-v2 tree path is the plugin's there): flashinfer's "
        "DRAFT_EXTEND_V2 graph metadata at a constant num_draft_tokens width, captured by tree-drafting's "
        "init_cuda_graphs; on by default since its GPU rows met (2026-11-27; auto,-flashinfer-draft-extend-graph "
        "leaves it out); chains there too (tree-drafting's init_cuda_graphs asks flashinfer_graph_backends), on by "
        "default since their row met A/B on 0.5.11, 0.5.12 and 0.5.12.post1 (2026-11-27, session 25). On 0.5.13 / "
        "0.5.13.post1 for chains and trees: 0.5.14's "
        "DRAFT_EXTEND_V2 branches of _prepare_cuda_graph_metadata / init_forward_metadata_out_graph and flashinfer on "
        "init_cuda_graphs' list, on by default since its chain and tree rows met A/B on 0.5.13 and 0.5.13.post1 "
        "(2026-11-27; =0 turns it off). Everywhere eager for FR-Spec and for sliding-window / cross-attention models (two flashinfer "
        "wrappers)",
        verified="regex: eagle_worker_v2.py imports FlashInferAttnBackend (its draft-extend graph list) from 0.5.14 "
        "(absent up to 0.5.13.post1); flashinfer_backend.py has is_draft_extend_v2 branches from 0.5.14",
        evidence=(Evidence("sglang/srt/speculative/eagle_worker_v2.py",
                           r"from sglang\.srt\.layers\.attention\.flashinfer_backend import FlashInferAttnBackend",
                           fixed=True),)),
    Bug(
        id="tbo-verify-seq-lens", title="two-batch overlap + spec v2: verify input without seq_lens_cpu",
        refs=("#24319", "#24212"), found="survey J",
        symptom="--enable-two-batch-overlap with EAGLE/MTP on spec v2: AttributeError in split_spec_info "
        "(seq_lens_cpu None on the verify input)",
        affected=span("0.5.11", "0.5.11"), fixed_in="0.5.12", answer="tbo-verify-seq-lens",
        reason="backported as 0.5.12 has it (#24319): prepare_for_v2_verify copies the batch's seq_lens_cpu / "
        "seq_lens_sum to the verify input. CPU proof on 0.5.11's real prepare_for_v2_verify and split_spec_info "
        "(tests/cpu/test_fix_tbo_verify_seq_lens.py); no GPU row: two-batch overlap needs a MoE all-to-all backend "
        "(DeepEP) on several GPUs",
        verified="grep `TBO's split_spec_info` under sglang/srt/speculative/ (prepare_for_v2_verify copies "
        "seq_lens_cpu / seq_lens_sum to the verify input): absent on 0.5.11 (EagleVerifyInput built with "
        "seq_lens_cpu=None), present from 0.5.12",
        evidence=(Evidence(_SPEC, r"TBO's split_spec_info", fixed=True),)),
    Bug(
        id="eagle-decode-page-align", title="spec-v2 decode allocation not page-aligned at page_size > 1",
        refs=("#31616", "#35265", "#27789"), found="survey K",
        symptom="page_size > 1 (MLA backends, DeepSeek / GLM / Kimi MTP, DSv4): the unaligned tail of the last page "
        "is allocated but not recorded, a KV leak per upstream; not reproduced here: the pages balance",
        affected=span("0.5.11", "0.5.15.post1"), fixed_in="0.5.16", answer=NOT_BACKPORTED,
        reason="not reproduced, so not backported (issue 27): on each release's real paged allocator, ReqToTokenPool, "
        "RadixCache / ChunkCache, decode allocation and release_kv_cache at page 16 and 64, the unaligned "
        "kv_allocated_len occurs but every page stays free, held by a row or cached through decode rounds, retract, "
        "abort and finish (tests/cpu/test_eagle_decode_page_align.py, 0.5.11 - 0.5.16): the allocator frees whole "
        "pages (unique(index // page_size)), the next round's alloc_extend fills the unrecorded tail from last_loc + "
        "1, release_kv_cache frees [ceil_align(committed), kv_allocated_len) and check_decode_mem / the busy check "
        "round to pages too. The GPU guard row test_page_align_decode.py (page 16 radix, page 64 no radix, forced "
        "retraction, aborts, the strict idle / busy checks, /v1/loads num_used_tokens 0 at idle) agrees: stock "
        "passed on 0.5.12, 0.5.12.post1, 0.5.14, 0.5.15, 0.5.15.post1 and 0.5.16, 0.5.11 left no page in use (its "
        "probe failure is #23456, skip-stale-overlap-updates), 0.5.13 / 0.5.13.post1 left none through tests 1 - 5 "
        "and then crashed after flush_cache (bug flush-then-prefill-0513, fixed by draft-graph-eager-registry: the "
        "plugin side passed all 12 tests on both, session 26). A port would also need the row "
        "headroom of 0.5.16's get_req_to_token_extra_context_len (+ page_size - 1)",
        verified="regex `(double_alloc|reserve) + page_size - 1) // page_size * page_size` under sglang/srt/: "
        "absent up to 0.5.15.post1 (eagle_prepare_for_decode / prepare_for_decode), present from 0.5.16",
        evidence=(Evidence("sglang/srt/**/*.py",
                           r"(?:double_alloc|reserve) \+ page_size - 1\)\s*//\s*page_size\s*\*\s*page_size",
                           fixed=True),)),
    Bug(
        id="flush-then-prefill-0513",
        title="0.5.13.x: the draft CUDA graph runs on a freed eager input registry (crash after /flush_cache)",
        refs=(), found="GPU row test_page_align_decode.py on stock 0.5.13 (docs/gpu-runs/2026-11-27-s24/)",
        symptom="EAGLE3 chain on spec v2 with CUDA graphs, after a load whose draft decode batches exceed the largest "
        "captured bs: POST /flush_cache succeeds and the next request (a one-token /health_generate) ends the "
        "scheduler with CUDA illegal memory access, raised at the draft CUDA graph's replay under "
        "CUDA_LAUNCH_BLOCKING=1 (without it at the next host sync, the paged allocator's free); before the flush "
        "every draft replay writes into freed memory (silent corruption of whatever reuses it)",
        affected=span("0.5.13", "0.5.13.post1"), fixed_in="0.5.14", answer="draft-graph-eager-registry",
        reason="ModelRunner._ensure_eager_registry replaces 0.5.13's eager input registry by a larger one when a batch "
        "exceeds its capacity and drops the old one. The draft TpModelWorker has no graph runner, so "
        "EAGLEDraftCudaGraphRunner's capture runs draft_forward -> draft_runner.forward -> forward_decode -> "
        "_eager_fb_view: the draft graphs bake the draft runner's decode registry (built at the largest captured bs in "
        "the capture warm-up, outside the graph pool). An eager draft decode above that bs frees it; the flush's "
        "torch.cuda.empty_cache() unmaps it and the next draft replay faults (source reading, session 25). The fix "
        "keeps every replaced registry alive. 0.5.14's EagerRunner builds one fixed-size registry at init and never "
        "replaces it; 0.5.12.x and earlier have none. Possibly the cause of #28569 (record "
        "gpt-oss-eagle3-draft-graph-ima, draft graph IMA as the batch shrinks, --cuda-graph-bs-decode 1 2 4 8): not "
        "verified",
        verified=_TABLE + "; GPU: the row's stock side crashed on 0.5.13 (2 of 2, session 24) and on 0.5.13.post1 "
        "(session 25, the plugin side too, before this fix); its flush step passed on 0.5.11, 0.5.12.x and "
        "0.5.14 - 0.5.16; CPU: tests/cpu/test_fix_draft_graph_eager_registry.py runs the release's real _ensure_eager_registry and "
        "build_decode_registry in capture order, then a larger eager batch: stock frees the buffers the draft graph "
        "baked, the patch keeps them. The fix's GPU row (tests/registered/test_draft_graph_eager_registry.py) met A/B "
        "on 0.5.13 and 0.5.13.post1 (session 26, docs/gpu-runs/2026-11-27-s26/): stock died at the first request "
        "after the flush, the plugin served on with greedy output equal to the target alone"),
    Bug(
        id="multi-layer-dp-idle", title="multi-layer EAGLE + DP attention: idle rank initialises attention metadata",
        refs=("#33892",), found="survey L",
        symptom="multi-layer EAGLE with --enable-dp-attention: a DP rank with an empty batch crashes in "
        "init_forward_metadata (seq_lens_cpu.max() of nothing) in the eager draft extend",
        affected=span("0.5.16", "0.5.17"), fixed_in="0.5.18", answer="multi-layer-draft",
        reason="backported as 0.5.18 has it: the eager draft extend skips the per-step planning on an idle round "
        "(the runner's own idle forward plans a padded idle batch); CPU proof on the releases' real draft extend "
        "(tests/cpu/test_fix_multi_layer_draft.py); GPU: test_dp2_multi_layer_idle.py (DP attention on 2 GPUs) met "
        "A/B on 0.5.16 and 0.5.17 (2026-11-26, 2 x H200)",
        verified="regex in multi_layer_eagle_worker_v2.py: `...token_to_kv_pool` directly followed by "
        "`self.draft_runner_list[step].attn_backend.init_forward_metadata(` (no is_idle() guard): 0.5.16, 0.5.17; "
        "guarded from 0.5.18; the per-step loop does not exist before 0.5.16",
        evidence=(Evidence("sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
                           r"\]\.token_to_kv_pool\n\s+self\.draft_runner_list\[\s*step\s*\]\.attn_backend"
                           r"\.init_forward_metadata\(", fixed=False),)),
    Bug(
        id="multi-layer-dp-padding", title="multi-layer EAGLE + DP attention: the eager draft extend is planned before "
        "the DP padding",
        refs=(), found="GPU row test_dp2_multi_layer_idle.py on 0.5.16 / 0.5.17 (with the plugin)",
        symptom="multi-layer EAGLE (MiMo-V2, Step-3.5) with --enable-dp-attention, the draft extend run eagerly "
        "(--disable-cuda-graph, or more requests than its graphs): when the DP ranks run different token counts, the "
        "rank with fewer stops in the draft extend's attention (fa3 sliding-window layers: set_kv_buffer 'Size "
        "mismatch for shape#0('batch_size'): expected 28 but got 24')",
        affected=since("0.5.13"), fixed_in=None, answer="multi-layer-draft",
        reason="beyond upstream (open as of 0.5.23): patched on every affected release by multi-layer-draft: each busy "
        "step of the eager draft extend marks its plan replan_equivalent, so the runner's forward plans again, with "
        "the same backend, after prepare_mlp_sync_batch pads the batch (MAX_LEN), and only when the padding reshaped "
        "it. On 0.5.18 … 0.5.23 #33892's idle guard is upstream and this mark is all their patch files add "
        "(patches/multi-layer-draft/0.5.18, 0.5.19, 0.5.20 (0.5.21 too: the same function), 0.5.22, 0.5.23); the "
        "table has no part-upstream state, so it calls multi-layer-draft applied there (see the fix's docstring). "
        "0.5.11 … 0.5.12.post1 plan the same way (skip_attn_backend_init=True) but are not read here. GPU A/B: "
        "test_dp2_multi_layer_idle.py on 0.5.13 … 0.5.17 (docs/gpu-runs/2026-11-26-s19/); 0.5.18 … 0.5.23 (torch "
        "2.13 / 2.14, no GPU image) on CPU only: tests/cpu/test_fix_multi_layer_draft.py",
        verified="regex: the draft extend's preparation marks its plan without a re-plan (\"Planned pre-pad; do NOT opt "
        "into post-pad re-plan\", eagle_worker_common.prepare_for_draft_extend from 0.5.16) in sglang/srt/speculative: "
        "0.5.13 … 0.5.23; ModelRunner._forward_raw pads (_prepare_eager_forward_batch) before the eager runner asks "
        "needs_forward_metadata_init (read in 0.5.18 … 0.5.23); the stock draft extend on a padded real ForwardBatch "
        "plans step 0 for the unpadded batch (tests/cpu/test_fix_multi_layer_draft.py, 0.5.13 … 0.5.23)",
        evidence=(Evidence(_SPEC, r"Planned pre-pad; do NOT opt into post-pad re-plan", fixed=False),)),
    Bug(
        id="draft-extend-read-done-early", title="draft-extend CUDA graph publishes the WAR read-done event before "
        "replay",
        refs=("#37988", "#37936"), found="survey M",
        symptom="the scheduler's next req_to_token / SWA writes may race the draft-extend graph's reads on backends "
        "that read shared buffers inside the graph (inconsistent speculative state when a constrained request is "
        "inserted during decode)",
        affected=span("0.5.14", "0.5.21"), fixed_in="0.5.22", answer="draft-extend-read-done-order",
        reason="patched on 0.5.14 … 0.5.21: EAGLEDraftExtendCudaGraphRunner.execute records the read-done event "
        "(war_fastpath_read_done_event, shared_read_done_event from 0.5.18) after _replay_graph instead of before it, "
        "0.5.22's POST_REPLAY for every backend (0.5.22 publishes per backend by SharedReadEnds: before the replay only "
        "where a backend declares PRE_REPLAY, none where UNKNOWN). A latent race with no known reproduction: only "
        "backends whose metadata inside the graph reads req_to_token / the SWA mapping are exposed (trtllm_mha, "
        "DSV4; #36335, #31270, #31686). On by default since its cost, the next batch's writes waiting for the "
        "graph's end instead of its start, was measured at real size (session 26, 0.5.17, triton: output tok/s "
        "0.978 - 1.004 of without it, docs/performance.md). CPU proof "
        "on each release's real execute and _apply_war_barrier (tests/cpu/test_fix_draft_extend_read_done_order.py); "
        "no GPU row: the exposed backends do not run on the lent GPUs (trtllm_mha is Blackwell-only)",
        verified="regex in eagle_draft_extend_cuda_graph_runner.py: `read_done.record()` within 20 lines before "
        "`self._replay_graph(`: 0.5.14 … 0.5.21; 0.5.22 publishes per SharedReadEnds; no read-done event before "
        "0.5.14",
        evidence=(Evidence("sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py",
                           r"read_done\.record\(\)\n(?:.*\n){0,20}?.*self\._replay_graph\(", fixed=False),)),
    # ------------------------------------------------------------------------ survey item N: the watch list
    Bug(
        id="radix-hit-rate-eagle", title="radix cache reuse collapses with EAGLE (multi-turn)",
        refs=("#32459", "#32574"), found="survey watch list (N)",
        symptom="multi-turn prefix reuse drops from ~97% to 40-53% with EAGLE (GLM-DSA NVFP4, reported on 0.5.16)",
        affected=since("0.5.11"), fixed_in=None, answer=NOT_BACKPORTED,
        reason="cause not identified upstream (#32574's reserve theory is unconfirmed); radix-overshoot (patched "
        "on 0.5.11 … 0.5.21 for dense caches, upstream from 0.5.22) removes one contributor",
        verified="report only: the cause is not located in the code, so no release is ruled out"),
    Bug(
        id="reasoning-tokens-overcount", title="usage.reasoning_tokens counted past the stop / length trim",
        refs=("#39826", "#37450"), found="survey watch list (N)",
        symptom="reasoning_tokens counts the whole accepted run before the stop / length trim: reasoning_tokens > "
        "completion_tokens in usage",
        affected=since("0.5.11"), fixed_in=None, answer="reasoning-tokens-through-stop",
        reason="patched on every release, beyond upstream (open as of 0.5.23; #37450 is an open PR): the count "
        "sent with a request is min(req.reasoning_tokens, len(output_ids_through_stop)) "
        "(SchedulerOutputProcessorMixin.stream_output_generation on 0.5.11 / 0.5.12.x, "
        "_GenerationStreamAccumulator.accept from 0.5.13); req.reasoning_tokens itself is left as counted",
        verified="grep `self.reasoning_tokens += len(token_id)` in schedule_batch.py (Req.update_reasoning_tokens, "
        "called with the whole run before check_finished / update_finish_state trims it): every release",
        evidence=(Evidence(_SB, r"self\.reasoning_tokens \+= len\(token_id\)", fixed=False),)),
    Bug(
        id="triton-draft-extend-swa", title="triton draft-extend CUDA graph builds no SWA window buffers",
        refs=("#29858",), found="survey watch list (N)",
        symptom="hybrid-SWA models with a smaller SWA pool (MiMo-V2.5-Pro), multi-layer EAGLE, triton, CUDA graphs: "
        "intermittent illegal memory access (the SWA layers run the draft extend without window indices)",
        affected=span("0.5.11", "0.5.22"), fixed_in="0.5.23", answer=NOT_BACKPORTED,
        reason="needs a hybrid-SWA model with a smaller SWA pool and multi-layer EAGLE on a GPU; #29858 is still "
        "open, 0.5.23 ships the same change. Seen 2026-11-24 on 0.5.14 with a tiny MiMo-V2-Flash shape (its MTP "
        "layer is sliding-window): a triton CompilationError on the None kv_indices while capturing the graph",
        verified="regex in layers/attention/triton_backend.py: the is_draft_extend_v2() graph metadata passes "
        "`window_kv_indices=self.cuda_graph_window_kv_indices if swa`: only 0.5.23 (0.5.11 … 0.5.22 leave "
        "window_kv_indices None on the draft-extend graph path)",
        evidence=(Evidence("sglang/srt/layers/attention/triton_backend.py",
                           r"elif forward_mode\.is_draft_extend_v2\(\):\n\s+return ForwardMetadata\((?:.|\n){0,1500}?"
                           r"window_kv_indices=self\.cuda_graph_window_kv_indices if swa", fixed=True),)),
    Bug(
        id="multi-layer-tree-mask-seq-lens-sum",
        title="multi-layer EAGLE v2 draft sizes its tree mask from a seq_lens_sum of None",
        refs=(), found="GPU try of the multi-layer grammar row (docs/gpu-runs/2026-11-24-s13/)",
        symptom="multi-layer EAGLE (MiMo-V2, Step-3.5 MTP) on an attention backend without a preallocated verify "
        "mask buffer (triton without CUDA graphs; every backend that keeps the base get_verify_buffers_to_fill_after_"
        "draft): the first decode stops the scheduler with `TypeError: unsupported operand type(s) for *: "
        "'NoneType' and 'int'` in build_tree_kernel_efficient (FULL_MASK)",
        affected=span("0.5.13", "0.5.15.post1"), fixed_in="0.5.16", answer="multi-layer-draft",
        reason="seen on 0.5.14 (tiny MiMo-V2-Flash shape, triton, --disable-cuda-graph, 2026-11-24) and on 0.5.13 … "
        "0.5.15.post1 on fa3 (2026-11-25); 0.5.13 made "
        "seq_lens_sum lazy (None after prepare_for_decode) and guarded EagleWorkerV2.draft only; 0.5.16 moved both "
        "workers onto one guarded helper (eagle_worker_common.build_eagle_verify_input). Patched on 0.5.13 … "
        "0.5.15.post1 with the rule of the release's EagleWorkerV2.draft",
        verified="regex in speculative/multi_layer_eagle_worker_v2.py: MultiLayerEagleDraftWorker.draft passes "
        "batch.seq_lens_sum straight to build_tree_kernel_efficient on 0.5.13 … 0.5.15.post1 (0.5.11 … 0.5.12.post1 "
        "pass model_worker_batch.seq_lens_sum, which is set there; 0.5.16+ call the guarded helper)",
        evidence=(Evidence("sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
                           r"build_tree_kernel_efficient\(\n(?:\s+[\w.]+,\n){5}\s+batch\.seq_lens_sum,",
                           fixed=False),)),
    Bug(
        id="multi-layer-draft-extend-unplanned",
        title="multi-layer EAGLE v2 eager draft extend runs MTP steps 2.. on unplanned attention backends",
        refs=(), found="GPU row of multi-layer-draft (docs/gpu-runs/2026-11-25-s14/)",
        symptom="multi-layer EAGLE (MiMo-V2, Step-3.5 MTP) with more running requests than the largest draft-extend "
        "CUDA graph, or --disable-cuda-graph: each MTP step runs on its own runner and attention backend, but only "
        "runner 0's was planned for the batch; on the sliding-window MiMo-V2 the scheduler stops at the first such "
        "draft extend (`Size mismatch` in set_kv_buffer: the previous forward's cache locations)",
        affected=span("0.5.13", "0.5.15.post1"), fixed_in="0.5.16", answer="multi-layer-draft",
        reason="seen on 0.5.13 … 0.5.15.post1 once the verify was planned (tiny MiMo-V2-Flash shape, fa3, 16 running "
        "requests over CUDA graphs of 1/2/4/8, 2026-11-25); the preparation plans runner 0 and marks the batch, and the "
        "multi-layer worker keeps the mark for every step (upstream's 'latent issue ... tracked by the warning'); 0.5.16 "
        "plans each runner's backend before its forward. Patched by multi-layer-draft",
        verified="regex in speculative/multi_layer_eagle_worker_v2.py: the eager draft extend's 'Mark the batch so the "
        "forward path keeps skipping metadata init' on 0.5.13 … 0.5.15.post1 (0.5.16+: each runner's "
        "init_forward_metadata). 0.5.11 / 0.5.12.x have no such mark, but after planning runner 0 alone they pass "
        "skip_attn_backend_init=True to every runner, so steps 2.. there likely run on the metadata of their last "
        "prefill draft extend; no crash at 16 running on the GPU (fa3 translates the SWA locations inside "
        "set_kv_buffer there), acceptance not measured: not counted here, not patched",
        evidence=(Evidence("sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
                           r"Mark the batch so the forward path\n\s+# keeps skipping metadata init", fixed=False),)),
    Bug(
        id="multi-layer-verify-unplanned",
        title="multi-layer EAGLE v2 verify marks a batch outside the CUDA graphs as planned",
        refs=(), found="GPU row of multi-layer-draft (docs/gpu-runs/2026-11-25-s14/)",
        symptom="multi-layer EAGLE (MiMo-V2, Step-3.5 MTP) with more running requests than the largest captured CUDA "
        "graph, or --disable-cuda-graph: the target verify runs on the previous forward's attention metadata; on the "
        "sliding-window MiMo-V2 the scheduler stops at the first such verify (`Size mismatch for shape#0('batch_size'): "
        "expected 64 but got 490` in set_kv_buffer: the previous prefill's cache locations)",
        affected=span("0.5.13", "0.5.15.post1"), fixed_in="0.5.16", answer="multi-layer-grammar-mask",
        reason="seen on 0.5.13 … 0.5.15.post1 (tiny MiMo-V2-Flash shape, fa3, 16 running requests over CUDA graphs of "
        "1/2/4/8, 2026-11-25); 0.5.13 moved the planning of a non-graph verify batch to forward_extend and left the "
        "multi-layer verify's unconditional mark ('preserve its behavior verbatim'); 0.5.16's multi-layer verify passes "
        "metadata_ready_pre_pad=False. Patched by multi-layer-grammar-mask, whose patch of the same verify gives it "
        "what the release's EAGLEWorkerV2.verify has",
        verified="regex in speculative/multi_layer_eagle_worker_v2.py: the multi-layer verify's mark after upstream's "
        "'preserve its behavior verbatim' note, on 0.5.13 … 0.5.15.post1 (0.5.11 / 0.5.12.x: the preparation plans "
        "every batch and the verify passes skip_attn_backend_init; 0.5.16+: run_eagle_verify)",
        evidence=(Evidence("sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
                           r"preserve its behavior verbatim\.\n(?:\s+#.*\n)*\s+(?:if not _is_npu or can_run_cuda_graph:"
                           r"\n\s+)?verify_forward_batch\.mark_forward_metadata_ready\(\)", fixed=False),)),
    Bug(
        id="gpt-oss-eagle3-draft-graph-ima", title="gpt-oss-120b + EAGLE3: draft CUDA graph IMA as the batch shrinks",
        refs=("#28569",), found="survey watch list (N)",
        symptom="illegal memory access in the EAGLE3 draft CUDA graph replay once requests finish and the running "
        "batch shrinks (gpt-oss-120b, TP 4); eager drafting does not crash",
        affected=since("0.5.11"), fixed_in=None, answer=NOT_BACKPORTED,
        reason="no root cause and no upstream fix (closed as inactive); needs gpt-oss-120b on 4 GPUs to reproduce",
        verified="report only (main of 2026-06-17): the cause is not located in the code, so no release is ruled out"),
    Bug(
        id="ampere-mtp-tree-sampling-hang", title="Qwen3.5 / 3.8 MTP hangs in tree_speculative_sampling_target_only "
        "on Ampere",
        refs=("#35822",), found="survey watch list (N)",
        symptom="MTP decoding hangs on sm_86 GPUs in the tree sampling kernel",
        affected=since("0.5.11"), fixed_in=None, answer=NOT_BACKPORTED,
        reason="in sgl_kernel's CUDA kernel, not in SGLang's Python (what this plugin patches); Ampere (sm_86) only",
        verified="report only (0.5.17): the kernel ships in sgl_kernel, outside the sglang wheel; no release is ruled "
        "out"),
    Bug(
        id="hicache-eagle-hang", title="HiCache + EAGLE hangs",
        refs=("#26357", "#30532"), found="survey watch list (N)",
        symptom="servers with hierarchical cache (HiCache) and EAGLE hang under load",
        affected=since("0.5.11"), fixed_in=None, answer=NOT_BACKPORTED,
        reason="HiCache eviction / locking, outside the spec-v2 code this plugin patches; no upstream fix identified",
        verified="report only: the cause is not located in the code, so no release is ruled out"),
    # ------------------------------------------------------------------------ survey of 2026-11-27: sampling, outputs
    Bug(
        id="spec-penalties-per-step", title="spec v2 feeds the penalizers one token per verify step, not per token",
        refs=("#33643",), found="survey 2026-11-27 (session 27)",
        symptom="frequency_penalty acts at about 1 / (mean accept length) of its strength; presence / repetition "
        "penalties see only the last token of each accepted run (a repetition loop whose period matches the run "
        "length is never penalised); every draft position of a step gets the same bias (min_tokens, fed the same "
        "way: spec-min-tokens-per-step)",
        affected=since("0.5.11"), fixed_in=None, answer=NOT_BACKPORTED,
        reason="open upstream (#33643 is an open PR; #22049 called the per-step accumulation 'relaxed'). Planned, not "
        "built: feeding every committed token still lags one verify step under overlap (the host knows the tokens of "
        "step N-1 only after step N is launched), and equality with decoding without speculation also needs "
        "per-position penalties inside the verify (draft tokens before each position), so a fix belongs in the "
        "verify's sampling with a GPU row (greedy with penalties against the target served alone, overlap off); "
        "docs/design/spec-penalties.md has both designs. min_tokens has its fix: min-tokens-per-position",
        verified="read in every release: the spec-v2 prepare_for_decode (eagle_info_v2.py up to 0.5.14, "
        "eagle_utils.eagle_prepare_for_decode from 0.5.15) feeds `req.output_ids[-1]` per request once per step "
        "(inline up to 0.5.13.post1, ScheduleBatch.cumulate_penalty_output_tokens from 0.5.14); a CPU run of the real "
        "BatchedPenalizerOrchestrator on 0.5.11, 0.5.17 and 0.5.23 (3 steps of 3 tokens): frequency penalty 3.0 for a "
        "token seen 9 times",
        evidence=(_SPEC_PENALTY_FEED,)),
    Bug(
        id="spec-min-tokens-per-step", title="spec v2 counts min_tokens in verify steps, not tokens",
        refs=("#33643",), found="survey 2026-11-27 (session 27); split from spec-penalties-per-step 2026-11-28",
        symptom="min_tokens holds EOS and the stop tokens back for about (mean accept length) x min_tokens tokens, "
        "every draft position of a step alike: the output is longer than asked and differs from the target served "
        "without speculation",
        affected=since("0.5.11"), fixed_in=None, answer="min-tokens-per-position",
        reason="open upstream (#33643). Patched on every release: the verify masks the stop tokens per draft position "
        "from the device's position ids (exact, overlap included), the spec-v2 feed hands it each request's gate and "
        "holds the step counter at min_new_tokens. GPU row tests/registered/test_min_tokens_per_position.py on "
        "0.5.11 - 0.5.17 (2026-11-28, 4 x H200): stock differed from the target alone in 145 / 146 of 240 cases, the "
        "plugin in none; CPU-proven on the 16 releases' real penalizers, feed and verify sampling "
        "(tests/cpu/test_fix_min_tokens_per_position.py)",
        verified="read in every release: the spec-v2 feed calls the orchestrator once per verify step, and "
        "BatchedMinNewTokensPenalizer._cumulate_output_tokens adds 1 per call; a CPU run of the real orchestrator on "
        "0.5.11, 0.5.17 and 0.5.23 (3 steps of 3 tokens, min_new_tokens 6): counter 3, EOS still -inf",
        evidence=(_SPEC_PENALTY_FEED,
                  Evidence("sglang/srt/sampling/penaltylib/min_new_tokens.py", r"self\.len_output_tokens \+= 1$",
                           fixed=False))),
    Bug(
        id="spec-custom-logit-processor", title="custom logit processors never run in the spec-v2 verify",
        refs=("#21724", "#26330", "#27769"), found="survey 2026-11-27 (session 27)",
        symptom="with --enable-custom-logit-processor a request's processor (thinking budget, disallowed tokens, "
        "no-repeat n-gram) shapes only the first token, sampled after the prefill; every verified token ignores it, "
        "with no warning",
        affected=since("0.5.11"), fixed_in=None, answer=NOT_BACKPORTED,
        reason="open upstream (#21724; PRs #27290 / #28373 closed, #27769 open). Not built: the processors index "
        "rows per request, so the verify needs the params expanded per draft row, and under overlap a processor that "
        "reads `__req__.output_ids` sees them one step old and without the draft prefix; spec v1 applied them "
        "(eagle_info.py, up to 0.5.13.post1) with the mask repeated per row, which has the first problem",
        verified="grep `apply_custom_logit_processor` in the spec-v2 verify sampling: absent from eagle_info_v2.py "
        "(EagleVerifyInputV2Mixin.sample) and eagle_utils.py (eagle_sample) in every release; present in spec v1's "
        "eagle_info.py (0.5.11 … 0.5.13.post1) and in dflash",
        evidence=_fixed_in_verify_sampling(r"apply_custom_logit_processor")),
    Bug(
        id="spec-verify-min-p", title="min_p is not applied in the EAGLE / MTP verify",
        refs=("#10617",), found="survey 2026-11-27 (session 27)",
        symptom="sampled requests (temperature > 0) with min_p, set by the client or by the model's "
        "generation_config, get no min_p filtering on any verified token",
        affected=since("0.5.11"), fixed_in=None, answer=NOT_BACKPORTED,
        reason="open upstream (#10617); not spec-v2 only (spec v1 has the same gap), but from 0.5.14 every EAGLE / "
        "MTP request takes this path. Not built: the masking is small (probabilities under min_p x the row's maximum "
        "set to zero and renormalised before tree_speculative_sampling_target_only), but its GPU row needs a sampled "
        "distribution test, which no row here has yet",
        verified="read the non-greedy branch of the verify sampling in every release: top_k_renorm_prob and "
        "top_p_renorm_prob only; `min_p` appears in eagle_utils.py only from 0.5.20, in "
        "_can_use_sparse_uno_tree_target_sampling (`not sampling_info.need_min_p_sampling`), which reads no min_ps",
        evidence=_fixed_in_verify_sampling(r"sampling_info\.min_ps")),
    Bug(
        id="spec-return-hidden-states", title="return_hidden_states takes one verify row per step, some of another "
        "request",
        refs=("#26163", "#28496"), found="survey 2026-11-27 (session 27)",
        symptom="--enable-return-hidden-states with spec v2: one hidden-state row per verify step instead of one per "
        "output token, taken at row i of the [bs x draft tokens] verify output, so with more than one request "
        "running some rows belong to another request; the list is not trimmed at the stop / length",
        affected=span("0.5.11", "0.5.13.post1"), fixed_in="0.5.14", answer=NOT_BACKPORTED,
        reason="upstream from 0.5.14 (#28496: the accepted rows `[i * stride, i * stride + accept_len)` and the "
        "stream trimmed to finished_len). Not built yet: the decode result processing it would patch is already "
        "patched on these releases (live-accept-metrics, multi-token-finish), and a GPU row needs a hidden-state "
        "oracle (the target's own hidden states served without speculation)",
        verified="regex `start : start \+ accept_len` under sglang/srt/managers/ (the per-request slice of the "
        "verify's hidden states): absent up to 0.5.13.post1 (scheduler_output_processor_mixin.py / "
        "batch_result_processor.py append `logits_output.hidden_states[i]`), present from 0.5.14",
        evidence=(Evidence("sglang/srt/managers/**/*.py", r"start : start \+ accept_len", fixed=True),)),
    Bug(
        id="spec-seeded-verify-coins", title="deterministic inference: the verify's rejection coins are not seeded",
        refs=("#30822", "#33395"), found="survey 2026-11-27 (session 27)",
        symptom="--enable-deterministic-inference with temperature > 0 and a sampling seed: speculative outputs "
        "still change between runs (the verify draws torch.rand coins); without that flag nothing changes",
        affected=span("0.5.11", "0.5.16"), fixed_in="0.5.17", answer=NOT_BACKPORTED,
        reason="upstream from 0.5.17 (#30822: murmur_hash32 coins keyed by seed, sequence length and column); the "
        "draft side's unseeded proposals under rejection sampling are still open (#33395). Not built: it matters only "
        "with deterministic inference, and its row would need reproducibility across changing batches",
        verified="grep `def _seeded_verify_coins` under sglang/srt/speculative/: absent up to 0.5.16, present from "
        "0.5.17",
        evidence=(Evidence(_SPEC, r"def _seeded_verify_coins\(", fixed=True),)),
    # ------------------------------------------------------------------------ survey: checked, fixed before 0.5.11
    Bug(
        id="spec-v2-logprobs", title="spec v2 returns no logprobs",
        refs=("#21589", "#17349", "#19761"), found="survey: fixed before 0.5.11",
        symptom="return_logprob requests on spec v2 get no (or wrong) logprobs",
        affected=NONE, fixed_in="0.5.11", answer=UPSTREAM,
        reason="upstream before 0.5.11 (0.5.10.post1 has _compute_spec_v2_logprobs)",
        verified="grep `compute_spec(_v2)_logprobs(` under sglang/srt/: every release (compute_spec_v2_logprobs up to "
        "0.5.17, compute_spec_logprobs from 0.5.18)",
        evidence=(Evidence("sglang/srt/**/*.py", r"compute_spec(?:_v2)?_logprobs\(", fixed=True),)),
    Bug(
        id="spec-v2-penalties", title="spec v2 ignores sampling penalties",
        refs=("#22049",), found="survey: fixed before 0.5.11",
        symptom="frequency / presence / repetition penalties silently ignored on spec v2",
        affected=NONE, fixed_in="0.5.11", answer=UPSTREAM,
        reason="upstream from 0.5.11 (absent in 0.5.10.post1)",
        verified="grep `acc_additive_penalties` under sglang/srt/speculative/ (the verify sample applies the "
        "accumulated penalties): every release",
        evidence=(Evidence(_SPEC, r"acc_additive_penalties", fixed=True),)),
    Bug(
        id="dp-attention-accept-length", title="spec v2 + DP attention: acceptance length drops ~37%",
        refs=("#16310", "#16274"), found="survey: fixed before 0.5.11",
        symptom="with --enable-dp-attention the average accept length drops (MLP sync over too few tokens in the "
        "draft extend)",
        affected=NONE, fixed_in="0.5.11", answer=UPSTREAM,
        reason="upstream before 0.5.11 (January 2026)",
        verified="grep `num_tokens_for_logprob_per_req=self.speculative_num_steps + 1` (or "
        "`=self.speculative_num_draft_tokens` from 0.5.13) in eagle_worker_v2.py's draft extend for decode: every "
        "release",
        evidence=(Evidence("sglang/srt/speculative/eagle_worker_v2.py",
                           r"num_tokens_for_logprob_per_req=self\.(?:speculative_num_steps \+ 1|"
                           r"speculative_num_draft_tokens)", fixed=True),)),
    Bug(
        id="draft-graph-stale-padding", title="draft CUDA graph replays stale padded rows",
        refs=("#23037",), found="survey: fixed before 0.5.11",
        symptom="padded rows of the draft decode CUDA graph keep a previous batch's inputs",
        affected=NONE, fixed_in="0.5.11", answer=UPSTREAM,
        reason="upstream before 0.5.11",
        verified="grep `buffers.topk_p.zero_()` in eagle_draft_cuda_graph_runner.py (padded rows zero-filled on "
        "replay): every release",
        evidence=(Evidence("sglang/srt/speculative/eagle_draft_cuda_graph_runner.py", r"buffers\.topk_p\.zero_\(\)",
                           fixed=True),)),
    Bug(
        id="draft-extend-v2-mrope", title="VLM / mrope positions for DRAFT_EXTEND_V2",
        refs=("#19730", "#19621"), found="survey: fixed before 0.5.11",
        symptom="multimodal (mrope) targets with spec v2 get wrong draft-extend positions",
        affected=NONE, fixed_in="0.5.11", answer=UPSTREAM,
        reason="upstream before 0.5.11",
        verified="forward_batch_info.py: the mrope branch `is_extend(include_draft_extend_v2=True)` (0.5.11 … 0.5.17) "
        "or compute_spec_mrope_positions (0.5.12 on): every release",
        evidence=(Evidence("sglang/srt/model_executor/forward_batch_info.py",
                           r"mrope_positions_list\[batch_idx\] = mrope_positions\n\s+elif self\.forward_mode\.is_extend"
                           r"\(include_draft_extend_v2=True\)|def compute_spec_mrope_positions", fixed=True),)),
    Bug(
        id="adaptive-spec-downswitch", title="adaptive num_steps downswitch shrinks the spec-v2 allocation",
        refs=(), found="survey: fixed before 0.5.11",
        symptom="an adaptive switch to fewer draft steps could make the next allocation smaller than the current one "
        "(allocator state corrupted)",
        affected=NONE, fixed_in="0.5.12", answer=NOT_AFFECTED,
        reason="0.5.11 runs adaptive speculation on spec v1 only (adaptive_unsupported_reason rejects the overlap "
        "scheduler); from 0.5.12, where adaptive reaches spec v2, prepare_for_decode clamps `nxt = max(cur, ...)`",
        verified="grep under sglang/srt/: `nxt = max(cur` (0.5.12 on) or the adaptive_spec_params.py rejection "
        "'the overlap scheduler (spec v2) is enabled' (0.5.11 … 0.5.12.post1): every release",
        evidence=(Evidence("sglang/srt/**/*.py", r"nxt = max\(\s*cur|the overlap scheduler \(spec v2\) is enabled",
                           fixed=True),)),
)


def by_id(bug_id: str) -> Bug:
    return next(b for b in BUGS if b.id == bug_id)


# ------------------------------------------------------------------------------- the table relation
def table_states(fix: str) -> Dict[str, str]:
    """Release -> the table's entry state for ``fix`` (``applied`` for a patch file)."""
    out = {}
    for v, r in releases.RELEASES.items():
        e = releases.entry(fix, r.line)
        out[v] = catalog.APPLIED if isinstance(e, Patched) else e.state
    return out


def problems() -> List[str]:
    """Every disagreement between the catalogue and the release table (empty: consistent). The relation:

    * every record: its affected releases are releases of the table, in table order; ``fixed_in`` (when set) is a
      release of the table and no release from it on is affected; a bug open upstream (``fixed_in`` None) that
      affects anything affects the newest release;
    * ``upstream`` / ``not-affected``: nothing affected (``upstream``: fixed_in is the table's first release);
      ``not-backported``: something affected, and a reason;
    * a fix name: the fix exists in the table; when it has upstream PRs, a record with refs names one of them (a
      record without refs is a bug found here that the fix covers beyond upstream); and
      for each fix the union of its records' affected releases equals the releases where the table patches it or
      says ``open`` (a release the table calls ``upstream`` or ``not-applicable`` has no bug in its stock source);
    * every fix of the table has at least one record, and record ids are unique.
    """
    from .fixes import ALL_FIXES

    out: List[str] = []
    fixes = {f.name: f for f in ALL_FIXES}
    ids = [b.id for b in BUGS]
    out += [f"record id {i!r} is used twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    newest = ORDER[-1]
    for b in BUGS:
        where = f"{b.id}:"
        if any(v not in releases.RELEASES for v in b.affected):
            out.append(f"{where} affected names releases the table does not know: "
                       f"{[v for v in b.affected if v not in releases.RELEASES]}")
            continue
        if list(b.affected) != sorted(set(b.affected), key=ORDER.index):
            out.append(f"{where} affected is not in table order / has duplicates")
        if b.fixed_in is not None:
            if b.fixed_in not in releases.RELEASES:
                out.append(f"{where} fixed_in {b.fixed_in!r} is not a release of the table")
            elif set(b.affected) & set(since(b.fixed_in)):
                out.append(f"{where} fixed upstream in {b.fixed_in} but affected on "
                           f"{sorted(set(b.affected) & set(since(b.fixed_in)), key=ORDER.index)}")
        elif b.affected and newest not in b.affected:
            out.append(f"{where} open upstream (fixed_in None) but the newest release {newest} is not affected")
        if not b.reason.strip() or not b.verified.strip() or not b.symptom.strip():
            out.append(f"{where} symptom, reason and verified must all be written")
        if any(not re.fullmatch(r"#\d+", r) for r in b.refs):
            out.append(f"{where} refs must be '#NNNN': {b.refs}")
        if b.answer in (UPSTREAM, NOT_AFFECTED) and b.affected:
            out.append(f"{where} answer {b.answer!r} but affected {list(b.affected)}")
        if b.answer == UPSTREAM and b.fixed_in != ORDER[0]:
            out.append(f"{where} answer 'upstream' needs fixed_in {ORDER[0]} (every release has the fix)")
        if b.answer == NOT_BACKPORTED and not b.affected:
            out.append(f"{where} answer 'not-backported' but no release is affected (upstream / not-affected?)")
        if b.is_fix:
            fix = fixes.get(b.answer)
            if fix is None:
                out.append(f"{where} answer {b.answer!r} is neither a fix of the release table nor one of {ANSWERS}")
                continue
            if fix.upstream and b.refs and not set(fix.upstream) & set(b.refs):
                out.append(f"{where} refs {list(b.refs)} name none of {fix.name}'s upstream PRs {list(fix.upstream)}")
    for name in fixes:
        recs = [b for b in BUGS if b.answer == name]
        if not recs:
            out.append(f"fix {name} of the release table has no record in the catalogue")
            continue
        states = table_states(name)
        bug_in = {v for v, s in states.items() if s in (catalog.APPLIED, catalog.OPEN)}
        affected = {v for b in recs for v in b.affected}
        if affected != bug_in:
            out.append(
                f"fix {name}: its records call {_ranges(sorted(affected, key=ORDER.index)) or 'nothing'} affected, "
                f"the table patches it (or says open) on {_ranges(sorted(bug_in, key=ORDER.index)) or 'nothing'}")
    return out


# ------------------------------------------------------------------------------- evidence in a tree
def evidence_affected(bug: Bug, root: str) -> Optional[bool]:
    """Whether the release whose ``sglang`` package is under ``root`` has ``bug`` by its evidence (every marker must
    say affected); None when the record has no evidence."""
    if not bug.evidence:
        return None
    verdicts = []
    for ev in bug.evidence:
        hit = False
        for path in sorted(glob.glob(os.path.join(root, ev.files), recursive=True)):
            with open(path, encoding="utf-8") as f:
                if re.search(ev.pattern, f.read(), re.M):
                    hit = True
                    break
        verdicts.append(hit != ev.fixed)
    return all(verdicts)


# ------------------------------------------------------------------------------- derived text
def _ranges(versions) -> str:
    runs: List[List[str]] = []
    for v in versions:
        if runs and ORDER.index(v) == ORDER.index(runs[-1][-1]) + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]} … {r[-1]}" for r in runs)


def outcome(b: Bug) -> str:
    """What a user of the table's releases gets: 'fixed here' (a fix patches it on every affected release), 'absent'
    (no release of the table has it) or 'not backported'."""
    if not b.affected:
        return "absent"
    if b.is_fix and all(table_states(b.answer)[v] == catalog.APPLIED for v in b.affected):
        return "fixed here"
    return "not backported"


def counts() -> Dict[str, int]:
    out = {"fixed here": 0, "absent": 0, "not backported": 0}
    for b in BUGS:
        out[outcome(b)] += 1
    return out


def readme_claim() -> str:
    """The README's sentence about known bugs (tests/cpu/test_known_bugs.py checks the README carries it)."""
    c = counts()
    first, last = ORDER[0], ORDER[-1]
    from .fixes import ALL_FIXES

    opt_in = {f.name for f in ALL_FIXES if f.opt_in}
    n_opt = sum(1 for b in BUGS if outcome(b) == "fixed here" and b.answer in opt_in)
    text = (f"Known upstream spec-v2 bugs: {len(BUGS)} ([docs/known-bugs.md](docs/known-bugs.md), with the releases "
            f"each one affects): {c['fixed here']} fixed by this plugin on every release they affect"
            + (f" ({n_opt} opt-in until run on a GPU)" if n_opt else "") + f", {c['absent']} "
            f"in none of {first} … {last} (fixed upstream earlier, or never there), {c['not backported']} not "
            f"backported, each with its reason.")
    return textwrap.fill(text, 120, break_on_hyphens=False, break_long_words=False)


def _fill(text: str, indent: str = "") -> List[str]:
    return textwrap.wrap(text, 120, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def markdown() -> str:
    c = counts()
    lines = [
        "# Known upstream spec-v2 bugs",
        "",
        "<!-- generated by `python -m sglang_specv2_fixes.known_bugs > docs/known-bugs.md` from",
        "     sglang_specv2_fixes/known_bugs.py; tests/cpu/test_known_bugs.py fails while this file is stale -->",
        "",
    ]
    lines += _fill(
        f"Every known upstream bug of SGLang's spec v2 (EAGLE / EAGLE3 on the overlap scheduler) that this project "
        f"has looked at, with the releases of {ORDER[0]} … {ORDER[-1]} whose stock source has it and this plugin's "
        f"answer. {len(BUGS)} records: {c['fixed here']} fixed by this plugin on every release they affect, "
        f"{c['absent']} in none of these releases, {c['not backported']} not backported. Sources: the fixes of the "
        "release table (`sglang_specv2_fixes/releases.py`) and a survey of upstream issues and pull requests read "
        "against each release's wheel (its performance items are not bugs and are not listed).")
    lines.append("")
    lines += _fill(
        "Answers: a **fix name** (this plugin's fix; the release table patches it exactly where the record says "
        "affected, a CPU test checks it), **upstream** (every release here has upstream's fix), **not-affected** (no "
        "release here has the code path), **not-backported** (affected, not patched here; the reason says why). "
        "*Verified* says how the affected releases were read; a record with a source marker is re-read in every "
        "release's source by the CPU tests.")
    lines += ["", "| bug | upstream refs | affected | fixed upstream in | answer |", "|---|---|---|---|---|"]
    for b in BUGS:
        lines.append(f"| [{b.id}](#{b.id}) | {', '.join(b.refs) or '-'} | {_ranges(b.affected) or 'none'} | "
                     f"{b.fixed_in or 'open'} | `{b.answer}` |")
    for b in BUGS:
        lines += ["", f"## {b.id}", ""]
        lines += _fill(f"**{b.title}** ({b.found}; {', '.join(b.refs) or 'no upstream ref'})")
        lines.append("")
        for bullet in (f"What the user sees: {b.symptom}.",
                       f"Affected: {_ranges(b.affected) or 'none'}; fixed upstream in: {b.fixed_in or 'open'}.",
                       f"Answer: `{b.answer}`: {b.reason}.",
                       f"Verified: {b.verified}."):
            lines += _fill("* " + bullet, "  ")
        for ev in b.evidence:
            lines.append(f"* Marker ({'the fix' if ev.fixed else 'the bug'} where it matches), `{ev.files}`:")
            lines.append(f"  `{ev.pattern}`")
    return "\n".join(lines) + "\n"


def _main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print("usage: python -m sglang_specv2_fixes.known_bugs > docs/known-bugs.md", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(_main())
