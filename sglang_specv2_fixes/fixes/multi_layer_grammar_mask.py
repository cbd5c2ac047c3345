"""#31978 (upstream from 0.5.16, by the ``run_eagle_verify`` refactor #31380): the multi-layer EAGLE spec-v2 verify
samples without the grammar's vocab mask (0.5.11 … 0.5.15.post1).

``MultiLayerEagleWorkerV2.verify`` (the worker of ``--enable-multi-layer-eagle``, switched on by SGLang itself for
MiMo-V2 and Step-3.5 with ``--speculative-algorithm EAGLE``) is a partial copy of ``EAGLEWorkerV2.verify`` without its
grammar block: it never walks the draft through the requests' grammars (``spec_utils.generate_token_bitmask``) and
calls the sampler without a ``vocab_mask``. The target then accepts draft tokens and picks bonus tokens the grammar
forbids; the result processor's grammar accept rejects them (``Tokens not accepted``) and the request ends in
``FINISH_ABORT``: JSON schema, regex and tool-call requests fail whenever multi-layer EAGLE is on.

The patch gives each release's ``MultiLayerEagleWorkerV2.verify`` the block its own ``EAGLEWorkerV2.verify`` has:
before the target forward, the draft tree (``retrieve_next_token`` / ``retrieve_next_sibling`` / ``draft_token``) is
copied to the CPU for batches with grammar (:func:`grammar_snapshot`); after the forward is launched, the release's
``generate_token_bitmask`` builds the mask on the CPU while the GPU runs, and the sampler gets it
(:func:`grammar_mask`), with ``sampling_info.vocab_mask`` cleared as upstream does (it would otherwise be the extend
step's). Batches without grammar are unchanged (no copy, ``vocab_mask`` None). Beyond upstream's block (as #30155
proposes for 0.5.16+): the draft tokens are reshaped with ``reshape``, not ``view``, so a non-contiguous
``draft_token`` cannot make the mask raise.

The same partial copy has a second gap from 0.5.13 on (fixed upstream in 0.5.16, where the multi-layer verify passes
``metadata_ready_pre_pad=False`` to ``run_eagle_verify``). 0.5.13 moved the attention planning of a verify batch that
runs outside the target's CUDA graphs (more requests than the largest captured size, ``--disable-cuda-graph``) from
the preparation to ``forward_extend`` (post-pad); ``EAGLEWorkerV2.verify`` leaves such a batch unmarked, but the
multi-layer verify marks every batch as planned (upstream's comment: "preserve its behavior verbatim"), so the target
runs on the previous forward's attention metadata: on a sliding-window target such as MiMo-V2 the first such verify
stops the scheduler (``Size mismatch`` in ``set_kv_buffer``: the previous prefill's cache locations); on others the
attention reads the previous batch's layout. The patch drops that mark, as the release's ``EAGLEWorkerV2.verify`` has
it (the preparation has already marked a batch the graph runs). Same function, same mechanism (the multi-layer verify
does what the release's EAGLE v2 verify does), so one fix.

SGLang imports ``multi_layer_eagle_worker_v2`` only when multi-layer EAGLE is on
(``SpeculativeAlgorithm.create_worker``), so the fix is ``on_import``: the plugin compiles and installs the patched
``verify`` when that module is imported (``core.register``), and every other server pays neither the import (~10-25
ms) nor the patch.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="multi-layer-grammar-mask",
    upstream=("#31978",),
    title="multi-layer EAGLE v2 verify: the grammar's vocab mask; eager batches planned (0.5.13+)",
    what=(
        "MultiLayerEagleWorkerV2.verify: for a batch with grammar the draft tree is copied to the CPU before the "
        "target forward and the release's generate_token_bitmask mask is passed to the sampler, as the release's "
        "EAGLEWorkerV2.verify does; from 0.5.13 the verify no longer marks a batch outside the CUDA graphs as planned, "
        "so forward_extend plans it"
    ),
    why=(
        "with --enable-multi-layer-eagle (MiMo-V2, Step-3.5) the verify ignores the grammar: draft and bonus tokens "
        "the grammar forbids are accepted, the grammar rejects them and every constrained request is aborted; "
        "0.5.13 - 0.5.15.post1: a verify outside the CUDA graphs runs on the previous forward's attention metadata "
        "(MiMo-V2: the scheduler stops)"
    ),
    removal="delete when 0.5.15.x leaves the supported releases (upstream from 0.5.16: run_eagle_verify)",
    on_import=True,  # SGLang imports the multi-layer worker only for --enable-multi-layer-eagle
)


def grammar_snapshot(batch, verify_input):
    """The draft tree on the CPU for :func:`grammar_mask` (None for a batch without grammar): taken before the target
    forward is launched, as ``EAGLEWorkerV2.verify`` does."""
    if not batch.has_grammar:
        return None
    shape = verify_input.retrieve_next_token.shape
    return (verify_input.retrieve_next_token.cpu(), verify_input.retrieve_next_sibling.cpu(),
            verify_input.draft_token.reshape(shape).cpu())


def grammar_mask(batch, verify_input, snapshot):
    """The verify's vocab mask (on the draft's device) from the release's ``generate_token_bitmask``, which walks each
    grammar request's draft tree and sets ``verify_input.grammar``; None without grammar. Clears
    ``batch.sampling_info.vocab_mask`` (the extend step's) when a mask is returned, as upstream does."""
    if snapshot is None:
        return None
    from sglang.srt.speculative.spec_utils import generate_token_bitmask

    vocab_mask = generate_token_bitmask(batch.reqs, verify_input, *snapshot, batch.sampling_info.vocab_size)
    if vocab_mask is not None:
        vocab_mask = vocab_mask.to(verify_input.retrieve_next_token.device)
        batch.sampling_info.vocab_mask = None
    return vocab_mask
