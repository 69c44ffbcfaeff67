//! The committed CRD files must equal what the code generates.

use std::path::PathBuf;

use metacontroller_api::crds;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn crd_paths() -> Vec<PathBuf> {
    let root = repo_root();
    vec![
        root.join("deploy/crds").join(crds::CRD_FILE_NAME),
        root.join("charts/metacontroller/crds")
            .join(crds::CRD_FILE_NAME),
    ]
}

/// With `METACONTROLLER_UPDATE_CRDS=1` (what `hack/gen-crds.sh` sets) the files are
/// rewritten instead of compared.
#[test]
fn committed_crds_match_generated() {
    let generated = crds::all_yaml();
    let update = std::env::var("METACONTROLLER_UPDATE_CRDS").is_ok_and(|v| v == "1");
    for path in crd_paths() {
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &generated).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} differs from the CRDs generated from crates/api; run hack/gen-crds.sh and commit the result",
            path.display()
        );
    }
}
