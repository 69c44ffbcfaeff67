//! The image's binary is linked with the function order of `hack/text-order.txt`
//! (`hack/link-musl.sh`, set as the musl target's linker in `.cargo/config.toml`). Cargo does not
//! know the linker reads that file, so this tells it to relink when the file changes.
fn main() {
    println!("cargo::rerun-if-changed=../../hack/text-order.txt");
}
