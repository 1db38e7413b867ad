//! Recognises cells that are shell commands, not JavaScript (`ls -la`, `cat f | grep x`, `$ git
//! status`, `#!/bin/sh`), so the model is told at once that `exec` runs JavaScript — instead of a
//! puzzling `SyntaxError` or `ReferenceError: ls is not defined` after the cell started.
//!
//! The check looks at the first line only and is deliberately narrow: a known command word followed
//! by whitespace and something that cannot continue a JavaScript expression the way a program would
//! (an option, a path, a pipe, a plain word), and that word declared nowhere in the cell.

/// Commands a model reaches for when it mistakes `exec` for a shell.
const COMMANDS: [&str; 52] = [
    "ls", "cat", "grep", "egrep", "rg", "cd", "pwd", "echo", "curl", "wget", "git", "npm", "npx", "yarn", "pnpm",
    "pip", "pip3", "python", "python3", "node", "deno", "bun", "cargo", "rm", "mkdir", "touch", "sudo", "apt",
    "apt-get", "find", "head", "tail", "sed", "awk", "chmod", "chown", "export", "cp", "mv", "ps", "kill", "which",
    "whoami", "env", "bash", "sh", "zsh", "make", "docker", "kubectl", "jq", "tar",
];

/// The message for a cell that looks like a shell command, or `None` for anything else.
pub fn looks_like_shell(code: &str) -> Option<String> {
    // The first line that is not a `//` comment.
    let first = code.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with("//"))?;
    // The message is made only for a cell that is refused (most cells are not).
    let refuse = || {
        let shown: String = first.chars().take(60).collect();
        Some(format!(
            "exec runs JavaScript, not shell: `{shown}` looks like a shell command. There is no shell, filesystem or \
             network here. Write JavaScript that calls tools instead, e.g. `const hits = await tools.search(\"files\"); \
             return hits;` (MCP servers: `await API.list(\"mcp\")`)."
        ))
    };
    if first.starts_with("#!") {
        return refuse();
    }
    let line = first.strip_prefix("$ ").map(str::trim_start).unwrap_or(first);
    let prompt = line.len() != first.len();
    let word_end = line.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_')).unwrap_or(line.len());
    let (word, rest) = line.split_at(word_end);
    if !COMMANDS.contains(&word) || declared(code, word) {
        return None;
    }
    if prompt {
        return refuse();
    }
    if rest.is_empty() {
        // A bare command word as the whole cell (`ls`, `pwd`).
        return if code.trim() == word { refuse() } else { None };
    }
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let arg = rest.trim_start();
    let shell_like = match arg.chars().next() {
        Some('-') => arg.chars().nth(1).is_some_and(|c| c.is_ascii_alphabetic() || c == '-'),
        Some('/' | '~' | '|' | '>' | '*' | '"' | '\'') => true,
        Some('.') => {
            arg.starts_with("./")
                || arg.starts_with("../")
                || arg == "."
                || arg.starts_with(". ")
                || arg.starts_with(".. ")
        }
        Some(c) if c.is_ascii_alphanumeric() => {
            // `git status`, `cat notes.txt`: a second word where JavaScript needs an operator.
            let next = arg.split(|c: char| c.is_whitespace()).next().unwrap_or("");
            !matches!(next, "in" | "instanceof" | "of")
        }
        _ => false,
    };
    if shell_like { refuse() } else { None }
}

/// Whether `word` is declared as a variable, function or class somewhere in the cell.
fn declared(code: &str, word: &str) -> bool {
    ["var ", "let ", "const ", "function ", "class "]
        .iter()
        .any(|kw| code.match_indices(kw).any(|(at, _)| code[at + kw.len()..].trim_start().starts_with(word)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_commands_are_recognised() {
        for cell in [
            "ls -la",
            "cat file.txt | grep x",
            "$ git status",
            "#!/bin/bash\necho hi",
            "pwd",
            "curl https://example.com",
            "  grep -r TODO .",
            "cd /tmp && ls",
            "npm install left-pad",
            "echo 'hello'",
            "find . -name '*.rs'",
            "// list the files\nls -la",
        ] {
            let m = looks_like_shell(cell).unwrap_or_else(|| panic!("not recognised: {cell}"));
            assert!(m.starts_with("exec runs JavaScript, not shell"), "{m}");
        }
    }

    #[test]
    fn javascript_is_left_alone() {
        for cell in [
            "return 1 + 1",
            "const ls = [1]; return ls",
            "ls = 1",
            "echo(1)",
            "find(x)",
            "cat.meow()",
            "const files = await tools.search('ls -la'); return files",
            "let env = {}; env.a = 1; return env",
            "env.x",
            "node in tree",
            "kill - 1; var kill = 2",
            "echo\n(1)",
        ] {
            assert_eq!(looks_like_shell(cell), None, "{cell}");
        }
    }
}
