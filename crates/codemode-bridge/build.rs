//! Computes the SHA-256 of the guest prelude at build time ([`PRELUDE_SHA256`] in the crate), so
//! an engine that names its build by the prelude (the quickjs-wasi engine's build id) does not
//! hash its ~60 KB at every process start.
//!
//! The prelude's text is `src/js/prelude/*.js` joined in file-name order, the order
//! `PRELUDE` concatenates them in; a unit test checks that the digest is of `PRELUDE` exactly.

use sha2::Digest as _;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let dir = manifest.join("src/js/prelude");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "js"))
            .collect(),
        Err(e) => panic!("cannot read the prelude's layers in {}: {e}", dir.display()),
    };
    files.sort();
    let mut hasher = sha2::Sha256::new();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        match std::fs::read(file) {
            Ok(bytes) => hasher.update(&bytes),
            Err(e) => panic!("cannot read {}: {e}", file.display()),
        }
    }
    let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        panic!("OUT_DIR is not set");
    };
    if let Err(e) = std::fs::write(out.join("prelude_sha256.txt"), hex) {
        panic!("cannot write the prelude's digest: {e}");
    }
}
