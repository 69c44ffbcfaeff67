#!/usr/bin/env bash
# Linker for x86_64-unknown-linux-musl builds (the image's static binary; see .cargo/config.toml).
#
# Links with lld and lays out the functions a running controller executes next to each other,
# in the order of hack/text-order.txt. The kernel maps code into a process in 64 KiB windows
# around each page it touches, so a replica's resident code is set by how scattered the code it
# runs is, not by how much it runs: measured with the dist binary, the ~2.6 MiB of functions a
# sharded replica executes were spread over 9.6 MiB of such windows, and an idle process held
# 8.1 MiB of .text. Every replica pays that, which is what bounds how far sharding divides memory.
#
# hack/text-order.txt names the functions (mangled) a profiled run executed. A name this link
# does not define is matched without its legacy-mangling hash (h<16 hex>) instead: a toolchain or
# dependency update changes every hash, and the list should degrade, not stop working (the
# fallback also takes the other instances of a generic function, so a fresh list is tighter).
# Functions it does not name follow in the compiler's order. Regenerate: hack/profile-text-order.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
order=$here/text-order.txt
gcc_ld=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/gcc-ld
[[ -x $gcc_ld/ld.lld ]] || { echo "link-musl.sh: no rust-lld wrapper at $gcc_ld" >&2; exit 1; }

# The objects and archives this link reads (rustc passes a response file when the line is long).
args=()
for a in "$@"; do
    if [[ $a == @* && -f ${a#@} ]]; then
        while IFS= read -r line; do args+=("$line"); done <"${a#@}"
    else
        args+=("$a")
    fi
done
inputs=()
libdirs=()
libs=()
prev=
for a in "${args[@]}"; do
    case $a in
        *.o | *.a | *.rlib) [[ -f $a ]] && inputs+=("$a") ;;
        -L?*) libdirs+=("${a#-L}") ;;
        -l?*) libs+=("${a#-l}") ;;
    esac
    case $prev in -L) libdirs+=("$a") ;; -l) libs+=("$a") ;; esac
    prev=$a
done
# Static libraries named with -l (musl's libc.a and libunwind.a from rustc's self-contained
# directory): their functions are among the hottest (malloc, memcpy) and must be ordered too.
for lib in "${libs[@]}"; do
    case $lib in :*) file=${lib#:} ;; *) file=lib$lib.a ;; esac
    for dir in "${libdirs[@]}"; do
        if [[ -f $dir/$file ]]; then inputs+=("$dir/$file"); break; fi
    done
done

work=$(mktemp -d "${TMPDIR:-/tmp}/link-musl.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [[ -f $order && ${#inputs[@]} -gt 0 ]]; then
    # nm fails on members it cannot read (an rlib's metadata, LLVM bitcode without LTO); the
    # symbols it could read are enough, and an order must never fail a link.
    { nm --defined-only "${inputs[@]}" 2>/dev/null || true; } |
        awk 'NF == 3 && $2 ~ /^[tTwW]$/ { print $3 }' | sort -u >"$work/symbols"
    awk -f "$here/order-symbols.awk" "$work/symbols" "$order" >"$work/order"
    set -- -Wl,--symbol-ordering-file="$work/order" -Wl,--no-warn-symbol-ordering "$@"
fi
# Read-only data the same way: hack/rodata-order.txt names the input sections of .rodata a
# controller reads (constants, string literals, jump tables; ~66 KiB), and a linker script
# inserted into the default layout (.rodata stays where lld puts it, before .eh_frame_hdr)
# puts them first, then the merged constant and string pools (which cannot be split), then
# everything else. Without it the constants a controller reads sat between cold data
# (k8s-openapi's schema descriptions, the embedded server's protobuf tables, panic messages)
# and every process kept 1.07 of .rodata's 1.86 MiB resident; with it 0.41 (idle) to 0.54 MiB
# (loaded replica). A name this link does not define matches nothing. Regenerate:
# hack/profile-rodata-order.sh. LINK_MUSL_RODATA_ORDER names another list (tests).
rodata_order=${LINK_MUSL_RODATA_ORDER:-$here/rodata-order.txt}
layout=()
if [[ -f $rodata_order ]]; then
    {
        echo 'SECTIONS {'
        echo '  .rodata : {'
        # Quoted: an exact name, never a glob (mangled names hold `$` and `.`).
        awk 'NF == 1 && $1 !~ /^#/ && $1 !~ /"/ { printf "    *(\"%s\")\n", $1 }' "$rodata_order"
        echo '    *(.rodata.cst*)'
        echo '    *(.rodata.str*)'
        echo '    *(.rodata .rodata.*)'
        echo '  }'
        echo '} INSERT BEFORE .eh_frame_hdr;'
    } >"$work/rodata.ld"
    layout=(-Wl,-T,"$work/rodata.ld")
fi
if [[ -n ${LINK_MUSL_MAP:-} ]]; then
    # For hack/profile-rodata-order.sh: where each input section landed.
    set -- -Wl,-Map="$LINK_MUSL_MAP" "$@"
fi
# The image's build is position-dependent (.cargo/config.toml: no relocations at all, and the
# pointer tables are plain .rodata that the order above covers too). A position-independent
# link (RUSTFLAGS replacing that setting) gets its relative relocations packed (DT_RELR, which
# musl's static-PIE start code applies): in RELA form (24 bytes each) they filled 572 KiB of
# the read-only segment that every process faulted in; RELR packs them into a few KiB.
link() { cc -fuse-ld=lld -B"$gcc_ld" -Wl,-z,pack-relative-relocs "$@"; }
# A layout must never fail a link (the script needs an .eh_frame_hdr to insert before, which
# every Rust link has): if the link with it fails, link again without it.
if [[ ${#layout[@]} -gt 0 ]]; then
    link "${layout[@]}" "$@" && exit 0
    echo "link-musl.sh: the link with the read-only data layout failed (above); linking without it" >&2
fi
link "$@"
