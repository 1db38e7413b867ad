//! Compiles the bridge prelude to QuickJS bytecode at build time, so a process's first native VM
//! only loads it: compiling the ~157 KB prelude took ~2.5 ms of every `codemode run --engine quickjs`
//! (a quarter of the process's CPU).
//!
//! The prelude's text is the bridge crate's `src/js/prelude/*.js`, joined in file-name order (the
//! order `codemode_bridge::PRELUDE` concatenates them in). The build writes two files to
//! `$OUT_DIR`: `prelude.qjsbc`, the module bytecode (`export default <prelude>`, without its source
//! text), and `prelude.js`, the exact text it was compiled from. The engine uses the bytecode only
//! when that text equals `codemode_bridge::PRELUDE` at run time, so a mismatch (a layer renamed, a
//! file left out) costs a compile, never a wrong prelude; a test fails on it.
//!
//! Nothing is embedded (and the engine compiles the prelude on first use, as before) when the
//! bridge's sources are not next to this crate, or when cross-compiling: the bytecode is written by
//! this build's QuickJS for the host, and is only known to fit a target that is the host.

use std::path::{Path, PathBuf};

/// The compile the engine's run-time fallback uses too.
#[path = "src/prelude_compile.rs"]
mod prelude_compile;

/// Must match `codemode_bridge::PRELUDE_FILENAME` (it names the prelude's frames in stack traces).
const PRELUDE_FILENAME: &str = "<codemode-prelude>";

fn main() {
    println!("cargo:rustc-check-cfg=cfg(codemode_prelude_bytecode)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/prelude_compile.rs");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let prelude_dir = manifest.join("../codemode-bridge/src/js/prelude");
    println!("cargo:rerun-if-changed={}", prelude_dir.display());
    let host = std::env::var("HOST").unwrap_or_default();
    let target = std::env::var("TARGET").unwrap_or_default();
    if host != target {
        println!("cargo:warning=cross-compiling: the native prelude is compiled on first use instead of at build time");
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    let source = match read_prelude(&prelude_dir) {
        Ok(source) => source,
        Err(e) => {
            println!("cargo:warning=the native prelude is compiled on first use: {e}");
            return;
        }
    };
    match prelude_compile::compile(PRELUDE_FILENAME, &source) {
        Ok(bytecode) => {
            let written = std::fs::write(out.join("prelude.qjsbc"), bytecode)
                .and_then(|()| std::fs::write(out.join("prelude.js"), &source));
            match written {
                Ok(()) => println!("cargo:rustc-cfg=codemode_prelude_bytecode"),
                Err(e) => println!("cargo:warning=cannot write the prelude's bytecode: {e}"),
            }
        }
        // The engine reports the compile error itself, at run time, with the same message.
        Err(e) => println!("cargo:warning=the prelude does not compile: {e}"),
    }
}

/// The prelude's layers, joined in file-name order.
fn read_prelude(dir: &Path) -> Result<String, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "js")).collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no prelude layers in {}", dir.display()));
    }
    let mut source = String::new();
    for file in files {
        println!("cargo:rerun-if-changed={}", file.display());
        source.push_str(&std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?);
    }
    Ok(source)
}
