//! The image's binary is linked with the profiled function order (`hack/link-musl.sh`). CI has
//! no musl target to run that link, so this checks its two inputs with the machine's own `awk`
//! (Debian's mawk in the Dockerfile's builder): the matching program `hack/order-symbols.awk`
//! and the committed list `hack/text-order.txt`. `hack/build-image.sh` checks the linked result.

use std::path::{Path, PathBuf};
use std::process::Command;

fn hack(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../hack")
        .join(file)
}

/// The ordering file `order-symbols.awk` makes from the link's symbols and the profiled list.
fn ordering(defined: &[&str], listed: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let symbols = dir.path().join("symbols");
    let order = dir.path().join("order");
    std::fs::write(&symbols, defined.join("\n") + "\n").expect("writing symbols");
    std::fs::write(&order, listed).expect("writing order");
    let out = Command::new("awk")
        .arg("-f")
        .arg(hack("order-symbols.awk"))
        .arg(&symbols)
        .arg(&order)
        .output()
        .expect("running awk");
    assert!(
        out.status.success(),
        "awk failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn listed_symbols_come_out_in_list_order_and_stale_hashes_fall_back_to_the_name() {
    let defined = [
        "_ZN3foo3bar17h0000000000000001E",
        "_ZN3foo3baz17h1111111111111111E",
        "_ZN3foo3baz17h2222222222222222E",
        "_ZN3foo4cold17h3333333333333333E",
        "memcpy",
    ];
    let listed = "\
# comment lines and blank lines are skipped

_ZN3foo3baz17haaaaaaaaaaaaaaaaE
memcpy
_ZN3foo3bar17h0000000000000001E
_ZN3foo3bar17h0000000000000001E
_ZN3foo3baz17h1111111111111111E
_ZN3gone3fn17hbbbbbbbbbbbbbbbbE
";
    assert_eq!(
        ordering(&defined, listed),
        [
            // A hash this link does not define: every instance of the name.
            "_ZN3foo3baz17h1111111111111111E",
            "_ZN3foo3baz17h2222222222222222E",
            // Names without a hash (C) match exactly.
            "memcpy",
            // An exact match, once however often it is listed.
            "_ZN3foo3bar17h0000000000000001E",
        ],
        "unlisted symbols (cold) and symbols the link lacks (gone) must not appear"
    );
}

#[test]
fn the_committed_list_is_a_profile_of_the_controller() {
    let text =
        std::fs::read_to_string(hack("text-order.txt")).expect("reading hack/text-order.txt");
    let names: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(
        names.len() > 1000,
        "only {} functions listed: regenerate with hack/profile-text-order.sh",
        names.len()
    );
    assert!(
        names.iter().all(|n| !n.contains(char::is_whitespace)),
        "a line is not one symbol name"
    );
    // callgrind's names of recursion cycles ("f'2") match no symbol.
    assert!(
        names.iter().all(|n| !n.contains('\'')),
        "a callgrind cycle suffix was left in a name"
    );
    // musl's assembly functions have no ELF size: callgrind names them by address, which
    // text-order.py maps back to the symbol (--binary).
    assert!(
        names.contains(&"memcpy"),
        "memcpy (named by address in the profile) is not listed"
    );
    // What every replica runs must be in it: the sync path, the shard coordinator and the
    // allocator (mangled names hold the path segments with their lengths).
    for needle in ["9composite5Inner11sync_parent", "5shard", "__libc_malloc"] {
        assert!(
            names.iter().any(|n| n.contains(needle)),
            "no function matching {needle} in hack/text-order.txt"
        );
    }
}

/// Links a small C program with `hack/link-musl.sh` for this machine (the script only needs
/// the toolchain's lld, which every Rust toolchain ships) with `rodata_order` as the read-only
/// data list, and returns the addresses of its three constants.
fn linked_rodata(rodata_order: &str) -> [u64; 3] {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("data.c");
    let object = dir.path().join("data.o");
    let binary = dir.path().join("data");
    let list = dir.path().join("rodata-order.txt");
    // Each constant in its own section (.rodata.<name>), as rustc emits them.
    std::fs::write(
        &source,
        "const char cold_before[8192] = {1};\n\
         const char hot_data[64] = {2};\n\
         const char cold_after[8192] = {3};\n\
         int main(void) { return cold_before[0] + hot_data[0] + cold_after[0]; }\n",
    )
    .expect("writing data.c");
    std::fs::write(&list, rodata_order).expect("writing the list");
    let cc = Command::new("cc")
        .args(["-O1", "-fdata-sections", "-fPIE", "-c", "-o"])
        .arg(&object)
        .arg(&source)
        .status()
        .expect("running cc");
    assert!(cc.success(), "cc failed");
    let link = Command::new(hack("link-musl.sh"))
        .env("LINK_MUSL_RODATA_ORDER", &list)
        .arg("-pie")
        .arg("-o")
        .arg(&binary)
        .arg(&object)
        .output()
        .expect("running hack/link-musl.sh");
    assert!(
        link.status.success(),
        "hack/link-musl.sh failed: {}",
        String::from_utf8_lossy(&link.stderr)
    );
    let nm = Command::new("nm")
        .arg(&binary)
        .output()
        .expect("running nm");
    let symbols = String::from_utf8_lossy(&nm.stdout);
    let address = |name: &str| {
        symbols
            .lines()
            .find_map(|l| {
                let mut fields = l.split_whitespace();
                let address = fields.next()?;
                (fields.nth(1)? == name).then(|| u64::from_str_radix(address, 16).ok())?
            })
            .unwrap_or_else(|| panic!("{name} not in the linked binary:\n{symbols}"))
    };
    [
        address("cold_before"),
        address("hot_data"),
        address("cold_after"),
    ]
}

#[test]
fn listed_rodata_sections_are_laid_out_first() {
    let [before, hot, after] = linked_rodata("# comment\n.rodata.not_in_this_link\n");
    assert!(
        hot > before.min(after),
        "unlisted, the small constant is not the first (compiler's order)"
    );
    let [before, hot, after] =
        linked_rodata("# comment\n.rodata.not_in_this_link\n.rodata.hot_data\n");
    assert!(
        hot < before && hot < after,
        "the listed constant must come first: hot {hot:x}, others {before:x} {after:x}"
    );
}

#[test]
fn the_committed_rodata_list_names_plain_sections() {
    let text =
        std::fs::read_to_string(hack("rodata-order.txt")).expect("reading hack/rodata-order.txt");
    let names: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(
        names.len() > 500,
        "only {} sections listed: regenerate with hack/profile-rodata-order.sh",
        names.len()
    );
    for name in &names {
        // A plain `.rodata` (assembly objects, a few hundred bytes each) takes all of them.
        assert!(
            *name == ".rodata" || name.starts_with(".rodata."),
            "{name} is not a .rodata input section"
        );
        // link-musl.sh quotes each name in the linker script.
        assert!(
            !name.contains(|c: char| c == '"' || c.is_whitespace()),
            "{name} cannot be quoted"
        );
        // The merged pools are placed as a whole; listing one would split nothing.
        assert!(
            !name.starts_with(".rodata.cst") && !name.starts_with(".rodata.str"),
            "{name} is a merged pool"
        );
    }
    // The sync path's constants are among them (rustc names a function's jump tables after it).
    assert!(
        names
            .iter()
            .any(|n| n.contains("9composite5Inner11sync_parent")),
        "no constant of the sync path listed"
    );
}
