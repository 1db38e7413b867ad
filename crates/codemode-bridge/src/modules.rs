//! Static module guard (contract X6, V17): finds `import` declarations, dynamic `import()`,
//! `import.meta` and `require(...)` in a cell before it runs, so a cell that tries to load modules is
//! rejected with `module_access_denied` before any of its side effects happen.
//!
//! This is a tokenizer, not a parser: it skips comments, string literals, template literals (but scans
//! the code inside `${…}`) and regular-expression literals (recognised by the usual previous-token
//! rule), and reports `import` / `require` in code positions. Property names (`obj.import`,
//! `{ import: 1 }`) are not reported. The engines enforce the same rule at run time as a second layer
//! (no module loader, a throwing `require`), so code built at run time (`eval`) is covered too.

use crate::MODULE_DENIED_PREFIX;

/// A module-loader pattern found in a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFinding {
    /// What was found: `import declaration`, `dynamic import()`, `import.meta` or `require()`.
    pub what: &'static str,
    /// 1-based line.
    pub line: usize,
}

impl ModuleFinding {
    /// The error message for the model.
    pub fn message(&self) -> String {
        format!(
            "{MODULE_DENIED_PREFIX}: {} at line {} is not available in code mode; modules, files and network are \
             out of reach. Call tools through `tools.*` (and MCP servers through `MCP.*`) instead.",
            self.what, self.line
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// Start, or a punctuator after which an expression starts (a `/` begins a regex).
    ExprStart,
    /// An identifier, number, `)` or `]` (a `/` is division).
    Value,
    /// A `.` or `?.` (the next identifier is a property name).
    Dot,
}

const REGEX_KEYWORDS: [&str; 12] =
    ["return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw", "case", "do", "else"];

/// Scans `src` and returns the first module-loader pattern, if any.
pub fn find_module_access(src: &str) -> Option<ModuleFinding> {
    Scanner::new(src).run()
}

/// The lexical scanner shared by the module guard and the nesting estimate
/// ([`crate::nesting`]): byte-level, iterative (no recursion on guest input).
pub(crate) struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    line: usize,
}

/// Words the scanners tell apart; every other identifier reads as `""`.
const KNOWN_WORDS: [&str; 24] = [
    "import",
    "require",
    "if",
    "while",
    "for",
    "with",
    "return",
    "typeof",
    "instanceof",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "case",
    "do",
    "else",
    "await",
    "yield",
    "as",
    "satisfies",
    "keyof",
    "infer",
];

impl<'a> Scanner<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        Scanner { b: src.as_bytes(), i: 0, line: 1 }
    }

    pub(crate) fn at_end(&self) -> bool {
        self.i >= self.b.len()
    }

    pub(crate) fn line(&self) -> usize {
        self.line
    }

    pub(crate) fn peek(&self, off: usize) -> u8 {
        self.b.get(self.i + off).copied().unwrap_or(0)
    }

    /// Reads an identifier (or keyword) and returns it if it is one of the known words, else `""`.
    pub(crate) fn read_word(&mut self) -> &'static str {
        let start = self.i;
        while self.i < self.b.len() {
            let c = self.peek(0);
            if c == b'_' || c == b'$' || c.is_ascii_alphanumeric() || c >= 0x80 || c == b'\\' {
                self.i += 1;
            } else {
                break;
            }
        }
        let word = &self.b[start..self.i];
        KNOWN_WORDS.into_iter().chain(["extends"]).find(|k| k.as_bytes() == word).unwrap_or("")
    }

    /// The known word starting here, without consuming it.
    pub(crate) fn peek_word(&mut self) -> &'static str {
        let save = self.i;
        let w = self.read_word();
        self.i = save;
        w
    }

    pub(crate) fn bump(&mut self) {
        if self.peek(0) == b'\n' {
            self.line += 1;
        }
        self.i += 1;
    }

    fn run(&mut self) -> Option<ModuleFinding> {
        // Each entry: brace depth at which a template `${` expression ends.
        let mut templates: Vec<usize> = Vec::new();
        let mut braces = 0usize;
        let mut prev = Prev::ExprStart;
        // For each open parenthesis: whether it follows `if`/`while`/`for`/`with`, after whose closing
        // parenthesis an expression (and so a regex) may start.
        let mut parens: Vec<bool> = Vec::new();
        let mut last_word: &str = "";
        while self.i < self.b.len() {
            let c = self.peek(0);
            match c {
                b'\n' | b' ' | b'\t' | b'\r' => self.bump(),
                b'/' if self.peek(1) == b'/' => self.skip_line_comment(),
                b'/' if self.peek(1) == b'*' => self.skip_block_comment(),
                b'/' if prev != Prev::Value => {
                    self.skip_regex();
                    prev = Prev::Value;
                }
                b'\'' | b'"' => {
                    self.skip_string(c);
                    prev = Prev::Value;
                }
                b'`' => {
                    self.bump();
                    if self.skip_template_chunk() {
                        templates.push(braces);
                        braces += 1;
                        prev = Prev::ExprStart;
                    } else {
                        prev = Prev::Value;
                    }
                }
                b'{' => {
                    braces += 1;
                    self.bump();
                    prev = Prev::ExprStart;
                }
                b'}' => {
                    self.bump();
                    braces = braces.saturating_sub(1);
                    if templates.last() == Some(&braces) {
                        templates.pop();
                        if self.skip_template_chunk() {
                            templates.push(braces);
                            braces += 1;
                            prev = Prev::ExprStart;
                        } else {
                            prev = Prev::Value;
                        }
                    } else {
                        prev = Prev::ExprStart;
                    }
                }
                b'(' => {
                    self.bump();
                    parens.push(prev == Prev::Value && ["if", "while", "for", "with"].contains(&last_word));
                    prev = Prev::ExprStart;
                }
                b')' => {
                    self.bump();
                    prev = if parens.pop() == Some(true) { Prev::ExprStart } else { Prev::Value };
                }
                b']' => {
                    self.bump();
                    prev = Prev::Value;
                }
                b'.' if self.peek(1).is_ascii_digit() => {
                    self.skip_number();
                    prev = Prev::Value;
                }
                b'.' => {
                    self.bump();
                    prev = if self.peek(0) == b'.' && self.peek(1) == b'.' {
                        self.bump();
                        self.bump();
                        Prev::ExprStart
                    } else {
                        Prev::Dot
                    };
                }
                b'?' if self.peek(1) == b'.' && !self.peek(2).is_ascii_digit() => {
                    self.bump();
                    self.bump();
                    prev = Prev::Dot;
                }
                b'0'..=b'9' => {
                    self.skip_number();
                    prev = Prev::Value;
                }
                c if c == b'_' || c == b'$' || c.is_ascii_alphabetic() || c >= 0x80 || c == b'\\' => {
                    let line = self.line;
                    let word = self.read_ident();
                    let after_dot = prev == Prev::Dot;
                    if !after_dot && let Some(what) = self.classify(word) {
                        return Some(ModuleFinding { what, line });
                    }
                    prev = if !after_dot && REGEX_KEYWORDS.contains(&word) { Prev::ExprStart } else { Prev::Value };
                    last_word = if after_dot { "" } else { word };
                    continue;
                }
                _ => {
                    self.bump();
                    prev = Prev::ExprStart;
                }
            }
            if !matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                last_word = "";
            }
        }
        None
    }

    fn classify(&mut self, word: &str) -> Option<&'static str> {
        if word != "import" && word != "require" {
            return None;
        }
        let save = (self.i, self.line);
        self.skip_trivia();
        let next = self.peek(0);
        let found = match word {
            "import" => match next {
                b'(' => Some("dynamic import()"),
                b'.' => Some("import.meta"),
                b'{' | b'*' | b'\'' | b'"' => Some("import declaration"),
                c if c == b'_' || c == b'$' || c.is_ascii_alphabetic() || c >= 0x80 => Some("import declaration"),
                _ => None,
            },
            _ => (next == b'(').then_some("require()"),
        };
        (self.i, self.line) = save;
        found
    }

    fn skip_trivia(&mut self) {
        loop {
            match self.peek(0) {
                b' ' | b'\t' | b'\r' | b'\n' => self.bump(),
                b'/' if self.peek(1) == b'/' => self.skip_line_comment(),
                b'/' if self.peek(1) == b'*' => self.skip_block_comment(),
                _ => return,
            }
        }
    }

    fn read_ident(&mut self) -> &'static str {
        self.read_word()
    }

    pub(crate) fn skip_number(&mut self) {
        while self.i < self.b.len() {
            let c = self.peek(0);
            if c.is_ascii_alphanumeric() || c == b'.' || c == b'_' {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    pub(crate) fn skip_line_comment(&mut self) {
        while self.i < self.b.len() && self.peek(0) != b'\n' {
            self.i += 1;
        }
    }

    pub(crate) fn skip_block_comment(&mut self) {
        self.bump();
        self.bump();
        while self.i < self.b.len() && !(self.peek(0) == b'*' && self.peek(1) == b'/') {
            self.bump();
        }
        self.bump();
        self.bump();
    }

    pub(crate) fn skip_string(&mut self, quote: u8) {
        self.bump();
        while self.i < self.b.len() {
            match self.peek(0) {
                b'\\' => {
                    self.bump();
                    self.bump();
                }
                b'\n' => return,
                c => {
                    self.bump();
                    if c == quote {
                        return;
                    }
                }
            }
        }
    }

    /// Skips template text after a backtick or a closing `}`; returns true when it stopped at `${`.
    pub(crate) fn skip_template_chunk(&mut self) -> bool {
        while self.i < self.b.len() {
            match self.peek(0) {
                b'\\' => {
                    self.bump();
                    self.bump();
                }
                b'`' => {
                    self.bump();
                    return false;
                }
                b'$' if self.peek(1) == b'{' => {
                    self.bump();
                    self.bump();
                    return true;
                }
                _ => self.bump(),
            }
        }
        false
    }

    pub(crate) fn skip_regex(&mut self) {
        self.bump();
        let mut in_class = false;
        while self.i < self.b.len() {
            match self.peek(0) {
                b'\\' => {
                    self.bump();
                    self.bump();
                }
                b'\n' => return,
                b'[' => {
                    in_class = true;
                    self.bump();
                }
                b']' => {
                    in_class = false;
                    self.bump();
                }
                b'/' if !in_class => {
                    self.bump();
                    while self.peek(0).is_ascii_alphabetic() {
                        self.bump();
                    }
                    return;
                }
                _ => self.bump(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(src: &str) -> Option<&'static str> {
        find_module_access(src).map(|f| f.what)
    }

    #[test]
    fn finds_module_patterns() {
        assert_eq!(found("import fs from 'fs';"), Some("import declaration"));
        assert_eq!(found("import { readFile } from 'fs'"), Some("import declaration"));
        assert_eq!(found("import * as x from 'y'"), Some("import declaration"));
        assert_eq!(found("import 'side-effect'"), Some("import declaration"));
        assert_eq!(found("const m = await import('fs')"), Some("dynamic import()"));
        assert_eq!(found("const m = await import /* x */ ('fs')"), Some("dynamic import()"));
        assert_eq!(found("return import.meta.url"), Some("import.meta"));
        assert_eq!(found("const fs = require('fs')"), Some("require()"));
        assert_eq!(found("const x = `a ${ require('fs') } b`"), Some("require()"));
        assert_eq!(found("const x = `a ${ `n ${ import('x') }` } b`"), Some("dynamic import()"));
        let f = find_module_access("const a = 1;\n\nrequire('x')").unwrap();
        assert_eq!(f.line, 3);
        assert!(f.message().starts_with("module access denied"));
    }

    #[test]
    fn ignores_non_code_positions() {
        for src in [
            "text('import fs from \"fs\"')",
            "text(\"require('fs')\")",
            "// import fs from 'fs'\nreturn 1",
            "/* require('x') */ return 2",
            "const x = `import('fs') is text`",
            "const o = { import: 1, require: 2 }; return o.import + o.require",
            "obj.import('x'); obj?.require('y')",
            "const r = /import('x')/g; return r.test('a')",
            "const a = 4 / 2; const b = a / 1; // import x from 'y'",
            "const important = 1; const requirements = []; return important",
            "if (x) /require('fs')/.test(s)",
            "const s = 'it\\'s import(x)'",
        ] {
            assert_eq!(found(src), None, "{src}");
        }
    }
}
