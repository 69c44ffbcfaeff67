#!/usr/bin/env bash
# Counts the public surface of the runtime crates (issue 44: "halve the public surfaces"), so a
# change to it shows up as numbers. Syntactic count over src/ (no rustdoc JSON: that needs
# nightly): names re-exported at the crate root (`pub use` in lib.rs), `pub mod` declarations,
# and items declared with exact `pub` (not `pub(crate)` / `pub(super)`), per kind. Items in
# `#[cfg(test)] mod ... { }` blocks are skipped. A `pub` item inside a private module is counted
# too: it is what `unreachable_pub` would flag, so the count only falls when it is narrowed.
#
# Usage: hack/public-surface.sh [crate-dir...]   (default: crates/dynamic crates/workqueue crates/controllers)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then set -- crates/dynamic crates/workqueue crates/controllers; fi
exec python3 - "$@" <<'PY'
import pathlib, re, sys

KINDS = ["fn", "struct", "enum", "trait", "type", "const", "static"]
ITEM = re.compile(
    r"^\s*pub\s+(?:(?:async|const|unsafe|extern\s+\"[^\"]*\")\s+)*(fn|struct|enum|trait|type|const|static)\b"
)
PUB_MOD = re.compile(r"^\s*pub\s+mod\s+\w+")
TEST_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")


def strip_tests(lines):
    """Drops `#[cfg(test)] mod x { ... }` blocks (naive brace count; fine for our sources)."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and TEST_MOD.match(lines[i + 1]):
            depth, j = 0, i + 1
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                j += 1
                if depth <= 0:
                    break
            i = j
            continue
        out.append(line)
        i += 1
    return out


def root_reexports(lib):
    """Names a `pub use` in lib.rs makes public at the crate root."""
    text = "\n".join(l for l in lib if not l.lstrip().startswith("//"))
    names = 0
    for m in re.finditer(r"(?m)^pub use\s+([^;]+);", text):
        body = m.group(1)
        if "{" in body:
            inner = body[body.index("{") + 1 : body.rindex("}")]
            names += len([p for p in re.split(r"[,\s]+", inner) if p and p != "self"])
        else:
            names += 1
    return names


def count(crate):
    src = pathlib.Path(crate) / "src"
    kinds = dict.fromkeys(KINDS, 0)
    pub_mods = 0
    for path in sorted(src.rglob("*.rs")):
        lines = strip_tests(path.read_text().splitlines())
        for line in lines:
            if PUB_MOD.match(line):
                pub_mods += 1
            m = ITEM.match(line)
            if m:
                kinds[m.group(1)] += 1
    lib = strip_tests((src / "lib.rs").read_text().splitlines())
    return root_reexports(lib), pub_mods, kinds


header = ["crate", "root pub use", "pub mod"] + ["pub " + k for k in KINDS] + ["pub items"]
print("| " + " | ".join(header) + " |")
print("|" + "---|" * len(header))
for crate in sys.argv[1:]:
    uses, mods, kinds = count(crate)
    row = [crate, uses, mods] + [kinds[k] for k in KINDS] + [sum(kinds.values())]
    print("| " + " | ".join(str(c) for c in row) + " |")
PY
