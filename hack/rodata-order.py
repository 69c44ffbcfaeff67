#!/usr/bin/env python3
"""Updates hack/rodata-order.txt: the input sections of .rodata a controller reads.

Usage: rodata-order.py [--binary BINARY] LIST LINK_MAP [--reads TRACE...] [--faults PERF_SCRIPT...]

LINK_MAP is lld's -Map of the profiled binary (where every input section landed). Both kinds
of evidence are file offsets; BINARY's segments turn them into the map's addresses (without
it they are taken as addresses, as in a PIE whose first segment is at 0). Two kinds of
evidence name a section as read:
- --reads: files of offsets hack/rodata-trace.c wrote from valgrind lackey's trace of one
  process (every word a load touched; a small run under valgrind);
- --faults: `perf script --show-mmap-events -F addr` of `perf record -e page-faults -d` of a
  native run at full scale. The kernel maps a file in 64 KiB windows around each fault, so
  only the first read of a window faults: each run names one more section per window read
  outside the listed region, and a few runs close them (the lackey run misses what the
  program only does natively: the first connection attempts, CPU-dependent code).
The sections LIST already names that the map still defines stay first, in their order; new
ones follow in address order. With --reads, anonymous constants (`..Lanon.` names, numbered
anew by every build) stay only if the trace read them. The linker's merged constant and string
pools (`<internal>`) are never listed: hack/link-musl.sh places them as a whole right after the
list.
"""
import bisect
import re
import sys

import perf_faults


def rodata_sections(map_path):
    """(address, size, section name) of every input section in .rodata, by address."""
    line_re = re.compile(r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+( +)(.*)$")
    sections, inside = [], False
    with open(map_path) as f:
        for line in f:
            m = line_re.match(line.rstrip("\n"))
            if not m:
                continue
            address, size = int(m.group(1), 16), int(m.group(2), 16)
            indent, rest = len(m.group(3)), m.group(4)
            if indent == 1:  # an output section
                inside = rest == ".rodata"
            elif inside and indent == 9:
                name = re.search(r":\((\.rodata[^)]*)\)$", rest)
                if name and size:
                    internal = rest.startswith("<internal>")
                    sections.append((address, size, None if internal else name.group(1)))
    sections.sort()
    return sections


def lackey_offsets(path):
    with open(path) as f:
        return [int(line, 16) for line in f if line.strip()]


def main():
    args = sys.argv[1:]
    loads = None
    if args[:1] == ["--binary"] and len(args) > 1:
        loads = perf_faults.segments(args[1])
        args = args[2:]
    if len(args) < 3 or args[2] not in ("--reads", "--faults"):
        sys.exit(__doc__)
    out, map_path = args[0], args[1]
    sections = rodata_sections(map_path)
    if not sections:
        sys.exit(f"{map_path}: no .rodata input sections (not an lld -Map of the binary?)")
    starts = [s[0] for s in sections]
    read, kind = set(), None
    for arg in args[2:]:
        if arg in ("--reads", "--faults"):
            kind = arg
            continue
        offsets = (
            lackey_offsets(arg) if kind == "--reads" else perf_faults.file_offsets(arg, "r--p")
        )
        for offset in offsets if loads is None else perf_faults.addresses(offsets, loads):
            i = bisect.bisect_right(starts, offset) - 1
            if i >= 0 and offset < sections[i][0] + sections[i][1] and sections[i][2]:
                read.add(i)
    defined = {s[2]: s for s in sections if s[2]}
    try:
        with open(out) as f:
            kept = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    except FileNotFoundError:
        kept = []
    # rustc numbers its anonymous constants (`.rodata..Lanon.<hash>.<n>`) per build: after
    # any code change a kept number may name another constant. A lackey run sees every
    # constant read, so it decides which of them stay; named sections are kept while defined.
    lackey = "--reads" in args
    observed = {sections[i][2] for i in read}
    names = [
        n
        for n in dict.fromkeys(kept)
        if n in defined and (not lackey or ".Lanon." not in n or n in observed)
    ]
    listed = set(names)
    names += [sections[i][2] for i in sorted(read) if sections[i][2] not in listed]
    if any('"' in n or n != n.strip() or " " in n for n in names):
        sys.exit("a section name holds a quote or blank: hack/link-musl.sh cannot quote it")
    size = sum(defined[n][1] for n in names)
    total = sum(s[1] for s in sections)
    with open(out, "w") as f:
        f.write(f"# .rodata input sections a controller reads ({len(names)}, {size} bytes); written by\n")
        f.write("# hack/profile-rodata-order.sh (hack/rodata-order.py), read by hack/link-musl.sh\n")
        for n in names:
            f.write(n + "\n")
    before = set(kept)
    added = sum(1 for n in names if n not in before)
    dropped = len(before - set(names))
    print(f"{out}: {len(names)} sections ({added} new, {dropped} dropped), "
          f"{size // 1024} KiB of {total // 1024} KiB")


if __name__ == "__main__":
    main()
