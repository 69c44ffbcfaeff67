//! The image's binary is linked by `hack/link-musl.sh` (set as the musl target's linker in
//! `.cargo/config.toml`) with the function order of `hack/text-order.txt`. Cargo does not know
//! the linker reads those files, so this tells it to relink when either changes.
fn main() {
    println!("cargo::rerun-if-changed=../../hack/text-order.txt");
    println!("cargo::rerun-if-changed=../../hack/link-musl.sh");
}
