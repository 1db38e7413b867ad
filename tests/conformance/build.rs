//! Generates the list of corpus cases (`cases/*.js`) and their expected results, compiled into the
//! suite (`suite` makes one trial per case).
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read at run time, not baked in with `env!`: cargo may reuse a compiled build script for a
    // checkout at another path (a shared target directory), and a stale path would silently yield
    // an empty suite.
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| panic!("CARGO_MANIFEST_DIR is not set"));
    let dir = Path::new(&root).join("cases");
    println!("cargo:rerun-if-changed={}", dir.display());
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path();
            (p.extension().is_some_and(|x| x == "js")).then(|| p.file_stem()?.to_str().map(str::to_string))?
        })
        .collect();
    assert!(!names.is_empty(), "no conformance cases in {}", dir.display());
    names.sort();
    let mut out = String::new();
    out.push_str("/// Every corpus case: `(name, source)`.\npub static CASES: &[(&str, &str)] = &[\n");
    for n in &names {
        let _ = writeln!(out, "    ({n:?}, include_str!({:?})),", dir.join(format!("{n}.js")).display().to_string());
    }
    out.push_str("];\n\n");
    // The expected results travel inside the suite (never read from, or written to, a dependency's
    // directory at test time).
    let snaps = Path::new(&root).join("snapshots");
    println!("cargo:rerun-if-changed={}", snaps.display());
    out.push_str("/// The expected result of every case that has one: `(name, snapshot file text)`.\npub static EXPECTED: &[(&str, &str)] = &[\n");
    for n in &names {
        let f = snaps.join(format!("{n}.snap"));
        if f.exists() {
            let _ = writeln!(out, "    ({n:?}, include_str!({:?})),", f.display().to_string());
        }
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("cases.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        println!("cargo:warning=cannot write {}: {e}", dest.display());
    }
}
