//! A cheap upper bound on how deeply a cell's syntax tree can nest, computed before any parser runs.
//!
//! Host-side parsers of cell source (the TypeScript transform: deno_ast/swc) recurse once per level
//! of the syntax tree, and a native stack overflow aborts the whole process — every client of a
//! `codemode serve` gateway at once. QuickJS checks its own stack, but swc does not. So a cell whose
//! tree may nest deeper than [`MAX_NESTING`] is refused before it is parsed, and the parser runs on a
//! thread whose stack is sized for that bound with a wide margin (defence in depth).
//!
//! The estimate is a tokenizer pass (the same lexical rules as the module guard: comments, strings,
//! templates and regular expressions are skipped) that over-approximates the tree depth:
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

use crate::modules::Scanner;

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

/// Words after whose parenthesised header a statement body follows (`if (x) if (y) …` nests).
const HEADER_WORDS: [&str; 4] = ["if", "while", "for", "with"];

#[derive(Default)]
struct Group {
    /// Operators in the current segment.
    ops: usize,
    /// Deepest child group in the current segment.
    child: usize,
    /// Deepest finished segment.
    best: usize,
    /// This parenthesis closes an `if`/`while`/`for`/`with` header.
    header: bool,
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// Start, an operator or an opening bracket: a `/` starts a regular expression.
    Operator,
    /// A value (identifier, number, string, closing bracket): a `/` divides.
    Value,
}

/// The nesting estimate of `src` (see the module docs). Linear time, constant stack.
pub fn nesting_estimate(src: &str) -> usize {
    let mut s = Scanner::new(src);
    let mut stack: Vec<Group> = vec![Group::default()];
    // Each entry: stack depth at which a template `${…}` expression group ends.
    let mut templates: Vec<usize> = Vec::new();
    let mut last = Last::Operator;
    let mut last_word: &str = "";
    let mut newline = false;
    let mut deepest = 0usize;

    fn op(stack: &mut [Group], n: usize) {
        if let Some(g) = stack.last_mut() {
            g.ops += n;
        }
    }
    fn open(stack: &mut Vec<Group>, header: bool, deepest: &mut usize) {
        stack.push(Group { header, ..Group::default() });
        *deepest = (*deepest).max(stack.len());
    }
    /// Reads template text up to `${` (which opens a group) or the closing backtick; returns what the
    /// scanner saw last.
    fn template_chunk(
        s: &mut Scanner<'_>,
        stack: &mut Vec<Group>,
        templates: &mut Vec<usize>,
        deepest: &mut usize,
    ) -> Last {
        if s.skip_template_chunk() {
            templates.push(stack.len());
            open(stack, false, deepest);
            Last::Operator
        } else {
            Last::Value
        }
    }
    /// Closes the innermost group; returns whether it was a statement header.
    fn close(stack: &mut Vec<Group>) -> bool {
        if stack.len() <= 1 {
            return false;
        }
        let Some(g) = stack.pop() else { return false };
        let header = g.header;
        let d = g.depth();
        if let Some(parent) = stack.last_mut() {
            parent.child = parent.child.max(d);
        }
        header
    }

    while !s.at_end() {
        let c = s.peek(0);
        let line_before = s.line();
        match c {
            b'\n' => {
                newline = true;
                s.bump();
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                s.bump();
                continue;
            }
            b'/' if s.peek(1) == b'/' => {
                s.skip_line_comment();
                continue;
            }
            b'/' if s.peek(1) == b'*' => {
                s.skip_block_comment();
                newline |= s.line() != line_before;
                continue;
            }
            _ => {}
        }
        // A significant token starts here. Does a preceding line break end the segment?
        let starts_statement = c == b'\''
            || c == b'"'
            || c.is_ascii_digit()
            || (c == b'_' || c == b'$' || c.is_ascii_alphabetic() || c >= 0x80)
                && !CONTINUATION_WORDS.contains(&s.peek_word());
        if newline
            && last == Last::Value
            && starts_statement
            && let Some(g) = stack.last_mut()
        {
            g.end_segment();
        }
        newline = false;
        let mut word = "";
        match c {
            b'/' if last == Last::Value => {
                s.bump();
                op(&mut stack, 1);
                last = Last::Operator;
            }
            b'/' => {
                s.skip_regex();
                last = Last::Value;
            }
            b'\'' | b'"' => {
                s.skip_string(c);
                last = Last::Value;
            }
            b'`' => {
                if last == Last::Value {
                    op(&mut stack, 1); // a tagged template nests its tag
                }
                s.bump();
                last = template_chunk(&mut s, &mut stack, &mut templates, &mut deepest);
            }
            b'(' | b'[' | b'{' => {
                let header = c == b'(' && HEADER_WORDS.contains(&last_word);
                if last == Last::Value && !header {
                    op(&mut stack, 1); // call, index or body after a value
                }
                s.bump();
                open(&mut stack, header, &mut deepest);
                last = Last::Operator;
            }
            b')' | b']' | b'}' => {
                s.bump();
                if c == b'}' && templates.last() == Some(&(stack.len() - 1)) {
                    templates.pop();
                    close(&mut stack);
                    last = template_chunk(&mut s, &mut stack, &mut templates, &mut deepest);
                } else {
                    let header = close(&mut stack);
                    // After `if (…)` a statement body follows: it nests, like an operator.
                    last = if header { Last::Operator } else { Last::Value };
                }
            }
            b';' | b',' => {
                s.bump();
                if let Some(g) = stack.last_mut() {
                    g.end_segment();
                }
                last = Last::Operator;
            }
            b'0'..=b'9' => {
                s.skip_number();
                last = Last::Value;
            }
            b'.' if s.peek(1).is_ascii_digit() => {
                s.skip_number();
                last = Last::Value;
            }
            c if c == b'_' || c == b'$' || c.is_ascii_alphabetic() || c >= 0x80 || c == b'\\' => {
                word = s.read_word();
                if OP_WORDS.contains(&word) {
                    op(&mut stack, 1);
                    last = Last::Operator;
                } else {
                    last = Last::Value;
                }
            }
            _ => {
                // Any other punctuator character: `.`, `+`, `=`, `?`, `:`, `!`, `<`, `=>`, …
                s.bump();
                op(&mut stack, 1);
                last = Last::Operator;
            }
        }
        last_word = word;
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

    #[test]
    fn hostile_lexical_tricks_do_not_hide_nesting() {
        // A fake regex or string cannot close groups early: they are skipped as a whole.
        let src = format!("const r = /)/; const s = ')'; return {}1{}", "(".repeat(1500), ")".repeat(1500));
        assert!(nesting_estimate(&src) > MAX_NESTING);
        // Unbalanced input is still bounded and scored.
        assert!(nesting_estimate(&"(".repeat(5000)) > MAX_NESTING);
        assert!(nesting_estimate(&")".repeat(5000)) < 10);
        assert_eq!(nesting_estimate(""), 1);
    }
}
