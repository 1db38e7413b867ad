//! The one lexical pass over a JavaScript / TypeScript cell that both static scanners consume: the
//! module guard ([`crate::modules`], contract X6) and the nesting estimate ([`crate::nesting`]).
//! Because they read the same token stream, the guard and the bound cannot read a cell differently
//! — in particular, they cannot disagree on where a regular expression starts.
//!
//! [`Tokens`] works on bytes (it never slices a `str`, so no input splits a UTF-8 character), is
//! iterative (brackets and template substitutions live on an explicit stack; nothing recurses on
//! guest input), runs in linear time (every byte is read a bounded number of times) and never
//! panics. It is a tokenizer, not a parser:
//!
//! - comments and white space are skipped; a line comment ends at any line terminator (LF, CR,
//!   U+2028, U+2029), and Unicode spaces (NBSP, U+FEFF, U+2000–U+200A, …) separate tokens as in
//!   JavaScript;
//! - an identifier is reported as one of [`KNOWN_WORDS`] (after decoding `\uXXXX` / `\u{X}`
//!   escapes, so `\u0072equire` is `require`), else as `""`; a property name after `.`, `?.` or
//!   `#` is always `""`, whatever its spelling;
//! - string, number and regular-expression literals are one token each; a template literal is
//!   text tokens around its substitutions, whose `${` and closing `}` are tokens of their own and
//!   whose code (braces, further templates) is tokenized like any other;
//! - `(` `[` `{` open and `)` `]` `}` close a bracket (each closer pops the innermost open bracket,
//!   so every valid program pairs them exactly); `...`, `?.`, `++` and `--` are one punctuator
//!   each, every other character is a punctuator alone.
//!
//! Whether a `/` starts a regular expression or divides is decided here and nowhere else, by one
//! rule: after a value a `/` divides, anywhere else it starts a regular expression. Values are an
//! identifier that is not one of [`REGEX_KEYWORDS`] (a property name always is one), a number,
//! string or regular expression, a `)` that does not close an `if`/`while`/`for`/`with` header, a
//! `]`, the end of a template literal, and a postfix `++` / `--` (one on the line of its value).
//! A `}` that closes a block or an object literal is not a value (a block is far more common where
//! a `/` follows), so `x = {} / 2` reads as the start of a regular expression; the engines' own
//! run-time layer covers what a lexical reading cannot.

/// Words the token stream tells apart; every other identifier is `""`.
pub(crate) const KNOWN_WORDS: [&str; 25] = [
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
    "extends",
];

/// Words after which an expression starts, so a `/` begins a regular expression. A cell is the
/// body of an async function, so `await` is an operator; `yield` is one in the generators a cell
/// may define.
pub(crate) const REGEX_KEYWORDS: [&str; 15] = [
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
    "extends",
];

/// Words whose parenthesised header a statement follows: after its `)` an expression starts.
pub(crate) const HEADER_WORDS: [&str; 4] = ["if", "while", "for", "with"];

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An identifier or keyword: one of [`KNOWN_WORDS`], else `""` (every other identifier, and
    /// every property name after `.`, `?.` or `#`).
    Word(&'static str),
    /// A numeric literal.
    Number,
    /// A string literal.
    Str,
    /// A regular-expression literal, flags included.
    Regex,
    /// Template text: from a backtick (`head`) or from the `}` closing a substitution, up to and
    /// including the closing backtick (`tail`) or up to a `${` (then the next token is
    /// [`Kind::SubstOpen`]). Text cut off by the end of the source is a tail.
    Template {
        /// Starts a template literal (at its backtick).
        head: bool,
        /// Ends the template literal.
        tail: bool,
    },
    /// The `${` opening a template substitution.
    SubstOpen,
    /// The `}` closing a template substitution (the next token is [`Kind::Template`] text).
    SubstClose,
    /// `(`, `[` or `{`.
    Open {
        /// The bracket character.
        byte: u8,
        /// A `(` right after `if`/`while`/`for`/`with` (or `for await`): a statement header.
        header: bool,
    },
    /// `)`, `]` or a `}` that does not close a substitution.
    Close {
        /// The bracket character.
        byte: u8,
        /// It closes a statement header (see [`Kind::Open`]).
        header: bool,
    },
    /// A punctuator (`/` when it divides): `...`, `?.`, `++` and `--` whole, anything else one
    /// character.
    Punct {
        /// Its first character.
        first: u8,
        /// Its length in bytes.
        len: usize,
    },
}

/// One token of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    /// What it is.
    pub(crate) kind: Kind,
    /// 1-based line of its first byte.
    pub(crate) line: usize,
    /// A line terminator (in white space or a comment) separates it from the previous token.
    pub(crate) newline_before: bool,
    /// Byte offsets of the token in the source: `start..end`.
    pub(crate) start: usize,
    /// See `start`.
    pub(crate) end: usize,
}

/// An open bracket on the stream's stack.
#[derive(Clone, Copy)]
enum Bracket {
    Paren { header: bool },
    Other,
    Subst,
}

/// What the next call to `next` reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Code,
    /// Template text after the `}` of a substitution.
    Text,
    /// The `${` a template text stopped at.
    Subst,
}

/// The token stream of a cell (see the module docs).
pub(crate) struct Tokens<'a> {
    s: Scanner<'a>,
    brackets: Vec<Bracket>,
    mode: Mode,
    /// The previous token is a value: a `/` divides.
    value: bool,
    /// The previous token is `.`, `?.` or `#`: a word is a property name.
    member: bool,
    /// The previous token, when it is a known word in code position (else `""`).
    word: &'static str,
}

impl<'a> Tokens<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        Tokens {
            s: Scanner { b: src.as_bytes(), i: 0, line: 1 },
            brackets: Vec::new(),
            mode: Mode::Code,
            value: false,
            member: false,
            word: "",
        }
    }

    /// Reads template text up to the closing backtick or a `${`; returns whether it is a tail.
    fn template_text(&mut self) -> bool {
        let tail = !self.s.skip_template_chunk();
        if !tail {
            self.mode = Mode::Subst;
        }
        tail
    }

    fn code_token(&mut self) -> Kind {
        let s = &mut self.s;
        let c = s.peek(0);
        match c {
            b'/' if self.value => {
                s.bump();
                Kind::Punct { first: c, len: 1 }
            }
            b'/' => {
                s.skip_regex();
                Kind::Regex
            }
            b'\'' | b'"' => {
                s.skip_string(c);
                Kind::Str
            }
            b'`' => {
                s.bump();
                let tail = self.template_text();
                Kind::Template { head: true, tail }
            }
            b'(' | b'[' | b'{' => {
                s.bump();
                let header = c == b'(' && HEADER_WORDS.contains(&self.word);
                self.brackets.push(match c {
                    b'(' => Bracket::Paren { header },
                    _ => Bracket::Other,
                });
                Kind::Open { byte: c, header }
            }
            b')' | b']' | b'}' => {
                s.bump();
                match self.brackets.pop() {
                    Some(Bracket::Subst) if c == b'}' => {
                        self.mode = Mode::Text;
                        Kind::SubstClose
                    }
                    Some(Bracket::Paren { header }) => Kind::Close { byte: c, header },
                    _ => Kind::Close { byte: c, header: false },
                }
            }
            b'0'..=b'9' => {
                s.skip_number();
                Kind::Number
            }
            b'.' if s.peek(1).is_ascii_digit() => {
                s.skip_number();
                Kind::Number
            }
            b'.' if s.peek(1) == b'.' && s.peek(2) == b'.' => s.punct(3),
            b'?' if s.peek(1) == b'.' && !s.peek(2).is_ascii_digit() => s.punct(2),
            b'+' | b'-' if s.peek(1) == c => s.punct(2),
            c if c == b'_' || c == b'$' || c.is_ascii_alphabetic() || c == b'\\' || c >= 0x80 => {
                let w = s.read_word();
                Kind::Word(if self.member { "" } else { w })
            }
            _ => s.punct(1),
        }
    }
}

impl Iterator for Tokens<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let mut newline_before = false;
        let mode = std::mem::replace(&mut self.mode, Mode::Code);
        if mode == Mode::Code {
            newline_before = self.s.skip_trivia();
            if self.s.at_end() {
                return None;
            }
        }
        let (start, line) = (self.s.i, self.s.line);
        let kind = match mode {
            Mode::Code => self.code_token(),
            Mode::Text => Kind::Template { head: false, tail: self.template_text() },
            Mode::Subst => {
                self.s.skip(2);
                self.brackets.push(Bracket::Subst);
                Kind::SubstOpen
            }
        };
        // The one regex-vs-division rule (module docs): does this token leave a value?
        self.value = match kind {
            Kind::Word(w) => !REGEX_KEYWORDS.contains(&w),
            Kind::Number | Kind::Str | Kind::Regex => true,
            Kind::Template { tail, .. } => tail,
            Kind::SubstOpen | Kind::SubstClose | Kind::Open { .. } => false,
            Kind::Close { byte, header } => byte != b'}' && !header,
            // A postfix `++` / `--` (on its value's line) leaves a value; a prefix one does not.
            Kind::Punct { first: b'+' | b'-', len: 2 } => self.value && !newline_before,
            Kind::Punct { .. } => false,
        };
        self.member = matches!(
            kind,
            Kind::Punct { first: b'.', len: 1 } | Kind::Punct { first: b'?', len: 2 } | Kind::Punct { first: b'#', .. }
        );
        self.word = match kind {
            Kind::Word("await") if self.word == "for" => "for",
            Kind::Word(w) => w,
            _ => "",
        };
        Some(Token { kind, line, newline_before, start, end: self.s.i })
    }
}

/// Byte-level cursor over the source. Private: nothing outside this module lexes.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    line: usize,
}

impl Scanner<'_> {
    fn at_end(&self) -> bool {
        self.i >= self.b.len()
    }

    fn peek(&self, off: usize) -> u8 {
        self.b.get(self.i.saturating_add(off)).copied().unwrap_or(0)
    }

    fn bump(&mut self) {
        if let Some(&c) = self.b.get(self.i) {
            self.line += usize::from(c == b'\n');
            self.i += 1;
        }
    }

    /// Moves over `n` bytes that hold no LF.
    fn skip(&mut self, n: usize) {
        self.i = self.i.saturating_add(n).min(self.b.len());
    }

    fn punct(&mut self, len: usize) -> Kind {
        let first = self.peek(0);
        self.skip(len);
        Kind::Punct { first, len }
    }

    /// Length of the line terminator here (LF, CR, U+2028, U+2029), or 0.
    fn line_break_len(&self) -> usize {
        match (self.peek(0), self.peek(1), self.peek(2)) {
            (b'\n' | b'\r', _, _) => 1,
            (0xE2, 0x80, 0xA8 | 0xA9) => 3,
            _ => 0,
        }
    }

    /// Length of the white space character (not a line terminator) here, or 0.
    fn space_len(&self) -> usize {
        match (self.peek(0), self.peek(1), self.peek(2)) {
            (b' ' | b'\t' | 0x0B | 0x0C, _, _) => 1,
            (0xC2, 0xA0, _) => 2,
            (0xE1, 0x9A, 0x80) | (0xE2, 0x80, 0x80..=0x8A | 0xAF) | (0xE2, 0x81, 0x9F) | (0xE3, 0x80, 0x80) => 3,
            (0xEF, 0xBB, 0xBF) => 3,
            _ => 0,
        }
    }

    /// Skips white space and comments; returns whether they held a line terminator.
    fn skip_trivia(&mut self) -> bool {
        let mut newline = false;
        loop {
            if self.peek(0) == b'/' && self.peek(1) == b'/' {
                self.skip_line_comment();
            } else if self.peek(0) == b'/' && self.peek(1) == b'*' {
                newline |= self.skip_block_comment();
            } else if self.peek(0) == b'\n' {
                newline = true;
                self.bump();
            } else if let n @ 1.. = self.line_break_len() {
                newline = true;
                self.skip(n);
            } else if let n @ 1.. = self.space_len() {
                self.skip(n);
            } else {
                return newline;
            }
        }
    }

    fn skip_line_comment(&mut self) {
        while !self.at_end() && self.line_break_len() == 0 {
            self.i += 1;
        }
    }

    /// Returns whether the comment held a line terminator.
    fn skip_block_comment(&mut self) -> bool {
        let mut newline = false;
        self.skip(2);
        while !self.at_end() && !(self.peek(0) == b'*' && self.peek(1) == b'/') {
            newline |= self.line_break_len() > 0;
            self.bump();
        }
        self.skip(2);
        newline
    }

    /// Reads an identifier and returns it if it is one of [`KNOWN_WORDS`], else `""`.
    fn read_word(&mut self) -> &'static str {
        let mut buf = [0u8; 12];
        let mut len = 0usize;
        let mut ascii = true;
        while !self.at_end() {
            let c = self.peek(0);
            let decoded = if c == b'_' || c == b'$' || c.is_ascii_alphanumeric() {
                self.i += 1;
                Some(c)
            } else if c == b'\\' {
                self.i += 1;
                self.read_escape()
            } else if c >= 0x80 && self.space_len() == 0 && self.line_break_len() == 0 {
                self.i += 1;
                None
            } else {
                break;
            };
            match decoded {
                Some(d) if len < buf.len() => buf[len] = d,
                Some(_) => {}
                None => ascii = false,
            }
            len += 1;
        }
        let word = buf.get(..len).filter(|_| ascii).unwrap_or(&[]);
        KNOWN_WORDS.into_iter().find(|k| k.as_bytes() == word).unwrap_or("")
    }

    /// After a `\` in an identifier: reads `uXXXX` or `u{X…}`; returns the character when ASCII.
    fn read_escape(&mut self) -> Option<u8> {
        if self.peek(0) != b'u' {
            return None;
        }
        self.i += 1;
        let braced = self.peek(0) == b'{';
        if braced {
            self.i += 1;
        }
        let mut value = 0u32;
        let mut digits = 0usize;
        while (braced || digits < 4)
            && let Some(d) = char::from(self.peek(0)).to_digit(16)
        {
            value = value.saturating_mul(16).saturating_add(d);
            digits += 1;
            self.i += 1;
        }
        if braced && self.peek(0) == b'}' {
            self.i += 1;
        }
        u8::try_from(value).ok().filter(|v| digits > 0 && v.is_ascii())
    }

    fn skip_number(&mut self) {
        while !self.at_end() {
            let c = self.peek(0);
            if c.is_ascii_alphanumeric() || c == b'.' || c == b'_' {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    /// Skips a string literal; an unterminated one ends at the line's end.
    fn skip_string(&mut self, quote: u8) {
        self.bump();
        while !self.at_end() {
            match self.peek(0) {
                b'\\' => {
                    self.bump();
                    if self.peek(0) == b'\r' && self.peek(1) == b'\n' {
                        self.bump(); // a CRLF line continuation
                    }
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

    /// Skips template text; returns true when it stopped at a `${` (not consumed), false after
    /// the closing backtick or at the end.
    fn skip_template_chunk(&mut self) -> bool {
        while !self.at_end() {
            match self.peek(0) {
                b'\\' => {
                    self.bump();
                    self.bump();
                }
                b'`' => {
                    self.bump();
                    return false;
                }
                b'$' if self.peek(1) == b'{' => return true,
                _ => self.bump(),
            }
        }
        false
    }

    /// Skips a regular-expression literal and its flags; a `/` inside a class `[…]` does not end
    /// it, and an unterminated one ends at the line's end.
    fn skip_regex(&mut self) {
        self.bump();
        let mut in_class = false;
        while !self.at_end() {
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
    use crate::modules::find_module_access;
    use crate::nesting::nesting_estimate;

    fn kinds(src: &str) -> Vec<Kind> {
        Tokens::new(src).map(|t| t.kind).collect()
    }

    /// Code before a `/`, and whether that `/` divides (else it starts a regular expression).
    const SPLITS: [(&str, bool); 34] = [
        ("a", true),
        ("a / b", true),
        ("x = ", false),
        ("x = /re/g", true),
        ("x = /[/]/", true),
        ("x = /[/]/g.source", true),
        ("x = /a\\// +", false),
        ("if (a) ", false),
        ("while (f(a)) ", false),
        ("for (;;) ", false),
        ("for await (const x of y) ", false),
        ("f(a) ", true),
        ("a[0] ", true),
        ("return ", false),
        ("typeof ", false),
        ("await ", false),
        ("obj.return ", true),
        ("obj?.typeof ", true),
        ("this.#return ", true),
        ("a++ ", true),
        ("a--", true),
        ("x = ++", false),
        ("a\n++", false),
        ("`t${a}`", true),
        ("`t${ `u${ { a: b }[c] }` }`", true),
        ("x = `${ {} }`", true),
        ("/* /re/ */ a", true),
        ("a /* / */", true),
        ("// /x/\na", true),
        ("{ } ", false),
        ("x ? ", false),
        ("1 ", true),
        ("'s' ", true),
        ("a\u{a0}in ", false),
    ];

    /// The guard and the bound read every tricky split alike, and as the token stream does: when
    /// the `/` divides, both see the `require((((…))))` after it (the guard finds it, the bound
    /// counts its parentheses); when it starts a regular expression, neither does.
    #[test]
    fn both_scanners_split_regex_and_division_alike() {
        let parens = 30;
        for (prefix, divides) in SPLITS {
            let src = format!("{prefix} / require({}1{}) / 2", "(".repeat(parens), ")".repeat(parens));
            let at = Tokens::new(&src).find(|t| t.start >= prefix.len()).map(|t| t.kind);
            let expected = if divides { Kind::Punct { first: b'/', len: 1 } } else { Kind::Regex };
            assert_eq!(at, Some(expected), "tokens of {src:?}");
            assert_eq!(find_module_access(&src).is_some(), divides, "guard on {src:?}");
            assert_eq!(nesting_estimate(&src) > parens, divides, "bound on {src:?}: {}", nesting_estimate(&src));
        }
    }

    /// No regex decision outside this module: the consumers never look at a `/` themselves (the
    /// scanner is private here), so they cannot drift apart again.
    #[test]
    fn only_the_token_stream_tells_a_regex_from_a_division() {
        for (name, src) in [("modules.rs", include_str!("modules.rs")), ("nesting.rs", include_str!("nesting.rs"))] {
            let code = src.split("#[cfg(test)]").next().unwrap_or("");
            for needle in ["b'/'", "Scanner", "skip_", "REGEX_KEYWORDS", "HEADER_WORDS", "peek(0)", ".as_bytes()"] {
                assert!(!code.contains(needle), "{name} lexes on its own: it contains {needle}");
            }
        }
    }

    /// `require(` after a `/` that one of the former scanners misread is now found, and the line
    /// is right.
    #[test]
    fn require_after_a_once_misread_slash_is_found() {
        for src in [
            // The guard read the `/` after a postfix `++` as a regex and skipped to the next `/`.
            "let a = 1;\na++ / 2; require('fs'); a = a / 3",
            "let a = 1;\na-- / 2; require('fs'); a = a / 3",
            // The bound read `obj.return / 2` as a regex (`return` was an operator word to it).
            "const obj = {};\nobj.return / 2; require('fs'); 1 / 3",
            // NBSP is white space: `in` is a keyword and `/'/` a regex, not a string start.
            "const a = 1;\na\u{a0}in /'/; require('fs'); '/'",
            // A line comment ends at CR, U+2028 and U+2029 as in JavaScript.
            "// note\n// note\rrequire('fs')",
            "// note\n// note\u{2028}require('fs')",
            "// note\n/* x */ // note\u{2029}require('fs')",
            // Escapes in an identifier spell the same name.
            "const a = 1;\n\\u0072equire('fs')",
            "const a = 1;\n\\u{72}equire('fs')",
            // The guard read `await` as a value: `/'/` as a division and a string start.
            "const a = 1;\nawait /'/; require('fs'); '",
        ] {
            let f = find_module_access(src);
            assert_eq!(f.as_ref().map(|f| (f.what, f.line)), Some(("require()", 2)), "{src:?}");
        }
    }

    #[test]
    fn templates_nest_on_an_explicit_stack() {
        use Kind::*;
        let t = |head, tail| Template { head, tail };
        let open = |byte| Open { byte, header: false };
        let close = |byte| Close { byte, header: false };
        assert_eq!(
            kinds("`a${ {b: `c${d}e`} }f`"),
            [
                t(true, false),
                SubstOpen,
                open(b'{'),
                Word(""),
                Punct { first: b':', len: 1 },
                t(true, false),
                SubstOpen,
                Word(""),
                SubstClose,
                t(false, true),
                close(b'}'),
                SubstClose,
                t(false, true),
            ]
        );
        // A `}` inside template text or a string closes nothing.
        assert_eq!(kinds("`}`; '}'"), [t(true, true), Punct { first: b';', len: 1 }, Str]);
        // 100,000 nested templates: no recursion, nothing left open by mistake.
        let n = 100_000;
        let deep = format!("`{}x{}` / 2", "${`".repeat(n), "`}".repeat(n));
        let last = Tokens::new(&deep).last().map(|t| t.kind);
        assert_eq!(last, Some(Number));
        assert!(find_module_access(&format!("{deep}; require('x')")).is_some());
    }

    #[test]
    fn words_lines_and_line_breaks() {
        let toks: Vec<Token> = Tokens::new("import x\n  /* a\nb */ a.import?.require\r\n#in").collect();
        let words: Vec<_> =
            toks.iter().filter_map(|t| if let Kind::Word(w) = t.kind { Some(w) } else { None }).collect();
        assert_eq!(words, ["import", "", "", "", "", ""]);
        let lines: Vec<_> = toks.iter().map(|t| (t.line, t.newline_before)).collect();
        assert_eq!(lines[..3], [(1, false), (1, false), (3, true)]);
        assert_eq!(toks.iter().rev().nth(1).map(|t| (t.line, t.newline_before)), Some((4, true)));
        // Every word the consumers look for is one the stream tells apart.
        for w in REGEX_KEYWORDS.iter().chain(&HEADER_WORDS) {
            assert!(KNOWN_WORDS.contains(w), "{w}");
        }
    }

    /// No input panics or stalls: the stream always moves forward, stays in bounds and ends,
    /// whatever it is cut at (every character boundary of a sample full of unfinished literals).
    #[test]
    fn any_input_tokenizes_forward_and_in_bounds() {
        let sample = "a = `x${ {b: '\\''} }\u{2028}é${`${/[/]\\//g}`}` / 2 /* c \u{3000} */ // d\r\n\
                      \\u{72}equire(\\u{110000} x.#y ?.5 ... a++ --b '\\\r\n' \u{feff}`";
        let cuts = sample.char_indices().map(|(i, _)| i).chain([sample.len()]);
        let extra = ["", "/", "`", "`${", "${", "}", "}}}", "'\\", "/[", "\\u{", "\\u", "/*", "\u{2029}", "a\u{a0}"];
        for src in cuts.map(|i| &sample[..i]).chain(extra) {
            let mut end = 0;
            let mut count = 0;
            for t in Tokens::new(src) {
                assert!(end <= t.start && t.start <= t.end && t.end <= src.len(), "{src:?}: {t:?}");
                end = t.end;
                count += 1;
            }
            assert!(count <= 2 * src.len() + 1, "{src:?}");
            let _ = find_module_access(src);
            assert!(nesting_estimate(src) <= src.chars().count() + 1, "{src:?}");
        }
    }
}
