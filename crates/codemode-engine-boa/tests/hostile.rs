//! What hostile cells do to the boa engine, beyond the conformance suite (which skips the limits
//! boa does not claim): the counting limits that stand in for them stop the cell, and the process
//! keeps serving. See the crate documentation for why boa is for trusted code only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeMode, CodeModeErrorCode, CodeModeExecInput, CodeModeResult};
use codemode_conformance::{config, ctx, harness, tokio_runtime};
use codemode_engine_boa::{BoaEngine, BoaLimits, LOOP_LIMIT_MESSAGE};
use serde_json::json;
use std::sync::Arc;

fn runtime(timeout_ms: u64, limits: BoaLimits) -> CodeMode {
    harness(Arc::new(BoaEngine::with_limits(limits)), config(json!({ "timeoutMs": timeout_ms })))
}

fn exec(cm: &CodeMode, src: &str) -> CodeModeResult {
    tokio_runtime().block_on(cm.exec(&ctx(), &CodeModeExecInput::code(src)))
}

fn assert_alive(cm: &CodeMode, after: &str) {
    let r = exec(cm, "return [1, 2, 3].map((x) => x * 2)");
    assert_eq!(r.to_json()["value"], json!([2, 4, 6]), "host unharmed after `{after}`: {}", r.to_json());
}

/// V18 on boa: a busy loop cannot be interrupted, but the loop-iteration limit stops it, uncatchably,
/// as `timeout`.
#[test]
fn loops_are_stopped_by_the_iteration_limit() {
    let cm = runtime(60_000, BoaLimits::default().with_loop_iterations(100_000));
    for src in [
        "while (true) {}",
        "try { while (true) {} } catch (e) { return 'caught' }",
        "for (;;) { try { for (;;) {} } catch (e) {} }",
        "let n = 0; for (let i = 0; i < 1e9; i++) n++; return n",
    ] {
        let r = exec(&cm, src);
        assert_eq!(r.error_code(), Some(CodeModeErrorCode::Timeout), "{src}: {}", r.to_json());
        assert_eq!(r.to_json()["error"], LOOP_LIMIT_MESSAGE, "{src}");
        assert_alive(&cm, src);
    }
    // Below the limit, loops run normally.
    let r = exec(&cm, "let n = 0; for (let i = 0; i < 50000; i++) n++; return n");
    assert_eq!(r.to_json()["value"], json!(50000), "{}", r.to_json());
}

/// boa drops an uncatchable error raised after an `await` (its async continuation ignores the
/// completion): the cell never settles and fails as stalled, without a code. It still fails, and
/// the host keeps serving.
#[test]
fn a_loop_after_an_await_fails_the_cell() {
    let cm = runtime(60_000, BoaLimits::default().with_loop_iterations(100_000));
    let src = "await tools.demo_echo({}); for (;;) {}";
    let r = exec(&cm, src);
    assert_eq!(r.status(), "failed", "{}", r.to_json());
    assert_alive(&cm, src);
}

/// Unbounded recursion is stopped by the recursion limit — uncatchably on boa.
#[test]
fn recursion_is_stopped_uncatchably() {
    let cm = runtime(60_000, BoaLimits::default().with_recursion(2_000));
    for src in [
        "function f(n) { return f(n + 1) + 1 } return f(0)",
        "function f(n) { return f(n + 1) + 1 } try { f(0) } catch (e) { return 'caught' }",
        "const f = (n) => [n].map((x) => f(x + 1)); return f(0)",
        "const o = { get x() { return this.x } }; return o.x",
    ] {
        let r = exec(&cm, src);
        assert_eq!(r.status(), "failed", "{src}: {}", r.to_json());
        assert!(r.to_json()["error"].as_str().unwrap().contains("recursion limit"), "{src}: {}", r.to_json());
        assert_alive(&cm, src);
    }
}

/// Deep data built iteratively and handed to boa's native (recursive) builtins.
#[test]
fn deep_data_does_not_overflow_the_host_stack() {
    let cm = runtime(60_000, BoaLimits::default());
    for src in [
        "let a = []; for (let i = 0; i < 5000; i++) a = [a]; return JSON.stringify(a).length",
        "return JSON.parse('['.repeat(100000) + ']'.repeat(100000)).length",
        "let a = {}; for (let i = 0; i < 100000; i++) a = { a }; return String(a).length",
        "let a = []; for (let i = 0; i < 100000; i++) a = [a]; return a.toString().length",
        "let a = []; for (let i = 0; i < 100000; i++) a = [a]; return a.flat(Infinity).length",
        "let a = []; for (let i = 0; i < 100000; i++) a = [a]; return 1",
        "let p = {}; for (let i = 0; i < 100000; i++) p = new Proxy(p, {}); return p.x",
        "let o = {}; for (let i = 0; i < 100000; i++) o = Object.create(o); return o.x",
        "let e = new Error('x'); for (let i = 0; i < 100000; i++) e = new Error('y', { cause: e }); return String(e)",
    ] {
        let r = exec(&cm, src);
        assert!(matches!(r.status(), "failed" | "completed"), "{src}: {}", r.to_json());
        assert_alive(&cm, src);
    }
    // boa converts nested arrays to strings by native recursion; the engine's guard makes too deep
    // a conversion a catchable RangeError instead of a stack overflow.
    let src = "let a = []; for (let i = 0; i < 100000; i++) a = [a]; \
               try { return a.toString() } catch (e) { return [e.name, [[1, [2]], 3].join('|')] }";
    let r = exec(&cm, src);
    assert_eq!(r.to_json()["value"], json!(["RangeError", "1,2|3"]), "{}", r.to_json());
}

/// Imports built at run time meet the deny-all module loader.
#[test]
fn runtime_imports_are_denied() {
    let cm = runtime(60_000, BoaLimits::default());
    let r = exec(&cm, "return await (0, eval)('imp' + 'ort(\"' + 'x'.repeat(5000) + '\")')");
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::ModuleAccessDenied), "{}", r.to_json());
    assert!(r.to_json()["error"].as_str().unwrap().len() < 400, "the specifier is cut short");
}
