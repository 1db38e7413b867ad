//! Token counts with a real BPE: OpenAI's `o200k_base` (GPT-4o and later), whose vocabulary ships
//! inside the `tiktoken-rs` crate (nothing is downloaded). For models whose tokenizer is not public
//! (Claude, most open models) the counts are an approximation, and the report says so.
//!
//! A turn's input is its whole request — system text, every tool definition, every message —
//! serialized as JSON, so what is counted is what a provider receives, whatever its framing adds
//! on top (a few tokens per message). What differs run to run is counted as a fixed value, so the
//! counts do not: the episode's work directory (as `/work`), the timing fields of code-mode results
//! (`durationMs`, `elapsedMs`, as `0`) and run ids (`cm_…`, as zeros of the same length) — a few
//! tokens a turn.

use crate::model::{Reply, Request};
use std::sync::OnceLock;

/// The tokenizer's name, as the report states it.
pub const TOKENIZER: &str = "o200k_base";

fn bpe() -> Option<&'static tiktoken_rs::CoreBPE> {
    static BPE: OnceLock<Option<tiktoken_rs::CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| match tiktoken_rs::o200k_base() {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::error!(error = %e, "cannot load the o200k_base vocabulary");
            None
        }
    })
    .as_ref()
}

/// Tokens of `text` (0 if the vocabulary could not be loaded, which the tests rule out).
pub fn count(text: &str) -> u64 {
    bpe().map_or(0, |b| b.encode_ordinary(text).len() as u64)
}

/// Tokens of a turn's whole request, with `work` counted as `/work`.
pub fn request_tokens(request: &Request, work: &str) -> u64 {
    let json = serde_json::to_string(request).unwrap_or_default();
    count(&normalize(&json, work))
}

/// Tokens of a turn's reply (its text and its calls, as JSON).
pub fn reply_tokens(reply: &Reply, work: &str) -> u64 {
    let json = serde_json::to_string(&(&reply.text, &reply.calls)).unwrap_or_default();
    count(&normalize(&json, work))
}

fn normalize(text: &str, work: &str) -> String {
    static TIMING: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let text = if work.is_empty() { text.to_string() } else { text.replace(work, "/work") };
    // Inside a tool result the JSON is itself a string, so its quotes arrive escaped.
    let timing = TIMING.get_or_init(|| regex::Regex::new(r#"(\\?"(?:durationMs|elapsedMs)\\?":)\d+"#).ok());
    let text = match timing {
        Some(re) => re.replace_all(&text, "${1}0").into_owned(),
        None => text,
    };
    static RUN_ID: OnceLock<Option<regex::Regex>> = OnceLock::new();
    match RUN_ID.get_or_init(|| regex::Regex::new(r"cm_[0-9a-f]{8,}").ok()) {
        Some(re) => {
            re.replace_all(&text, |c: &regex::Captures<'_>| format!("cm_{}", "0".repeat(c[0].len() - 3))).into_owned()
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn timings_and_the_work_directory_are_counted_as_fixed_values() {
        let a = super::normalize(r#"{"content":"{\"durationMs\":17,\"elapsedMs\":3} at /tmp/x1/f"}"#, "/tmp/x1");
        let b = super::normalize(r#"{"content":"{\"durationMs\":1234,\"elapsedMs\":99} at /tmp/y2/f"}"#, "/tmp/y2");
        assert_eq!(a, b);
        assert!(a.contains(r#"\"durationMs\":0"#) && a.contains("/work/f"), "{a}");
        assert_eq!(super::normalize(r#"{"durationMs":5}"#, ""), r#"{"durationMs":0}"#);
        assert_eq!(super::normalize("wait cm_3fa9c0d1e2b4a5f6", ""), "wait cm_0000000000000000");
    }

    #[test]
    fn known_counts() {
        // o200k_base: "hello world" is two tokens; the empty string none.
        assert_eq!(super::count("hello world"), 2);
        assert_eq!(super::count(""), 0);
        assert!(super::count(&"lorem ipsum ".repeat(100)) >= 100);
    }
}
