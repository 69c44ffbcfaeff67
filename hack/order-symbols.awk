# The link's --symbol-ordering-file, from two inputs (hack/link-musl.sh):
#   1. the text symbols this link's objects define, one per line;
#   2. hack/text-order.txt: the profiled functions, hottest first ('#' lines are comments).
# Prints, in the order of (2), each listed symbol the link defines. A listed name it does not
# define (its legacy-mangling hash h<16 hex> changed with a toolchain or dependency update) is
# matched without the hash and takes every instance of that name. Each symbol is printed once.
# Plain POSIX awk (Debian's mawk has no {n} intervals in regular expressions).
function key(s) { sub(/17h[0-9a-f]+E$/, "E", s); return s }
NR == FNR { defined[$0] = 1; by_key[key($0)] = by_key[key($0)] $0 "\n"; next }
/^#/ || /^$/ { next }
($0 in defined) { if (!done[$0]++) print; next }
(key($0) in by_key) {
    n = split(by_key[key($0)], all, "\n")
    for (i = 1; i < n; i++) if (!done[all[i]]++) print all[i]
}
