"""#25818 - one helper maintaining ``seq_lens_cpu`` / ``seq_lens_sum`` under spec v2 overlap.

Not applicable to 0.5.11 / 0.5.12.x: those releases compute the sums eagerly and take no overlap
snapshot of the batch, so the stale-snapshot bug the helper prevents cannot occur (the code shape it
fixes arrived later; 0.5.13.post1 has its equivalent as FutureMap.resolve_seq_lens_cpu).
"""

from ..catalog import NOT_APPLICABLE, UPSTREAM, Fix, ReleaseNote

_WHY = "eager seq_lens_sum and no overlap batch snapshot in this release: nothing can go stale"

FIX = Fix(
    name="seq-lens-helper",
    pr="#25818",
    title="consolidate seq_lens_cpu/seq_lens_sum maintenance into one helper",
    what="nothing patched: the code shape it fixes does not exist in the supported releases",
    why="stale seq_lens_cpu/seq_lens_sum after an overlap snapshot/restore",
    removal="informational entry",
    lines={
        "0.5.11": ReleaseNote(NOT_APPLICABLE, _WHY),
        "0.5.12": ReleaseNote(NOT_APPLICABLE, _WHY),
        "0.5.13.post1": ReleaseNote(
            UPSTREAM,
            "upstream in another form (FutureMap.resolve_seq_lens_cpu syncs the overlap snapshot)",
            check=("sglang.srt.managers.overlap_utils", "FutureMap.resolve_seq_lens_cpu", "0e06bbae78da2463"),
        ),
        **{
            line: ReleaseNote(
                UPSTREAM,
                "upstream in another form (FutureMap.resolve_seq_lens_cpu syncs the overlap snapshot)",
                check=("sglang.srt.managers.overlap_utils", "FutureMap.resolve_seq_lens_cpu", fp),
            )
            for line, fp in (
                ("0.5.14", "03bc17e32f9094ff"),
                ("0.5.15", "42648b6d836794f3"),
                ("0.5.16", "0bc94a38081f5f9b"),
                ("0.5.17", "0bc94a38081f5f9b"),
            )
        },
    },
)
