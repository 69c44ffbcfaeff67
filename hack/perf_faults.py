"""Page faults in the controller binary, from `perf script --show-mmap-events -F addr` of
`perf record -e page-faults -d` (hack/profile-rodata-order.sh). Shared by hack/rodata-order.py
(faults in the read-only mapping) and hack/text-order.py (faults in the code mapping)."""
import re
import subprocess

MMAP = re.compile(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+|0) .*(r--p|r-xp) (\S+)$")


def file_offsets(path, perms):
    """File offsets of the faults inside the binary's mapping with permissions PERMS ("r--p":
    the read-only data, "r-xp": the code). Faults elsewhere (heap, stacks, data) are skipped."""
    base, length, pgoff, offsets = None, 0, 0, []
    with open(path) as f:
        for line in f:
            if line.startswith("PERF_RECORD_MMAP"):
                m = MMAP.search(line.rstrip())
                if m and m.group(4) == perms and m.group(5).endswith("/metacontroller"):
                    base, length, pgoff = (int(m.group(i), 16) for i in (1, 2, 3))
            elif base is not None:
                try:
                    address = int(line.strip(), 16)
                except ValueError:
                    continue
                if base <= address < base + length:
                    offsets.append(address - base + pgoff)
    return offsets


def segments(binary):
    """(file offset, virtual address, size in file) of each LOAD segment of BINARY."""
    listing = subprocess.run(
        ["readelf", "-lW", binary], capture_output=True, text=True, check=True
    ).stdout
    loads = []
    for line in listing.splitlines():
        parts = line.split()
        if parts[:1] == ["LOAD"]:
            loads.append((int(parts[1], 16), int(parts[2], 16), int(parts[4], 16)))
    return loads


def addresses(offsets, loads):
    """The virtual addresses (as in the binary and its link map) of file offsets. A position-
    dependent executable's addresses are not its offsets (lld starts it at 0x200000)."""
    out = []
    for offset in offsets:
        for file_offset, vaddr, size in loads:
            if file_offset <= offset < file_offset + size:
                out.append(offset - file_offset + vaddr)
                break
    return out
