//! Generators: structured inputs from raw bytes. Every generator accepts any byte string (running
//! out of bytes yields the smallest choices), so a fuzzer's mutations stay meaningful.

use arbitrary::Unstructured;
use serde_json::{Map, Value, json};

/// Keys worth trying: ordinary ones and the ones the bridge must handle specially.
const KEYS: [&str; 12] =
    ["a", "b", "x y", "", "0", "__proto__", "constructor", "prototype", "then", "toJSON", "𝄞", "\u{2028}"];

/// Strings worth trying: unicode, escapes, separators, comment terminators.
const STRINGS: [&str; 10] = ["", "plain", "𝄞 café", "*/", "\\", "\"", "\u{2028}\u{2029}", "\0", "a\nb", "ﾟ"];

fn pick<'a, T>(u: &mut Unstructured<'_>, items: &'a [T]) -> &'a T {
    let i = u.choose_index(items.len()).unwrap_or(0);
    &items[i]
}

fn small_string(u: &mut Unstructured<'_>) -> String {
    if u.ratio(1, 2).unwrap_or(true) {
        pick(u, &STRINGS).to_string()
    } else {
        let n = u.int_in_range(0..=12).unwrap_or(0);
        (0..n).map(|_| u.arbitrary::<char>().unwrap_or('x')).collect()
    }
}

/// A JSON value up to `depth` levels deep (numbers finite, keys from an interesting set).
pub fn json_value(u: &mut Unstructured<'_>, depth: u32) -> Value {
    let choice = if depth == 0 { u.int_in_range(0..=4).unwrap_or(0) } else { u.int_in_range(0..=6).unwrap_or(0) };
    match choice {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary().unwrap_or(false)),
        2 => json!(u.arbitrary::<i64>().unwrap_or(0) >> u.int_in_range(0..=60).unwrap_or(0)),
        3 => {
            let f: f64 = u.arbitrary().unwrap_or(0.0);
            if f.is_finite() { json!(f) } else { json!(0.5) }
        }
        4 => Value::String(small_string(u)),
        5 => {
            let n = u.int_in_range(0..=4).unwrap_or(0);
            Value::Array((0..n).map(|_| json_value(u, depth - 1)).collect())
        }
        _ => {
            let n = u.int_in_range(0..=4).unwrap_or(0);
            let mut m = Map::new();
            for _ in 0..n {
                let k = if u.ratio(3, 4).unwrap_or(true) { pick(u, &KEYS).to_string() } else { small_string(u) };
                m.insert(k, json_value(u, depth - 1));
            }
            Value::Object(m)
        }
    }
}

/// JSON text as a guest might send it: usually a valid document, sometimes with lone surrogate
/// escapes, deep nesting, duplicate keys, or garbage.
pub fn guest_json_text(u: &mut Unstructured<'_>) -> String {
    match u.int_in_range(0..=5).unwrap_or(0) {
        0 => json_value(u, 4).to_string(),
        1 => {
            let n = u.int_in_range(0..=200).unwrap_or(0);
            format!("{}1{}", "[".repeat(n), "]".repeat(n))
        }
        2 => {
            let escapes = ["\\ud800", "\\udc00", "\\ud83d\\ude00", "\\uDBFF", "\\\\ud800", "\\u0000", "\\ud800\\ud800"];
            let n = u.int_in_range(1..=4).unwrap_or(1);
            let body: String = (0..n).map(|_| *pick(u, &escapes)).collect();
            format!("{{\"s\":\"{body}\"}}")
        }
        3 => r#"{"a":1,"a":2,"__proto__":{"polluted":true},"constructor":{"prototype":{"x":1}}}"#.to_string(),
        4 => {
            let n = u.int_in_range(0..=32).unwrap_or(0);
            String::from_utf8_lossy(u.bytes(n).unwrap_or(&[])).into_owned()
        }
        _ => format!("{{\"n\":{}}}", "9".repeat(u.int_in_range(1..=400).unwrap_or(1))),
    }
}

/// A sequence of host-primitive calls `(kind, payload)` with real and bogus kinds.
pub fn host_calls(u: &mut Unstructured<'_>) -> Vec<(String, String)> {
    const KINDS: [&str; 13] = [
        "search",
        "describe",
        "call",
        "mcp",
        "mcp_api",
        "namespace",
        "yield",
        "text",
        "json",
        "pull",
        "exec",
        "",
        "CALL",
    ];
    let n = u.int_in_range(0..=24).unwrap_or(0);
    (0..n)
        .map(|_| {
            let kind = pick(u, &KINDS).to_string();
            let payload = match u.int_in_range(0..=3).unwrap_or(0) {
                0 => match kind.as_str() {
                    "search" => json!({"query": small_string(u), "limit": json_value(u, 0)}).to_string(),
                    "describe" => json!({"id": small_string(u)}).to_string(),
                    "call" => {
                        json!({"id": small_string(u), "mode": pick(u, &["value", "raw", "x"]), "input": json_value(u, 3)})
                            .to_string()
                    }
                    "mcp" => json!({"server": small_string(u), "tool": small_string(u), "input": json_value(u, 2)})
                        .to_string(),
                    "mcp_api" => json!({"server": small_string(u), "tool": json_value(u, 0), "schema": json_value(u, 0)})
                        .to_string(),
                    "yield" => json!({"reason": json_value(u, 0)}).to_string(),
                    "namespace" => json!({"namespace": small_string(u), "path": small_string(u), "args": json_value(u, 2), "line": json_value(u, 0)})
                        .to_string(),
                    _ => small_string(u),
                },
                1 => json_value(u, 3).to_string(),
                2 => guest_json_text(u),
                _ => small_string(u),
            };
            (kind, payload)
        })
        .collect()
}

/// A configuration file (JSON5), mostly well-formed, with values in and out of range and wrong
/// types.
pub fn config_text(u: &mut Unstructured<'_>) -> String {
    const FIELDS: [&str; 12] = [
        "enabled",
        "timeoutMs",
        "memoryLimitBytes",
        "maxOutputBytes",
        "maxSnapshotBytes",
        "maxPendingToolCalls",
        "snapshotTtlSeconds",
        "searchDefaultLimit",
        "maxSearchLimit",
        "runtime",
        "languages",
        "bogus",
    ];
    if u.ratio(1, 8).unwrap_or(false) {
        return guest_json_text(u);
    }
    let n = u.int_in_range(0..=6).unwrap_or(0);
    let mut fields = Vec::new();
    for _ in 0..n {
        let name = pick(u, &FIELDS);
        let value = match u.int_in_range(0..=5).unwrap_or(0) {
            0 => "true".to_string(),
            1 => u.arbitrary::<i64>().unwrap_or(0).to_string(),
            2 => format!("{:e}", u.arbitrary::<f64>().unwrap_or(0.0)),
            3 => "\"quickjs\"".to_string(),
            4 => "[\"javascript\", \"typescript\", \"cobol\"]".to_string(),
            _ => json_value(u, 2).to_string(),
        };
        fields.push(format!("{name}: {value}"));
    }
    let code_mode = format!("{{ {} }}", fields.join(", "));
    match u.int_in_range(0..=3).unwrap_or(0) {
        0 => format!("{{ tools: {{ codeMode: {code_mode} }} }}"),
        1 => "{ tools: { codeMode: true } }".to_string(),
        2 => format!("{{ tools: {{ codeMode: {code_mode}, profile: {} }} }}", json_value(u, 1)),
        _ => format!("// comment\n{{ tools: {{ codeMode: {code_mode}, }}, mcpServers: {} }}", json_value(u, 2)),
    }
}

/// A small JavaScript cell from a grammar: values, operators, string and array methods,
/// exceptions, nested tool calls, output, and a returned value — programs both engines must agree
/// on (no randomness, no time).
pub fn cell(u: &mut Unstructured<'_>) -> String {
    let mut lines = vec!["const out = [];".to_string()];
    let n = u.int_in_range(1..=6).unwrap_or(1);
    for i in 0..n {
        let line = match u.int_in_range(0..=9).unwrap_or(0) {
            0 => format!("const v{i} = {};", js_expr(u, 3)),
            1 => format!("out.push({});", js_expr(u, 3)),
            2 => format!("try {{ out.push({}); }} catch (e) {{ out.push(e.name); }}", js_expr(u, 3)),
            3 => format!("out.push(await tools.demo_echo({{ v: {} }}));", js_expr(u, 2)),
            4 => format!("text({});", js_expr(u, 2)),
            5 => format!("json({});", js_expr(u, 2)),
            6 => "try { await tools.demo_fail({}); } catch (e) { out.push(e.code); }".to_string(),
            7 => format!("if ({}) {{ out.push('then'); }} else {{ out.push('else'); }}", js_expr(u, 2)),
            8 => format!("out.push(JSON.stringify({}));", js_expr(u, 2)),
            _ => format!("out.push([{}].map((x) => typeof x));", js_expr(u, 2)),
        };
        lines.push(line);
    }
    if u.ratio(1, 8).unwrap_or(false) {
        lines.push(format!("throw new Error({});", js_expr(u, 1)));
    }
    lines.push(format!("return {{ out, last: {} }};", js_expr(u, 2)));
    lines.join("\n")
}

fn js_expr(u: &mut Unstructured<'_>, depth: u32) -> String {
    let leaf = |u: &mut Unstructured<'_>| -> String {
        match u.int_in_range(0..=7).unwrap_or(0) {
            0 => u.arbitrary::<i32>().unwrap_or(0).to_string(),
            1 => format!("{:?}", u.arbitrary::<f32>().unwrap_or(0.5)).replace("inf", "Infinity"),
            2 => serde_json::to_string(&small_string(u)).unwrap_or_else(|_| "''".into()),
            3 => "null".into(),
            4 => "undefined".into(),
            5 => "true".into(),
            6 => format!("{}n", u.arbitrary::<u32>().unwrap_or(0)),
            _ => json_value(u, 2).to_string(),
        }
    };
    if depth == 0 {
        return leaf(u);
    }
    let a = js_expr(u, depth - 1);
    match u.int_in_range(0..=9).unwrap_or(0) {
        0 | 1 => leaf(u),
        2 => format!(
            "({a} {} {})",
            pick(u, &["+", "-", "*", "/", "%", "===", "<", "&&", "||", "??"]),
            js_expr(u, depth - 1)
        ),
        3 => format!("[{a}, {}]", js_expr(u, depth - 1)),
        4 => format!("({{ k: {a}, [String({})]: 1 }})", js_expr(u, depth - 1)),
        5 => format!("String({a}).slice(0, 8)"),
        6 => format!("typeof {a}"),
        7 => format!("new Map([[1, {a}]])"),
        8 => format!("Array.isArray({a}) ? {a} : [{a}]"),
        _ => {
            format!("(() => {{ try {{ return JSON.parse(JSON.stringify({a})); }} catch (e) {{ return e.name; }} }})()")
        }
    }
}

/// Pieces of JavaScript the module guard and the nesting estimate must read alike: regex literals
/// next to divisions, comments, template literals with substitutions, strings with escapes, and
/// the `import` / `require` forms the guard refuses.
const JS_PIECES: [&str; 28] = [
    "a / b / c",
    "/re/g.test(x)",
    "x = /[/]/",
    "/* c */",
    "// line\n",
    "`t ${ a } u`",
    "`${`${x}`}`",
    "'s\\'q'",
    "\"d\\\"q\"",
    "import('m')",
    "require('fs')",
    "import x from 'y'",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "a.b",
    "!x",
    "1+1",
    "return ",
    "if (a) b; else c;",
    "} /re/",
    ") / 2",
    "x++ / 2",
    "typeof /r/",
    "\n",
];

/// JavaScript-like source from a grammar of troublesome pieces (plus raw characters): inputs for
/// the static module guard and the nesting estimate.
pub fn js_source(u: &mut Unstructured<'_>) -> String {
    let n = u.int_in_range(0..=40).unwrap_or(0);
    let mut out = String::new();
    for _ in 0..n {
        if u.ratio(1, 6).unwrap_or(false) {
            out.push(u.arbitrary::<char>().unwrap_or(' '));
        } else {
            let piece: &str = pick::<&str>(u, &JS_PIECES);
            out.push_str(piece);
            out.push(' ');
        }
    }
    out
}

/// What to do to a valid exported run: flip one bit, cut it short, or append bytes.
#[derive(Debug, Clone, Copy)]
pub enum Damage {
    /// Flip bit `bit` of byte `at` (taken modulo the length).
    Flip {
        /// Byte index (modulo the length).
        at: usize,
        /// Bit index (0–7).
        bit: u8,
    },
    /// Keep only the first `len` bytes (modulo the length).
    Truncate(usize),
    /// Append this many zero bytes.
    Extend(usize),
}

/// A damage to apply to an exported run.
pub fn damage(u: &mut Unstructured<'_>) -> Damage {
    match u.int_in_range(0..=2).unwrap_or(0) {
        0 => Damage::Flip { at: u.arbitrary().unwrap_or(0), bit: u.int_in_range(0..=7).unwrap_or(0) },
        1 => Damage::Truncate(u.arbitrary().unwrap_or(0)),
        _ => Damage::Extend(u.int_in_range(1..=64).unwrap_or(1)),
    }
}

/// A quickjs-wasi snapshot page table for a memory of `pages` pages: page records in mostly
/// ascending order, each with a few runs whose offsets and lengths are mostly whole words inside the
/// page, and now and then a record that breaks one rule (an index out of order or past the memory,
/// no runs, a run that is not whole words, overlaps, or crosses the page's end, a record cut short).
pub fn wasi_page_table(u: &mut Unstructured<'_>, pages: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut index = 0u32;
    let records = u.int_in_range(0..=6).unwrap_or(0);
    for _ in 0..records {
        let odd = u.ratio(1, 8).unwrap_or(false);
        index = if odd { u.arbitrary().unwrap_or(0) } else { index + u.int_in_range(0..=3).unwrap_or(0) };
        if index >= pages && !odd {
            break;
        }
        out.extend_from_slice(&index.to_le_bytes());
        let runs: u16 = if u.ratio(1, 16).unwrap_or(false) { 0 } else { u.int_in_range(1..=4).unwrap_or(1) };
        out.extend_from_slice(&runs.to_le_bytes());
        let mut offset = 0u16;
        for _ in 0..runs {
            let (start, len): (u16, u16) = if u.ratio(1, 8).unwrap_or(false) {
                (u.arbitrary().unwrap_or(0), u.arbitrary().unwrap_or(0))
            } else {
                let start = offset + 8 * u.int_in_range(0..=40).unwrap_or(0);
                (start, 8 * u.int_in_range(1..=8).unwrap_or(1))
            };
            out.extend_from_slice(&start.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            let content_len = if u.ratio(1, 16).unwrap_or(false) { usize::from(len) / 2 } else { usize::from(len) };
            for _ in 0..content_len {
                out.push(u.arbitrary().unwrap_or(0));
            }
            offset = start.saturating_add(len).saturating_add(8);
        }
        index += 1;
    }
    out
}
