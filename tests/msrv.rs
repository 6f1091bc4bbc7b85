//! The Rust version dq declares (`rust-version`, its MSRV) is one it builds with: no crate in
//! the lock file asks for a newer compiler. Clippy's `incompatible_msrv` lint (on under
//! `-D warnings` in scripts/test) checks dq's own use of the standard library against the same
//! version. A build with that exact toolchain is not made here: only the current one can be
//! installed on this project's machines.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

/// `1.88` and `1.88.0` alike, as major, minor, patch.
fn version(text: &str) -> [u64; 3] {
    let mut v = [0; 3];
    for (slot, part) in v.iter_mut().zip(text.split('.')) {
        *slot = part.parse().unwrap();
    }
    v
}

#[test]
fn no_dependency_needs_a_newer_rust_than_the_declared_one() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let declared = env!("CARGO_PKG_RUST_VERSION");
    let too_new: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            (version(needs) > version(declared))
                .then(|| format!("{} {} needs {needs}", p["name"], p["version"]))
        })
        .collect();
    assert!(
        too_new.is_empty(),
        "dq declares rust-version {declared}, but {too_new:?}: raise rust-version in Cargo.toml (and say so in CHANGELOG.md) or pin an older version"
    );
    assert!(packages.len() > 20, "the lock file was read");
}
