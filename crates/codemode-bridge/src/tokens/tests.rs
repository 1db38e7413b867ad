//! Unit tests of `tokens` (kept beside it so the module itself reads as one concern), and of the
//! two scanners reading its stream alike.

use super::*;
use crate::modules::find_module_access;
use crate::nesting::nesting_estimate;
use proptest::prelude::*;

fn kinds(src: &str) -> Vec<Kind> {
    Tokens::new(src).map(|t| t.kind).collect()
}

/// Code before a `/`, and whether that `/` divides (else it starts a regular expression).
const SPLITS: [(&str, bool); 55] = [
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
    ("await ", true),
    ("yield ", true),
    ("const of = 1; of ", true),
    ("for (const x of ", false),
    ("a! ", true),
    ("a != ", false),
    ("x = function (): { a: 1 } {} ", true),
    ("x = function <T>(): Promise<{}> {} ", true),
    ("x = class A<T extends {}> {} ", true),
    ("function f(): {} {} ", false),
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
    ("x = {} ", true),
    ("x = { a: {} ", true),
    ("x = a ? {} : {} ", true),
    ("return {} ", true),
    ("return\n{} ", false),
    ("a: {} ", false),
    ("switch (a) { case 1: {} ", false),
    ("function f() {} ", false),
    ("async function f() {} ", false),
    ("x = async function () { if (a) {} } ", true),
    ("class A extends f({}) { m() {} } ", false),
    ("x = class { m() {} } ", true),
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
    for (name, src) in [("modules.rs", include_str!("../modules.rs")), ("nesting.rs", include_str!("../nesting.rs"))] {
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
        // The bound read `obj.return / 2` as a regex (`return` was an operator word to it) and
        // skipped what the guard read.
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
        // An object literal's `}` is a value: the old guard took the `/` after it for a regex.
        "const a = {}\n/ 2; require('fs'); 1 / 3",
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
    let words: Vec<_> = toks.iter().filter_map(|t| if let Kind::Word(w) = t.kind { Some(w) } else { None }).collect();
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

/// Pieces the property test below joins into cells: lexical traps of every kind.
const PIECES: [&str; 44] = [
    "/", "/", "*", "(", ")", "[", "]", "{", "}", "`", "${", "'", "\"", "\\", "\n", "\r", " ", "a", "1", ".", "?", ":",
    ";", ",", "=>", "++", "#", "return", "if", "function", "class", "async", "require", "import", "for", "await",
    "else", "\u{2028}", "\u{a0}", "é", "\\u0072", "\\u{", "<!--", "x",
];

proptest! {
    /// Any cell: the stream moves forward within bounds and ends; neither scanner panics; the
    /// estimate invents no depth (the fuzz oracle's bound).
    #[test]
    fn any_cell_tokenizes_forward_and_both_scanners_survive(pieces in prop::collection::vec(0..PIECES.len(), 0..80)) {
        let src: String = pieces.into_iter().map(|i| PIECES[i]).collect();
        let mut end = 0;
        for t in Tokens::new(&src) {
            prop_assert!(end <= t.start && t.start <= t.end && t.end <= src.len(), "{:?}: {:?}", src, t);
            end = t.end;
        }
        let _ = find_module_access(&src);
        prop_assert!(nesting_estimate(&src) <= src.chars().count() + 1, "{:?}", src);
    }
}
