//! Compiling the bridge prelude to QuickJS module bytecode. One function for both places that do
//! it: the build script (`build.rs` includes this file as a module of its own) and the engine's
//! run-time fallback (`prelude_bytecode` in `lib.rs`), so the two compile the same way.

/// Compiles `prelude` as the module `filename` whose default export is the prelude's completion
/// value (`export default install`), without its source text: 157 KB of bytecode becomes 25 KB,
/// and loading it into a new VM takes ~40 % less. The prelude's functions then print as
/// `[native code]`, as the host functions they stand for would; debug information stays (stack
/// traces still name the prelude's frames, which the driver drops).
pub(crate) fn compile(filename: &str, prelude: &str) -> Result<Vec<u8>, String> {
    use rquickjs::{CatchResultExt, Context, Module, Runtime, WriteOptions};
    let rt = Runtime::new().map_err(|e| e.to_string())?;
    let ctx = Context::full(&rt).map_err(|e| e.to_string())?;
    ctx.with(|ctx| {
        Module::declare(ctx.clone(), filename, format!("export default {prelude}"))
            .and_then(|m| m.write(WriteOptions { strip_source: true, ..WriteOptions::default() }))
            .catch(&ctx)
            .map_err(|e| e.to_string())
    })
}
