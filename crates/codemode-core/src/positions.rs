//! Source positions in error messages: they must name the model's own lines and columns.
//!
//! Engines report positions as `<cell>:LINE:COL` in the code they ran. For a JavaScript cell that is
//! the cell itself; for a TypeScript cell it is the transpiled JavaScript, which the runtime maps back
//! through a [`SourcePositions`] table built from the transform's source map (contract §14: "useful line
//! numbers should be preserved"). The table is plain data, so it travels with a suspended run to
//! the process that resumes it.

use serde::{Deserialize, Serialize};

/// File name engines use for the cell in stack traces and error positions.
pub const CELL_FILENAME: &str = "<cell>";

/// Maps 1-based `(line, column)` positions of generated JavaScript back to the cell's source.
///
/// Holds the mapping points of a source map in generated order: `[gen_line, gen_col, src_line,
/// src_col]`, all 1-based. A position maps through the last point at or before it on the same line
/// (keeping the column offset from that point), or else to the first point's source line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcePositions {
    points: Vec<[u32; 4]>,
}

impl SourcePositions {
    /// A table from mapping points (`[gen_line, gen_col, src_line, src_col]`, 1-based), in any order.
    pub fn new(mut points: Vec<[u32; 4]>) -> Self {
        points.sort_unstable();
        points.dedup_by_key(|p| (p[0], p[1]));
        SourcePositions { points }
    }

    /// Whether the table maps nothing.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The source position of a generated one.
    pub fn lookup(&self, line: u32, col: u32) -> Option<(u32, u32)> {
        let at = self.points.partition_point(|p| (p[0], p[1]) <= (line, col));
        if at > 0 {
            let p = self.points[at - 1];
            if p[0] == line {
                return Some((p[2], p[3] + (col - p[1])));
            }
        }
        // Before the first point of this line: the line's first mapped point, column unknown.
        let first =
            self.points[at..].iter().find(|p| p[0] == line).or_else(|| at.checked_sub(1).map(|i| &self.points[i]));
        first.map(|p| (p[2], 1))
    }

    /// Rewrites every `<cell>:LINE:COL` (and `<cell>:LINE`) in `text` through [`lookup`](Self::lookup).
    pub fn rewrite(&self, text: &str) -> String {
        rewrite_cell_positions(text, |line, col| self.lookup(line, col.unwrap_or(1)).map(|(l, c)| (l, col.map(|_| c))))
    }
}

/// Length in characters of the first line of the wrapper engines put around a cell (the cell starts
/// on the wrapper's first line, after this many characters): `0, async function(){`.
pub const WRAP_PREFIX_COLS: u32 = 20;

/// How positions the engine reports for one cell map back to what the model wrote: the cell ran
/// inside the engine's wrapper (its first line shifted by [`WRAP_PREFIX_COLS`], a closing line after
/// it), and, for TypeScript, after the transform ([`SourcePositions`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CellPositions {
    /// Lines of the code the engine ran (the cell, or its transpiled JavaScript).
    pub lines: u32,
    /// Characters of its last line.
    pub last_line_cols: u32,
    /// The transform's mapping (TypeScript cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_map: Option<SourcePositions>,
}

impl CellPositions {
    /// Positions of `code` as it was run, with an optional transform mapping.
    pub fn of(code: &str, source_map: Option<SourcePositions>) -> Self {
        // Trailing blank lines do not count: an error at the end of the input is reported at the
        // end of the last line the model wrote.
        let code = code.trim_end();
        let lines = code.split('\n').count().max(1) as u32;
        let last_line_cols = code.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) as u32;
        CellPositions { lines, last_line_cols, source_map }
    }

    /// Maps one engine position to the model's source.
    pub fn map(&self, line: u32, col: Option<u32>) -> (u32, Option<u32>) {
        let (line, col) = if line == 0 {
            (1, col)
        } else if line > self.lines {
            // The wrapper's closing line: an error at the end of the input.
            (self.lines.max(1), col.map(|_| self.last_line_cols + 1))
        } else if line == 1 {
            (1, col.map(|c| c.saturating_sub(WRAP_PREFIX_COLS).max(1)))
        } else {
            (line, col)
        };
        match &self.source_map {
            Some(m) if !m.is_empty() => {
                m.lookup(line, col.unwrap_or(1)).map(|(l, c)| (l, col.map(|_| c))).unwrap_or((line, col))
            }
            _ => (line, col),
        }
    }

    /// Rewrites every `<cell>:LINE[:COL]` in `text` with [`map`](Self::map).
    pub fn rewrite(&self, text: &str) -> String {
        rewrite_cell_positions(text, |l, c| Some(self.map(l, c)))
    }
}

/// Rewrites every `<cell>:LINE[:COL]` in `text` with `map(line, col)`; positions it returns `None`
/// for are kept as they are.
pub fn rewrite_cell_positions(text: &str, map: impl Fn(u32, Option<u32>) -> Option<(u32, Option<u32>)>) -> String {
    let marker = format!("{CELL_FILENAME}:");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&marker) {
        out.push_str(&rest[..at + marker.len()]);
        rest = &rest[at + marker.len()..];
        let (line, after_line) = leading_number(rest);
        let Some(line) = line else { continue };
        let (col, after_col) = match after_line.strip_prefix(':') {
            Some(r) => match leading_number(r) {
                (Some(c), r2) => (Some(c), r2),
                _ => (None, after_line),
            },
            None => (None, after_line),
        };
        let (l, c) = map(line, col).unwrap_or((line, col));
        out.push_str(&l.to_string());
        if let Some(c) = c {
            out.push(':');
            out.push_str(&c.to_string());
        }
        rest = after_col;
    }
    out.push_str(rest);
    out
}

fn leading_number(s: &str) -> (Option<u32>, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 || end > 9 {
        return (None, s);
    }
    (s[..end].parse().ok(), &s[end..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_positions_and_rewrites_messages() {
        let m = SourcePositions::new(vec![[1, 1, 3, 5], [1, 10, 3, 20], [2, 3, 7, 1]]);
        assert_eq!(m.lookup(1, 1), Some((3, 5)));
        assert_eq!(m.lookup(1, 12), Some((3, 22)));
        assert_eq!(m.lookup(2, 9), Some((7, 7)));
        assert_eq!(m.lookup(2, 1), Some((7, 1)), "before the line's first point: its line");
        let text = "Error: boom\n    at f (<cell>:2:9)\n    at <anonymous> (<cell>:1)\n<cell>:x";
        assert_eq!(m.rewrite(text), "Error: boom\n    at f (<cell>:7:7)\n    at <anonymous> (<cell>:3)\n<cell>:x");
        assert!(SourcePositions::default().is_empty());
        assert_eq!(SourcePositions::default().rewrite("at <cell>:4:2"), "at <cell>:4:2");
    }

    #[test]
    fn wrapper_positions_are_the_cells_own() {
        let js = CellPositions::of("throw new Error('x')", None);
        assert_eq!(js.rewrite("at <anonymous> (<cell>:1:21)"), "at <anonymous> (<cell>:1:1)");
        // Past the end (the wrapper's closing line): the end of the cell's last line.
        assert_eq!(js.rewrite("SyntaxError at <cell>:2:1"), "SyntaxError at <cell>:1:21");
        assert_eq!(js.rewrite("<cell>:3:1"), "<cell>:1:21");
        let trailing = CellPositions::of("if (x) {\n\n", None);
        assert_eq!(trailing.rewrite("at <cell>:2:1"), "at <cell>:1:9", "a one-line cell reports line 1");
        let two = CellPositions::of("const a = 1;\nfoo()", None);
        assert_eq!(two.rewrite("<cell>:2:1 <cell>:1:27"), "<cell>:2:1 <cell>:1:7");
    }
}
