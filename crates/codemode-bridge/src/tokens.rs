//! The one lexical pass over a JavaScript / TypeScript cell that both static scanners consume: the
//! module guard ([`crate::modules`]) and the nesting estimate ([`crate::nesting`]).
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
//!   so every valid program pairs them exactly); `...`, `?.`, `??`, `=>`, `++` and `--` are one
//!   punctuator each, every other character is a punctuator alone.
//!
//! Whether a `/` starts a regular expression or divides is decided here and nowhere else, by one
//! rule: after a value a `/` divides, anywhere else it starts a regular expression. Values are an
//! identifier that is not one of [`REGEX_KEYWORDS`] (a property name always is one), a number,
//! string or regular expression, a `)` that does not close an `if`/`while`/`for`/`with` header, a
//! `]`, the end of a template literal, a postfix `++` / `--` or TypeScript non-null `!` (on the
//! line of its operand), and a `}` that closes an object literal (or object type) or the body of a
//! function or class expression — not one that closes a block, a declaration's body or an arrow
//! function's body. What a `{` opens is settled when it opens: the body of a function or class
//! once its heading is over (an expression's body when the `function` / `class` keyword stood where
//! no statement starts); after `=>` an arrow body; else a block where a statement starts (at the
//! start, after `;`, a block's `{` or `}`, a header's `)`, `else`, `do`, a label's or `case`'s `:`,
//! or a line break after a value) or after a value, and an object literal anywhere else.
//!
//! Where JavaScript itself leaves a reading open to context (a word that may be a variable or an
//! operator), the stream reads a value: taking a division for a regular expression would hide
//! code from both scanners (a `require(` from the guard, brackets from the nesting bound), which
//! the opposite misreading cannot do to the bound. The engines' own run-time layer covers what a
//! lexical reading of the guard misses.

/// Words the token stream tells apart; every other identifier is `""`.
pub(crate) const KNOWN_WORDS: [&str; 28] = [
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
    "function",
    "class",
    "async",
];

/// Words after which an expression starts, so a `/` begins a regular expression: reserved words
/// that are never an identifier, and `of` in a `for` header. A word that may also name a variable
/// (`await` outside async functions, `yield` outside generators, `of`, `as`) is read as a value:
/// taking a division for a regular expression would hide brackets from the nesting bound, while
/// the opposite misreading (a regular expression awaited or yielded) only shows it more.
pub(crate) const REGEX_KEYWORDS: [&str; 12] =
    ["return", "typeof", "instanceof", "in", "new", "delete", "void", "throw", "case", "do", "else", "extends"];

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
    /// A punctuator (`/` when it divides): `...`, `?.`, `??`, `=>`, `++` and `--` whole, anything
    /// else one character.
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

/// An open bracket on the stream's stack (its bottom entry is the top level of the cell).
#[derive(Clone, Copy)]
enum Open {
    Top,
    /// `(`: the header of an `if`/`while`/`for`/`with` (that word, else `""`), or the parameters
    /// of a `function` (`Some(true)` in an expression).
    Paren {
        header: &'static str,
        function: Option<bool>,
    },
    Square,
    /// `{`: whether statements (or class members) stand inside, and whether its `}` leaves a value
    /// (it closes an object literal, or the body of a function or class expression).
    Brace {
        statements: bool,
        value: bool,
    },
    Subst,
}

struct Level {
    open: Open,
    /// `?` of conditional expressions (or optional TypeScript members) still waiting for their `:`.
    ternaries: usize,
}

/// What the previous token tells about a `{` right after it.
#[derive(Clone, Copy)]
enum Before {
    Other,
    /// `=>`: an arrow function's body.
    Arrow,
    /// `>`: the end of a TypeScript type argument list.
    Angle,
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
    levels: Vec<Level>,
    mode: Mode,
    /// The previous token leaves a value: a `/` divides.
    value: bool,
    /// A statement starts at the next token.
    statement: bool,
    /// The previous token is `.`, `?.` or `#`: a word is a property name.
    member: bool,
    /// The previous token, when it is a known word in code position (else `""`).
    word: &'static str,
    before: Before,
    /// A `function` keyword waiting for its parameters: (it is an expression, its stack depth).
    function: Option<(bool, usize)>,
    /// A function (after its parameters) or class (after its keyword) waiting for its body: (it
    /// is an expression, its stack depth).
    body: Option<(bool, usize)>,
}

impl<'a> Tokens<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        Tokens {
            s: Scanner { b: src.as_bytes(), i: 0, line: 1 },
            levels: vec![Level { open: Open::Top, ternaries: 0 }],
            mode: Mode::Code,
            value: false,
            statement: true,
            member: false,
            word: "",
            before: Before::Other,
            function: None,
            body: None,
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

    /// Reads a token in code; returns it, whether it leaves a value (the one regex-vs-division
    /// rule, module docs) and whether a statement starts after it.
    fn code_token(&mut self, newline_before: bool, before: Before, member: bool) -> (Kind, bool, bool) {
        // A semicolon is inserted at a line break after a value or `return`.
        let at_statement = self.statement || newline_before && (self.value || self.word == "return");
        let depth = self.levels.len();
        let s = &mut self.s;
        let c = s.peek(0);
        match c {
            b'/' if self.value => (s.punct(1), false, false),
            b'/' => {
                s.skip_regex();
                (Kind::Regex, true, false)
            }
            b'\'' | b'"' => {
                s.skip_string(c);
                (Kind::Str, true, false)
            }
            b'`' => {
                s.bump();
                let tail = self.template_text();
                (Kind::Template { head: true, tail }, tail, false)
            }
            b'(' | b'[' | b'{' => {
                s.bump();
                let word = if c == b'(' && HEADER_WORDS.contains(&self.word) { self.word } else { "" };
                let header = !word.is_empty();
                let open = match c {
                    b'(' => {
                        let function = self.function.take_if(|&mut (_, d)| d == depth).map(|(e, _)| e);
                        Open::Paren { header: word, function }
                    }
                    b'[' => Open::Square,
                    _ => {
                        let body = self.body.filter(|&(_, d)| d == depth).map(|(e, _)| e);
                        let (statements, value) = match body {
                            // The body follows the parameters or the class heading (a TypeScript
                            // return type or type parameters may stand between: they end in a
                            // value or `>`); a `{` before it opens an object type.
                            Some(expression) if self.value || matches!(before, Before::Angle) => {
                                self.body = None;
                                (true, expression)
                            }
                            Some(_) => (false, true),
                            None if matches!(before, Before::Arrow) => (true, false),
                            None if at_statement || self.value => (true, false),
                            None => (false, true),
                        };
                        Open::Brace { statements, value }
                    }
                };
                self.levels.push(Level { open, ternaries: 0 });
                (Kind::Open { byte: c, header }, false, matches!(open, Open::Brace { statements: true, .. }))
            }
            b')' | b']' | b'}' => {
                s.bump();
                let open = if depth > 1 { self.levels.pop().map(|l| l.open) } else { None };
                self.function = self.function.filter(|&(_, d)| d < depth);
                self.body = self.body.filter(|&(_, d)| d < depth);
                let close = Kind::Close { byte: c, header: false };
                match open {
                    Some(Open::Subst) if c == b'}' => {
                        self.mode = Mode::Text;
                        (Kind::SubstClose, false, false)
                    }
                    Some(Open::Paren { header, function }) => {
                        if let Some(expression) = function {
                            self.body = Some((expression, depth - 1));
                        }
                        let header = !header.is_empty();
                        (Kind::Close { byte: c, header }, !header, header)
                    }
                    Some(Open::Brace { value, .. }) => (close, value, !value),
                    _ => (close, c != b'}', c == b'}'),
                }
            }
            b'0'..=b'9' => {
                s.skip_number();
                (Kind::Number, true, false)
            }
            b'.' if s.peek(1).is_ascii_digit() => {
                s.skip_number();
                (Kind::Number, true, false)
            }
            b'.' if s.peek(1) == b'.' && s.peek(2) == b'.' => (s.punct(3), false, false),
            b'?' if s.peek(1) == b'.' && !s.peek(2).is_ascii_digit() => {
                self.member = true;
                (s.punct(2), false, false)
            }
            b'?' if s.peek(1) == b'?' => (s.punct(2), false, false),
            b'=' if s.peek(1) == b'>' => {
                self.before = Before::Arrow;
                (s.punct(2), false, false)
            }
            // A postfix `++` / `--` (on its value's line) leaves a value; a prefix one does not.
            b'+' | b'-' if s.peek(1) == c => (s.punct(2), self.value && !newline_before, false),
            c if c == b'_' || c == b'$' || c.is_ascii_alphabetic() || c == b'\\' || c >= 0x80 => {
                let w = s.read_word();
                let w = if member { "" } else { w };
                match w {
                    "function" => self.function = Some((!at_statement, depth)),
                    "class" => self.body = Some((!at_statement, depth)),
                    _ => {}
                }
                let in_for = matches!(self.levels.last(), Some(Level { open: Open::Paren { header: "for", .. }, .. }));
                let value = !(REGEX_KEYWORDS.contains(&w) || w == "of" && in_for);
                let statement = matches!(w, "else" | "do") || w == "async" && at_statement;
                (Kind::Word(w), value, statement)
            }
            // A TypeScript non-null `!` after a value (on its line) leaves a value.
            b'!' if self.value && !newline_before => (s.punct(1), true, false),
            _ => {
                let token = s.punct(1);
                let level = self.levels.last_mut();
                let statement = match (c, level) {
                    (b';', level) => {
                        if let Some(l) = level {
                            l.ternaries = 0;
                        }
                        self.function = self.function.filter(|&(_, d)| d != depth);
                        self.body = self.body.filter(|&(_, d)| d != depth);
                        true
                    }
                    (b'?', Some(l)) => {
                        l.ternaries += 1;
                        false
                    }
                    (b':', Some(l)) if l.ternaries > 0 => {
                        l.ternaries -= 1;
                        false
                    }
                    // A label's or a `case`'s colon (an object literal's is not among statements).
                    (b':', Some(l)) => matches!(l.open, Open::Top | Open::Brace { statements: true, .. }),
                    (b'.' | b'#', _) => {
                        self.member = true;
                        false
                    }
                    (b'>', _) => {
                        self.before = Before::Angle;
                        false
                    }
                    _ => false,
                };
                (token, false, statement)
            }
        }
    }
}

impl Iterator for Tokens<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let mode = std::mem::replace(&mut self.mode, Mode::Code);
        let mut newline_before = false;
        if mode == Mode::Code {
            newline_before = self.s.skip_trivia();
            if self.s.at_end() {
                return None;
            }
        }
        let (start, line) = (self.s.i, self.s.line);
        let before = std::mem::replace(&mut self.before, Before::Other);
        let member = std::mem::take(&mut self.member);
        let (kind, value, statement) = match mode {
            Mode::Code => self.code_token(newline_before, before, member),
            Mode::Text => {
                let tail = self.template_text();
                (Kind::Template { head: false, tail }, tail, false)
            }
            Mode::Subst => {
                self.s.skip(2);
                self.levels.push(Level { open: Open::Subst, ternaries: 0 });
                (Kind::SubstOpen, false, false)
            }
        };
        (self.value, self.statement) = (value, statement);
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
            match self.peek(0) {
                b' ' | b'\t' | 0x0B | 0x0C => self.i += 1,
                b'\n' | b'\r' => {
                    newline = true;
                    self.bump();
                }
                b'/' if self.peek(1) == b'/' => self.skip_line_comment(),
                b'/' if self.peek(1) == b'*' => newline |= self.skip_block_comment(),
                0xC2 | 0xE1..=0xE3 | 0xEF => {
                    if let n @ 1.. = self.line_break_len() {
                        newline = true;
                        self.skip(n);
                    } else if let n @ 1.. = self.space_len() {
                        self.skip(n);
                    } else {
                        return newline;
                    }
                }
                _ => return newline,
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
        while !(self.at_end() || self.peek(0) == b'*' && self.peek(1) == b'/') {
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
        // Known words are 2 to 10 lowercase letters: most identifiers are told apart here.
        let word = buf.get(..len).filter(|w| ascii && w.len() >= 2 && w[0].is_ascii_lowercase()).unwrap_or(&[]);
        if word.is_empty() {
            return "";
        }
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
mod tests;
