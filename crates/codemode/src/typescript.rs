//! TypeScript cells (contract §14): source transformation only — no type checking, no module resolution.
//!
//! The cell is parsed as the body of an async function (so top-level `await` and `return` work) and
//! transpiled with deno_ast; the function body is then handed to the engine like any JavaScript cell.
//! Parse errors and diagnostics fail the cell with `typescript_transform_failed` and the cell's own
//! line and column. Positions in run-time errors are mapped back to the TypeScript source through the
//! transform's source map ([`Transpiled::positions`]).
//!
//! **Hostile input.** swc parses, transforms and emits by recursion over the syntax tree, and a
//! native stack overflow aborts the whole process. Two bounds keep a cell from doing that:
//! [`codemode_bridge::nesting`] refuses cells whose tree may nest deeper than
//! [`MAX_NESTING`](codemode_bridge::nesting::MAX_NESTING) before anything parses them, and the
//! transform runs on threads of its own with a [`TRANSFORM_STACK`] stack, sized for that bound with a
//! wide margin.
//!
//! The transformer is loaded lazily (contract V16): its threads (named [`TRANSFORM_THREAD`], at most
//! [`MAX_TRANSFORM_THREADS`]) start with the first TypeScript cell of the process and then serve
//! every later one; nothing of it runs, and no such thread exists, for JavaScript cells or when code
//! mode is disabled ([`is_loaded`] tells whether it started).

use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::positions::SourcePositions;

/// The name of the transform threads (what `/proc/<pid>/task/*/comm` shows, cut to 15 bytes).
pub const TRANSFORM_THREAD: &str = "codemode-ts";

/// Most transform threads. Transforms take about a millisecond; more threads than this would only
/// reserve more stacks. Prevents: a burst of TypeScript cells starting a thread each.
pub const MAX_TRANSFORM_THREADS: usize = 4;

/// Native stack of a thread that runs the TypeScript transform: address space reserved, pages
/// committed only as the parser goes deeper. Measured need of the deepest cells the nesting bound
/// admits (the `deepest_allowed_cells_transform` test, 17 shapes): more than 1 MiB, at most 4 MiB;
/// the 16× margin covers unoptimized builds and shapes the estimate scores generously. Prevents: a
/// process abort on a stack overflow in swc.
pub const TRANSFORM_STACK: usize = 64 << 20;

/// A cell to transform and where its result goes.
#[cfg(feature = "typescript")]
type Job = (String, std::sync::mpsc::SyncSender<Result<Transpiled, CodeModeError>>);

/// The transform threads, started by the first TypeScript cell (or the error that kept them from
/// starting).
#[cfg(feature = "typescript")]
static TRANSFORMER: std::sync::OnceLock<Result<std::sync::mpsc::Sender<Job>, String>> = std::sync::OnceLock::new();

/// Whether the TypeScript transformer has been started in this process.
pub fn is_loaded() -> bool {
    #[cfg(feature = "typescript")]
    return TRANSFORMER.get().is_some();
    #[cfg(not(feature = "typescript"))]
    false
}

/// Starts the transform threads; they share one queue of cells.
#[cfg(feature = "typescript")]
fn start_transformer() -> Result<std::sync::mpsc::Sender<Job>, String> {
    use std::sync::{Arc, Mutex, mpsc};
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let threads = std::thread::available_parallelism().map_or(1, usize::from).clamp(1, MAX_TRANSFORM_THREADS);
    let mut started = 0;
    for _ in 0..threads {
        let rx = rx.clone();
        let spawned =
            std::thread::Builder::new().name(TRANSFORM_THREAD.into()).stack_size(TRANSFORM_STACK).spawn(move || {
                loop {
                    // The lock is held only while taking the next cell, not while transforming it.
                    let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok((source, reply)) = job else { return };
                    let result =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| transpile_on_this_thread(&source)))
                            .unwrap_or_else(|panic| {
                                Err(failed(format!(
                                    "the TypeScript transform failed: {}",
                                    codemode_workers::panic_message(panic)
                                )))
                            });
                    let _ = reply.send(result);
                }
            });
        match spawned {
            Ok(_) => started += 1,
            Err(e) if started == 0 => return Err(format!("cannot start the TypeScript transform: {e}")),
            Err(_) => break,
        }
    }
    Ok(tx)
}

/// A transpiled cell.
#[derive(Debug, Clone)]
pub struct Transpiled {
    /// The JavaScript function body to run.
    pub code: String,
    /// Maps positions in [`code`](Self::code) (as engines report them, `<cell>:LINE:COL`) to the
    /// TypeScript source.
    pub positions: SourcePositions,
}

/// The name of the wrapper function the cell is parsed in.
#[cfg(feature = "typescript")]
const WRAPPER: &str = "__codemode_cell__";

fn failed(message: String) -> CodeModeError {
    CodeModeError::new(CodeModeErrorCode::TypescriptTransformFailed, message)
}

/// Transpiles a TypeScript cell (the body of an async function) to a JavaScript function body.
#[cfg(feature = "typescript")]
pub fn transpile(source: &str) -> Result<Transpiled, CodeModeError> {
    use codemode_bridge::nesting::{MAX_NESTING, nesting_estimate};
    let depth = nesting_estimate(source);
    if depth > MAX_NESTING {
        return Err(failed(format!(
            "TypeScript cell nests too deeply to transform (about {depth} levels of brackets and operators; at most \
             {MAX_NESTING}). Split the deeply nested expression into separate statements, or send plain JavaScript."
        )));
    }
    let internal = |m: String| CodeModeError::new(CodeModeErrorCode::InternalError, m);
    let queue = TRANSFORMER.get_or_init(start_transformer).as_ref().map_err(|e| internal(e.clone()))?;
    let (reply, result) = std::sync::mpsc::sync_channel(1);
    queue.send((source.to_owned(), reply)).map_err(|_| internal("the TypeScript transform threads are gone".into()))?;
    result.recv().unwrap_or_else(|_| Err(internal("the TypeScript transform thread ended without an answer".into())))
}

#[cfg(feature = "typescript")]
fn transpile_on_this_thread(source: &str) -> Result<Transpiled, CodeModeError> {
    use deno_ast::diagnostics::Diagnostic as _;
    use deno_ast::{
        EmitOptions, MediaType, ModuleSpecifier, ParseParams, SourceMapOption, TranspileModuleOptions,
        TranspileOptions, parse_program,
    };
    let prefix = format!("async function {WRAPPER}() {{");
    let prefix_cols = prefix.chars().count() as u32;
    let text = format!("{prefix}{source}\n}}\n");
    let specifier = ModuleSpecifier::parse("file:///cell.ts").map_err(|e| failed(e.to_string()))?;
    let syntax_error = |d: &deno_ast::ParseDiagnostic| {
        let p = d.display_position();
        let col =
            if p.line_number == 1 { p.column_number.saturating_sub(prefix_cols as usize) } else { p.column_number };
        failed(format!("TypeScript syntax error at line {}, column {col}: {}", p.line_number, d.message()))
    };
    let parsed = parse_program(ParseParams {
        specifier,
        text: text.into(),
        media_type: MediaType::TypeScript,
        capture_tokens: false,
        scope_analysis: false,
        maybe_syntax: None,
    })
    .map_err(|d| syntax_error(&d))?;
    if let Some(d) = parsed.diagnostics().first() {
        return Err(syntax_error(d));
    }
    let emitted = parsed
        .transpile(
            &TranspileOptions::default(),
            &TranspileModuleOptions { module_kind: None },
            &EmitOptions {
                source_map: SourceMapOption::Separate,
                inline_sources: false,
                remove_comments: false,
                ..Default::default()
            },
        )
        .map_err(|e| failed(format!("TypeScript transform failed: {e}")))?
        .into_source();
    let out = emitted.text;
    // The output is `async function __codemode_cell__() { <body> }` (plus maybe a trailing newline).
    let start = out
        .find(WRAPPER)
        .and_then(|at| out[at..].find('{').map(|b| at + b + 1))
        .ok_or_else(|| failed("unexpected transpiler output".into()))?;
    let end = out.rfind('}').filter(|&e| e >= start).ok_or_else(|| failed("unexpected transpiler output".into()))?;
    let positions =
        emitted.source_map.as_deref().map(|map| positions_of(map, &out[..start], prefix_cols)).unwrap_or_default();
    Ok(Transpiled { code: out[start..end].to_string(), positions })
}

/// Builds the position table of a body that starts after `before` in the emitted text: positions in
/// the body (as the engine reports them, 1-based, line 1 starting at the body) map to 1-based
/// positions of the cell (whose first line follows the `prefix_cols` characters of the wrapper).
#[cfg(feature = "typescript")]
fn positions_of(map: &str, before: &str, prefix_cols: u32) -> SourcePositions {
    let Ok(sm) = deno_ast::swc::sourcemap::SourceMap::from_slice(map.as_bytes()) else {
        return SourcePositions::default();
    };
    let body_line = before.matches('\n').count() as u32; // 0-based line of the body's start
    let body_col = before.rsplit('\n').next().map(|l| l.encode_utf16().count()).unwrap_or(0) as u32;
    let points = sm
        .tokens()
        .filter(|t| t.has_source() && t.get_dst_line() >= body_line && t.get_src_line() != u32::MAX)
        .filter(|t| t.get_src_col() != u32::MAX)
        .map(|t| {
            let (dl, dc) = (t.get_dst_line() - body_line, t.get_dst_col());
            let dc = if dl == 0 { dc.saturating_sub(body_col) } else { dc };
            let (sl, sc) = (t.get_src_line(), t.get_src_col());
            let sc = if sl == 0 { sc.saturating_sub(prefix_cols) } else { sc };
            [dl + 1, dc + 1, sl.saturating_add(1), sc.saturating_add(1)]
        })
        .collect();
    SourcePositions::new(points)
}

/// Without the `typescript` feature, TypeScript cells fail with `unsupported_language` (never run as
/// JavaScript).
#[cfg(not(feature = "typescript"))]
pub fn transpile(_source: &str) -> Result<Transpiled, CodeModeError> {
    let _ = failed;
    Err(CodeModeError::new(
        CodeModeErrorCode::UnsupportedLanguage,
        "TypeScript cells are not supported by this build; send the cell as JavaScript (language: \"javascript\")",
    ))
}

#[cfg(all(test, feature = "typescript"))]
mod tests {
    use super::*;
    use codemode_bridge::nesting::MAX_NESTING;

    #[test]
    fn transpiles_bodies_and_reports_errors_with_cell_lines() {
        let t = transpile("const x: number = 1;\ninterface A { a: string }\nreturn x as number;").unwrap();
        let js = &t.code;
        assert!(js.contains("const x = 1") && js.contains("return x") && !js.contains("interface"), "{js}");
        let e = transpile("const a = 1;\nconst b: = 2;").unwrap_err();
        assert_eq!(e.code, Some(CodeModeErrorCode::TypescriptTransformFailed));
        assert!(e.message.contains("line 2"), "{}", e.message);
        let e = transpile("const b: = 2;").unwrap_err();
        assert!(e.message.contains("line 1, column 10"), "{}", e.message);
        assert!(is_loaded());
    }

    #[test]
    fn positions_map_back_to_the_typescript_source() {
        let src = "interface A { a: string }\ntype B = number;\n\nconst x: B = 1;\nthrow new Error(\"x\");";
        let t = transpile(src).unwrap();
        // Find where the engine would report the throw: its position in the body.
        let (line, col) = t
            .code
            .lines()
            .enumerate()
            .find_map(|(i, l)| l.find("throw").map(|c| (i as u32 + 1, c as u32 + 1)))
            .unwrap();
        assert_eq!(t.positions.lookup(line, col), Some((5, 1)), "{}", t.code);
        assert_eq!(t.positions.rewrite(&format!("at <cell>:{line}:{col}")), "at <cell>:5:1");
    }

    /// contract §15 hostile input: cells nested too deeply for swc fail cleanly instead of overflowing
    /// the host stack (which would abort the process and every session in it).
    #[test]
    fn deeply_nested_cells_fail_cleanly() {
        let n = 100_000;
        for src in [
            format!("return {}1{}", "(".repeat(n), ")".repeat(n)),
            format!("return 1{}", "+1".repeat(n)),
            format!("let x: {}number{} = 1;", "Array<".repeat(n), ">".repeat(n)),
            format!("{}{}", "{".repeat(n), "}".repeat(n)),
            format!("return {}x", "a => ".repeat(n)),
        ] {
            let e = transpile(&src).unwrap_err();
            assert_eq!(e.code, Some(CodeModeErrorCode::TypescriptTransformFailed), "{}", e.message);
            assert!(e.message.contains("nests too deeply"), "{}", e.message);
        }
    }

    /// Cells at the bound must transform on [`TRANSFORM_STACK`] without overflowing, for every shape
    /// of nesting (brackets, operator chains, type arguments, templates, statements): each shape is
    /// grown to the largest size the estimate still admits.
    #[test]
    fn deepest_allowed_cells_transform() {
        type Shape = fn(usize) -> String;
        let shapes: [(&str, Shape); 17] = [
            ("parens", |n| format!("return {}1{}", "(".repeat(n), ")".repeat(n))),
            ("arrays", |n| format!("return {}1{}", "[".repeat(n), "]".repeat(n))),
            ("objects", |n| format!("return {}1{}", "{a:".repeat(n), "}".repeat(n))),
            ("blocks", |n| format!("{}{}", "{".repeat(n), "}".repeat(n))),
            ("binary chain", |n| format!("return 1{}", "+1".repeat(n))),
            ("assignment chain", |n| format!("let x; x{}", "=x".repeat(n))),
            ("member chain", |n| format!("const a: any = 0; return a{}", ".b".repeat(n))),
            ("call chain", |n| format!("const f: any = 0; return f{}", "()".repeat(n))),
            ("unary chain", |n| format!("return {}1", "!".repeat(n))),
            ("arrows", |n| format!("return {}1", "a => ".repeat(n))),
            ("conditionals", |n| format!("return {}0", "a ? 0 : ".repeat(n))),
            ("type args", |n| format!("let x: {}number{} = 1;", "Array<".repeat(n), ">".repeat(n))),
            ("type literals", |n| format!("let x: {}number{} = 1 as any;", "{a:".repeat(n), "}".repeat(n))),
            ("if chain", |n| format!("{}x()", "if (a)\n".repeat(n))),
            ("else if chain", |n| format!("if (a) {{}}{}", "\nelse if (a) {{}}".repeat(n))),
            ("templates", |n| format!("return `{}x{}`", "${`".repeat(n), "`}".repeat(n))),
            ("functions", |n| format!("{}{}", "function f() {".repeat(n), "}".repeat(n))),
        ];
        for (name, shape) in shapes {
            let (mut lo, mut hi) = (1usize, 4 * MAX_NESTING);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if codemode_bridge::nesting::nesting_estimate(&shape(mid)) <= MAX_NESTING {
                    lo = mid
                } else {
                    hi = mid - 1
                }
            }
            let src = shape(lo);
            assert!(lo >= 50, "{name}: only {lo} levels admitted");
            // Syntax errors are fine (some shapes are not valid programs); an overflow would abort.
            let _ = transpile(&src);
        }
    }
}
