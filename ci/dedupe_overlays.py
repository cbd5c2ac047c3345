"""Hard-link identical files across the CPU release overlays (ci/setup_cpu_env.sh calls it after they install).

Sixteen overlays carry sixteen copies of sglang and of flashinfer, and most of those files are byte-identical
between neighbouring releases: about 1.8 GiB of the 4 GiB. The CI machine's free disk varies (setup can run
out of it), so setup keeps one copy. Only files with the same path inside their overlay and the same
size are compared, by content; a hard link is made through a temp name and a rename, so an interrupted run
leaves every file in place. Nothing writes into an overlay after setup (Python's bytecode cache writes new files).

    python ci/dedupe_overlays.py RELEASES_DIR
"""

import collections
import hashlib
import os
import sys

MIN_SIZE = 4096


def digest(path):
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.digest()


def main(root):
    groups = collections.defaultdict(list)  # (path inside the overlay, size) -> [(path, inode)]
    for overlay in sorted(os.listdir(root)):
        top = os.path.join(root, overlay)
        if not os.path.isdir(top):
            continue
        for d, _, files in os.walk(top):
            for name in files:
                p = os.path.join(d, name)
                st = os.lstat(p)
                if st.st_size >= MIN_SIZE and os.path.isfile(p) and not os.path.islink(p):
                    groups[(os.path.relpath(p, top), st.st_size)].append((p, st.st_ino, st.st_dev))
    saved = linked = 0
    for (_, size), members in groups.items():
        if len(members) < 2:
            continue
        if len({(ino, dev) for _, ino, dev in members}) == 1:
            continue  # already one file (a re-run)
        first = {}  # digest -> (path, inode, device) kept
        for p, ino, dev in members:
            h = digest(p)
            keep = first.setdefault(h, (p, ino, dev))
            if keep[1] == ino or keep[2] != dev:
                continue
            tmp = p + ".dedupe-tmp"
            os.link(keep[0], tmp)
            os.replace(tmp, p)
            saved += size
            linked += 1
    print(f"dedupe: {linked} files hard-linked, {saved / 2**30:.2f} GiB freed in {root}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
