#!/usr/bin/env python3
"""Writes hack/text-order.txt from callgrind profiles (see hack/profile-text-order.sh).

Usage: text-order.py [--binary BINARY] [--keep LIST] OUT CALLGRIND_PROFILE...
       text-order.py --binary BINARY --faults LIST PERF_SCRIPT...

Lists every function the profiled processes executed (mangled symbol names), the most expensive
(self cost summed over all profiles) first. hack/link-musl.sh matches the names against each
link's symbols, falling back to the name without its hash when a toolchain or dependency update
changed the hash.

With --faults, appends to LIST the functions a native run faulted in that LIST does not name:
PERF_SCRIPT is `perf script --show-mmap-events -F addr` of `perf record -e page-faults -d` of
BINARY (see hack/profile-rodata-order.sh). callgrind runs a small load slowly; code that runs
only at full scale or native speed (a 409 retried, a watch restarted, a timer that fired) is not
in its profiles, and each such function costs a replica one more 64 KiB window of code. Only the
first fault of a window is recorded, so each run adds one function per window outside the list.
"""
import bisect
import re
import subprocess
import sys
from collections import Counter

import perf_faults

def self_costs(path, costs):
    fn = None
    after_calls = False
    with open(path, errors="replace") as profile:
        for line in profile:
            if line.startswith("fn="):
                fn = re.sub(r"^\(\d+\) ?", "", line[3:].strip())
                # callgrind names a recursive call's cycle "f'2"; the symbol is f.
                fn = re.sub(r"'\d+$", "", fn)
                costs.setdefault(fn, 0)
                after_calls = False
            elif line.startswith("calls="):
                after_calls = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                # The line after calls= is the call's inclusive cost, not the caller's own.
                if fn is not None and not after_calls:
                    parts = line.split()
                    if len(parts) >= 2 and parts[1].isdigit():
                        costs[fn] += int(parts[1])
                after_calls = False


def text_symbols(binary):
    """The profiled binary's text symbols: by address (callgrind names a function that has no
    ELF size, as musl's assembly memcpy, memset and _start, by its address instead) and all
    names."""
    listing = subprocess.run(
        ["nm", "--defined-only", binary], capture_output=True, text=True, check=True
    ).stdout
    names = {}
    defined = set()
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            defined.add(parts[2])
            address = int(parts[0], 16)
            # Of several names for one address (memcpy and musl's local __memcpy_fwd) the
            # global one.
            if address not in names or parts[1] in "TW":
                names[address] = parts[2]
    return names, defined


def faulted_addresses(path, loads):
    """Virtual addresses (as in the binary) of the faults in its code mapping."""
    return perf_faults.addresses(perf_faults.file_offsets(path, "r-xp"), loads)


def append_faulted(binary, listed_path, perf_scripts):
    listing = subprocess.run(
        ["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True
    ).stdout
    # Functions by start address: (size, every name of that address).
    functions = {}
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            entry = functions.setdefault(int(parts[0], 16), [0, []])
            entry[0] = max(entry[0], int(parts[1], 16))
            entry[1].append(parts[3])
    starts = sorted(functions)
    with open(listed_path) as f:
        listed = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    loads = perf_faults.segments(binary)
    new = []
    for path in perf_scripts:
        for address in faulted_addresses(path, loads):
            i = bisect.bisect_right(starts, address) - 1
            if i < 0:
                continue
            size, names = functions[starts[i]]
            # Outside any sized function (padding), or placed already under one of its names.
            if address >= starts[i] + size or any(n in listed for n in names):
                continue
            listed.update(names)
            new.append(sorted(names)[0])
    with open(listed_path, "a") as f:
        for name in new:
            f.write(name + "\n")
    print(f"{listed_path}: {len(new)} functions added from page faults")


def main():
    args = sys.argv[1:]
    if len(args) >= 4 and args[0] == "--binary" and args[2] == "--faults":
        append_faulted(args[1], args[3], args[4:])
        return
    by_address, defined = {}, set()
    kept = []
    while args[:1] in (["--binary"], ["--keep"]):
        if args[0] == "--binary":
            by_address, defined = text_symbols(args[1])
        else:
            with open(args[1]) as previous:
                kept = [l.strip() for l in previous if l.strip() and not l.startswith("#")]
        args = args[2:]
    out, profiles = args[0], args[1:]
    costs = Counter()
    for path in profiles:
        self_costs(path, costs)
    for name in [n for n in costs if n.startswith("0x")]:
        symbol = by_address.get(int(name, 16))
        if symbol is not None:
            costs[symbol] += costs.pop(name)
    # Addresses left and valgrind's own pseudo-functions are not symbols.
    names = [n for n in costs if n and not n.startswith("0x") and not n.startswith("(")]
    names.sort(key=lambda n: (-costs[n], n))
    # One profiled run does not take every path (a relist, a conflict, a takeover happen in
    # some runs only), and each function a replica runs outside the list costs it a 64 KiB
    # window: the previous list's functions this run did not see follow, in their old order,
    # as long as the binary still defines them.
    seen = set(names)
    names += [n for n in kept if n not in seen and (not defined or n in defined)]
    with open(out, "w") as order:
        order.write("# Functions a running controller executes, hottest first (mangled names).\n")
        order.write("# Input to hack/link-musl.sh; generated by hack/profile-text-order.sh, do not edit.\n")
        for name in names:
            order.write(name + "\n")
    print(f"{len(names)} functions from {len(profiles)} profile(s) -> {out}")


if __name__ == "__main__":
    main()
