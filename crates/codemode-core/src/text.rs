//! Text from untrusted sources (guest code, upstream MCP servers) made safe for the places people
//! and line-oriented tools read it: terminals, log lines, JSON-lines audit trails, prompts put to a
//! human.
//!
//! Two rules, one per destination:
//! - [`for_display`]: every control character (C0, DEL, C1), line and paragraph separator, and
//!   bidirectional-override character is written as a visible `\u{…}` escape, so a string cannot
//!   start a new line, move the cursor, clear a screen or reorder what is shown around it.
//! - [`json_line_safe`]: a JSON text keeps its meaning but has no character that a reader
//!   splitting on Unicode line breaks would split at (U+2028, U+2029, NEL and the other C1
//!   controls, DEL are written as `\uXXXX` escapes; serde_json already escapes C0).

use std::borrow::Cow;

/// Whether `c` must not reach a terminal or a line-oriented reader as it is.
pub fn is_unsafe_for_display(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        // Line and paragraph separators.
        | '\u{2028}' | '\u{2029}'
        // Bidirectional embeddings, overrides and isolates, and the implicit marks.
        | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        // Byte-order mark / zero-width no-break space in the middle of text.
        | '\u{feff}')
}

/// `s` with every character of [`is_unsafe_for_display`] written as `\u{XX}`. Borrowed when
/// nothing needs escaping (the common case costs one scan).
pub fn for_display(s: &str) -> Cow<'_, str> {
    escape(s, is_unsafe_for_display, |c| format!("\\u{{{:x}}}", c as u32))
}

/// Whether `c` must be escaped in a JSON line (see [`json_line_safe`]).
fn breaks_json_lines(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}')
}

/// A compact JSON text (as serde_json writes it) with U+2028, U+2029, DEL and the C1 controls
/// written as `\uXXXX` escapes. Such characters can only occur inside JSON strings, where the
/// escape means the same character: the value is unchanged. Prevents: a value from a cell or an
/// upstream server splitting (and so hiding) its own record for readers that split on Unicode
/// line breaks.
pub fn json_line_safe(json: String) -> String {
    match escape(&json, breaks_json_lines, |c| format!("\\u{:04x}", c as u32)) {
        Cow::Borrowed(_) => json,
        Cow::Owned(escaped) => escaped,
    }
}

/// `text` cut to its first `max` characters with `…` after them, or as it is when no longer.
pub fn cut_chars(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        return text;
    }
    let mut cut: String = text.chars().take(max).collect();
    cut.push('…');
    cut
}

/// `s` with each character `unsafe_char` selects replaced by `escaped(c)`; borrowed when there is none.
fn escape(s: &str, unsafe_char: fn(char) -> bool, escaped: impl Fn(char) -> String) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_char(c) {
            out.push_str(&escaped(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_escapes_controls_separators_and_bidi() {
        assert!(matches!(for_display("plain text, ünïcode ✓"), Cow::Borrowed(_)));
        assert_eq!(for_display("a\nb"), "a\\u{a}b");
        assert_eq!(for_display("\u{1b}[2J\u{1b}[H"), "\\u{1b}[2J\\u{1b}[H");
        assert_eq!(for_display("x\u{85}y\u{2028}z\u{2029}"), "x\\u{85}y\\u{2028}z\\u{2029}");
        assert_eq!(for_display("\u{202e}txt.exe"), "\\u{202e}txt.exe");
        assert_eq!(for_display("\r\t\u{7f}\u{9b}"), "\\u{d}\\u{9}\\u{7f}\\u{9b}");
    }

    #[test]
    fn json_lines_keep_their_value_and_lose_line_breaks() {
        let v = serde_json::json!({"m": "a\u{2028}b\u{2029}c\u{85}d\u{9b}e\u{7f}f\n", "k\u{2028}": 1});
        let line = json_line_safe(serde_json::to_string(&v).unwrap());
        assert!(!line.chars().any(|c| c == '\n' || breaks_json_lines(c)), "{line}");
        assert_eq!(line.lines().count(), 1);
        // Every Unicode line-break character a reader may split on is gone.
        assert!(!line.contains(['\u{2028}', '\u{2029}', '\u{85}', '\u{b}', '\u{c}', '\r']), "{line}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&line).unwrap(), v);
        let plain = r#"{"a":"ok"}"#.to_string();
        assert_eq!(json_line_safe(plain.clone()), plain);
    }
}
