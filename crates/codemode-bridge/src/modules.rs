//! Static module guard (contract X6, V17): finds `import` declarations, dynamic `import()`,
//! `import.meta` and `require(...)` in a cell before it runs, so a cell that tries to load modules is
//! rejected with `module_access_denied` before any of its side effects happen.
//!
//! The guard is not a tokenizer of its own: it consumes the token stream of `tokens.rs` (the one
//! lexical pass it shares with the nesting estimate, [`crate::nesting`]), which skips comments,
//! string literals, template text (the code inside `${…}` is tokenized) and regular-expression
//! literals, and reports `import` / `require` in code positions. Property names (`obj.import`,
//! `{ import: 1 }`) are not reported. The engines enforce the same rule at run time as a second layer
//! (no module loader, a throwing `require`), so code built at run time (`eval`) is covered too.

use crate::MODULE_DENIED_PREFIX;
use crate::tokens::{Kind, Tokens};

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

/// Scans `src` and returns the first module-loader pattern, if any.
pub fn find_module_access(src: &str) -> Option<ModuleFinding> {
    let mut tokens = Tokens::new(src).peekable();
    while let Some(t) = tokens.next() {
        let next = tokens.peek().map(|n| n.kind);
        let what = match (t.kind, next) {
            (Kind::Word("import"), Some(Kind::Open { byte: b'(', .. })) => "dynamic import()",
            (Kind::Word("import"), Some(Kind::Punct { first: b'.', .. })) => "import.meta",
            (
                Kind::Word("import"),
                Some(Kind::Open { byte: b'{', .. } | Kind::Punct { first: b'*', .. } | Kind::Str | Kind::Word(_)),
            ) => "import declaration",
            (Kind::Word("require"), Some(Kind::Open { byte: b'(', .. })) => "require()",
            _ => continue,
        };
        return Some(ModuleFinding { what, line: t.line });
    }
    None
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
