"""#23962 - split ``accept_length`` into drafts-only and drafts+bonus counters.

Upstream in every supported release (0.5.11: ``num_accepted_drafts`` / ``num_accepted_tokens``;
0.5.12 renamed them ``num_correct_drafts`` / ``num_accept_tokens`` with ``fill_bonus_tokens``).
Nothing is patched; the other fixes' bodies use each release's own names.
"""

from ..catalog import Fix, ReleaseNote, UPSTREAM

_T = ("sglang.srt.speculative.eagle_info_v2", "EagleVerifyInputV2Mixin.sample")

FIX = Fix(
    name="accept-length-split",
    pr="#23962",
    title="accept_length split into drafts-only and drafts+bonus counters",
    what="nothing patched: upstream in all supported releases",
    why="one field meant both 'accepted drafts' and 'accepted drafts + bonus', inviting off-by-one bugs",
    removal="informational entry",
    lines={
        "0.5.11": ReleaseNote(UPSTREAM, "upstream in 0.5.11 (num_accepted_drafts / num_accepted_tokens)", check=_T + ("f4882cf41e15caa7",)),
        "0.5.12": ReleaseNote(UPSTREAM, "upstream in 0.5.12, renamed num_correct_drafts / num_accept_tokens", check=_T + ("6e817b9a418683c9",)),
        "0.5.13.post1": ReleaseNote(UPSTREAM, "upstream (num_correct_drafts / num_accept_tokens)", check=_T + ("c756e172672bef6e",)),
        **{
            line: ReleaseNote(
                UPSTREAM,
                "upstream (num_correct_drafts / num_accept_tokens; the v2 sample moved to eagle_utils.eagle_sample)",
                check=("sglang.srt.speculative.eagle_utils", "eagle_sample", fp),
            )
            for line, fp in (
                ("0.5.14", "5e49f3d99001edb5"),
                ("0.5.15", "a71fa4dd6851e3c0"),
                ("0.5.16", "2e8d7fe3e06f453a"),
                ("0.5.17", "140530ac2567d399"),
            )
        },
    },
)
