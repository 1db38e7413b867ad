//! Token counts with a real BPE: OpenAI's `o200k_base` (GPT-4o and later), whose vocabulary ships
//! inside the `tiktoken-rs` crate (nothing is downloaded). For models whose tokenizer is not public
//! (Claude, most open models) the counts are an approximation, and the report says so.
//!
//! A turn's input is its whole request — system text, every tool definition, every message —
//! serialized as JSON, so what is counted is what a provider receives, whatever its framing adds
//! on top (a few tokens per message). The episode's work directory is counted as `/work`: its
//! real path differs run to run, the counts must not.

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
    if work.is_empty() { text.to_string() } else { text.replace(work, "/work") }
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_counts() {
        // o200k_base: "hello world" is two tokens; the empty string none.
        assert_eq!(super::count("hello world"), 2);
        assert_eq!(super::count(""), 0);
        assert!(super::count(&"lorem ipsum ".repeat(100)) >= 100);
    }
}
