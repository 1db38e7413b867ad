//! A cheap upper bound on how deeply a cell's syntax tree can nest, computed before any parser runs.
//!
//! Host-side parsers of cell source (the TypeScript transform: deno_ast/swc) recurse once per level
//! of the syntax tree, and a native stack overflow aborts the whole process — every client of a
//! `codemode serve` gateway at once. QuickJS checks its own stack, but swc does not. So a cell whose
//! tree may nest deeper than [`MAX_NESTING`] is refused before it is parsed, and the parser runs on a
//! thread whose stack is sized for that bound with a wide margin (defence in depth).
//!
//! The estimate reads the token stream of `tokens.rs`, the very one the module guard
//! ([`crate::modules`]) reads, so comments, strings, template text and regular expressions are
//! skipped exactly where the guard skips them (neither decides on its own where a regular expression
//! starts). Over that stream it over-approximates the tree depth:
//!
//! - every bracket `(` `[` `{` and template `${` opens a group one level deeper;
//! - inside a group, a *segment* runs from one `,` or `;` to the next; every operator character and
//!   every operator keyword (`typeof`, `await`, `new`, `if`, `else`, …) in a segment may add a level
//!   (`1+1+1+…`, `a.b.c.…`, `!!!x`, `a=b=c`, `if (a) if (b) …` all nest without brackets), and so
//!   does a group that follows a value (`f()()()`, `a[0][0]`);
//! - a group's depth is 1 + the largest (operators in a segment + deepest child group in it);
//! - a line break ends a segment when it cannot continue an expression: the line before ends in a
//!   value and the next begins with a word, number or string that is not a binary keyword (`in`,
//!   `instanceof`, `as`, `satisfies`) or `else`. So long programs without semicolons are not counted
//!   as one deep expression, while `1\n+1\n+1…` still is.
//!
//! Ordinary code scores far below the bound (a 300-line cell of tool calls scores ~10–30); only
//! machine-generated nesting reaches it.

use crate::tokens::{Kind, Tokens};

/// Largest nesting estimate a cell may have before a host-side parser sees it. Deeper cells fail
/// with `typescript_transform_failed` (TypeScript) before parsing. Prevents: a stack overflow of the
/// host process in the TypeScript transform (a fatal, uncatchable abort).
pub const MAX_NESTING: usize = 1_000;

/// Words that act as operators: each may add a level of nesting.
const OP_WORDS: [&str; 22] = [
    "typeof",
    "void",
    "delete",
    "await",
    "new",
    "yield",
    "in",
    "instanceof",
    "of",
    "as",
    "satisfies",
    "keyof",
    "infer",
    "extends",
    "if",
    "else",
    "while",
    "for",
    "do",
    "with",
    "return",
    "throw",
];

/// Words that, at the start of a line, continue the previous line's expression or statement.
const CONTINUATION_WORDS: [&str; 5] = ["in", "instanceof", "as", "satisfies", "else"];

#[derive(Default)]
struct Group {
    /// Operators in the current segment.
    ops: usize,
    /// Deepest child group in the current segment.
    child: usize,
    /// Deepest finished segment.
    best: usize,
}

impl Group {
    fn end_segment(&mut self) {
        self.best = self.best.max(self.ops + self.child);
        self.ops = 0;
        self.child = 0;
    }

    fn depth(mut self) -> usize {
        self.end_segment();
        1 + self.best
    }
}

/// The nesting estimate of `src` (see the module docs). Linear time, constant stack.
pub fn nesting_estimate(src: &str) -> usize {
    let mut stack: Vec<Group> = vec![Group::default()];
    // The previous token is a value (identifier, literal, closing bracket): a group after it is a
    // call, index or body, a template after it is tagged, and a line break after it may end the
    // segment. Operator words and statement headers are not values. This is counting only: where a
    // `/` divides and where a regular expression starts is the token stream's decision.
    let mut value = false;
    let mut deepest = 0usize;

    fn op(stack: &mut [Group], n: usize) {
        if let Some(g) = stack.last_mut() {
            g.ops += n;
        }
    }
    fn open(stack: &mut Vec<Group>, deepest: &mut usize) {
        stack.push(Group::default());
        *deepest = (*deepest).max(stack.len());
    }
    /// Closes the innermost group (never the top level).
    fn close(stack: &mut Vec<Group>) {
        if stack.len() <= 1 {
            return;
        }
        let Some(g) = stack.pop() else { return };
        let d = g.depth();
        if let Some(parent) = stack.last_mut() {
            parent.child = parent.child.max(d);
        }
    }

    for t in Tokens::new(src) {
        // Does a preceding line break end the segment?
        let starts_statement = match t.kind {
            Kind::Str | Kind::Number => true,
            Kind::Word(w) => !CONTINUATION_WORDS.contains(&w),
            _ => false,
        };
        if t.newline_before
            && value
            && starts_statement
            && let Some(g) = stack.last_mut()
        {
            g.end_segment();
        }
        value = match t.kind {
            Kind::Word(w) if OP_WORDS.contains(&w) => {
                op(&mut stack, 1);
                false
            }
            Kind::Word(_) | Kind::Number | Kind::Str | Kind::Regex => true,
            Kind::Template { head, tail } => {
                if head && value {
                    op(&mut stack, 1); // a tagged template nests its tag
                }
                tail
            }
            Kind::SubstOpen => {
                open(&mut stack, &mut deepest);
                false
            }
            Kind::SubstClose => {
                close(&mut stack);
                false
            }
            Kind::Open { header, .. } => {
                if value && !header {
                    op(&mut stack, 1); // call, index or body after a value
                }
                open(&mut stack, &mut deepest);
                false
            }
            Kind::Close { header, .. } => {
                close(&mut stack);
                // After `if (…)` a statement body follows: it nests, like an operator.
                !header
            }
            Kind::Punct { first: b';' | b',', .. } => {
                if let Some(g) = stack.last_mut() {
                    g.end_segment();
                }
                false
            }
            Kind::Punct { len, .. } => {
                // `.`, `+`, `=`, `?`, `:`, `!`, `<`, `=>`, a dividing `/`, …: one level per character.
                op(&mut stack, len);
                false
            }
        };
    }
    while stack.len() > 1 {
        close(&mut stack);
    }
    let root = stack.pop().map(Group::depth).unwrap_or(1);
    root.max(deepest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_cells_score_low() {
        let cell = r#"
            const [t] = await tools.search("list shipments");
            const shipments = await tools.callValue(t.id, {});
            const unpaid = shipments.filter((s) => !s.paid && s.tons > 10).map((s) => s.id);
            if (unpaid.length > 0) {
              text(`unpaid: ${unpaid.join(", ")}`);
            } else if (shipments.length === 0) {
              text("none");
            }
            return { unpaid, count: shipments.length, ok: /^[a-z]+$/.test("abc") };
        "#;
        assert!(nesting_estimate(cell) < 40, "{}", nesting_estimate(cell));
        // 500 lines without semicolons stay shallow: each line break ends the statement.
        let lines: String = (0..500).map(|i| format!("const a{i} = await tools.demo_echo({{ i: {i} }})\n")).collect();
        assert!(nesting_estimate(&lines) < 40, "{}", nesting_estimate(&lines));
        // Big flat data is flat.
        let data = format!("return [{}]", (0..10_000).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
        assert!(nesting_estimate(&data) < 10);
    }

    #[test]
    fn every_kind_of_deep_nesting_is_seen() {
        let n = 2_000;
        let cases = [
            format!("return {}1{}", "(".repeat(n), ")".repeat(n)),
            format!("return {}1{}", "[".repeat(n), "]".repeat(n)),
            format!("return {}{}", "{a:".repeat(n), "}".repeat(n)),
            format!("return 1{}", "+1".repeat(n)),
            format!("return 1{}", "\n+1".repeat(n)),
            format!("x{}", "=x".repeat(n)),
            format!("return a{}", ".b".repeat(n)),
            format!("return f{}", "()".repeat(n)),
            format!("return {}x", "!".repeat(n)),
            format!("return {}x", "typeof ".repeat(n)),
            format!("return {}x", "a => ".repeat(n)),
            format!("return {}0", "a ? 0 : ".repeat(n)),
            format!("{}x()", "if (a)\n".repeat(n)),
            format!("if (a) {{}}{}", "\nelse if (a) {{}}".repeat(n)),
            format!("let x: {}number{};", "Array<".repeat(n), ">".repeat(n)),
            format!("return `{}x{}`", "${`".repeat(n), "`}".repeat(n)),
            format!("{}{}", "function f() {".repeat(n), "}".repeat(n)),
        ];
        for src in &cases {
            let e = nesting_estimate(src);
            assert!(e > MAX_NESTING, "estimate {e} for {}", &src[..60.min(src.len())]);
        }
    }

    /// The token stream names only its known words; any other word would never match here.
    #[test]
    fn the_words_counted_are_words_the_stream_tells_apart() {
        for w in OP_WORDS.iter().chain(&CONTINUATION_WORDS) {
            assert!(crate::tokens::KNOWN_WORDS.contains(w), "{w}");
        }
    }

    #[test]
    fn hostile_lexical_tricks_do_not_hide_nesting() {
        // A fake regex or string cannot close groups early: they are skipped as a whole.
        let src = format!("const r = /)/; const s = ')'; return {}1{}", "(".repeat(1500), ")".repeat(1500));
        assert!(nesting_estimate(&src) > MAX_NESTING);
        // A real division after an object literal or a function expression is not taken for a
        // regex that would hide the brackets after it.
        for head in ["x = {}", "x = function () {}", "x = class {}", "x = `${ {} }`"] {
            let src = format!("{head} / {}1{} / 2", "(".repeat(1500), ")".repeat(1500));
            assert!(nesting_estimate(&src) > MAX_NESTING, "{head}");
        }
        // Unbalanced input is still bounded and scored.
        assert!(nesting_estimate(&"(".repeat(5000)) > MAX_NESTING);
        assert!(nesting_estimate(&")".repeat(5000)) < 10);
        assert_eq!(nesting_estimate(""), 1);
    }
}
