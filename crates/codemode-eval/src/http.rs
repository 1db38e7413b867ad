//! The HTTP side of the model clients: one JSON POST with retries on rate limits and server
//! errors, honouring `Retry-After`.

use crate::model::ModelError;
use serde_json::Value;
use std::time::Duration;

/// How a client retries.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt (rate limits, 5xx, connection failures).
    pub max_retries: u32,
    /// First backoff when the endpoint gives no `Retry-After`; it doubles each retry.
    pub base_delay: Duration,
    /// Longest wait before one retry, whatever `Retry-After` says. Prevents: an endpoint's huge
    /// `Retry-After` stalling the evaluation for hours.
    pub max_delay: Duration,
    /// Longest one request may take.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(60),
            timeout: Duration::from_secs(300),
        }
    }
}

/// Largest answer read from a model endpoint. Prevents: a broken or hostile endpoint streaming an
/// endless body into memory (a turn's answer is kilobytes).
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Reads a body up to [`MAX_RESPONSE_BYTES`].
async fn body_text(mut resp: reqwest::Response) -> Result<String, String> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(format!("the answer is larger than {MAX_RESPONSE_BYTES} bytes"));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(String::from_utf8_lossy(&buf).into_owned()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Statuses worth retrying: rate limited, and the server's own failures (529: Anthropic's
/// "overloaded").
fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// The wait an endpoint asked for: `retry-after-ms`, else `Retry-After` in seconds.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    get("retry-after").and_then(|v| v.parse::<f64>().ok()).map(|s| Duration::from_secs_f64(s.max(0.0)))
}

fn excerpt(body: &str) -> String {
    let mut s: String = body.chars().take(300).collect();
    if s.len() < body.len() {
        s.push('…');
    }
    s
}

/// POSTs `body` to `url` with `headers` and returns the JSON answer.
pub(crate) async fn post_json(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    body: &Value,
    policy: RetryPolicy,
) -> Result<Value, ModelError> {
    let mut attempt = 0u32;
    loop {
        let mut req = client.post(url).timeout(policy.timeout).json(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let backoff = policy.base_delay.saturating_mul(1u32 << attempt.min(16)).min(policy.max_delay);
        let (delay, failure) = match req.send().await {
            Err(e) => (backoff, ModelError::Transport(format!("{url}: {e}"))),
            Ok(resp) => {
                let status = resp.status().as_u16();
                let wait = retry_after(resp.headers()).map(|d| d.min(policy.max_delay)).unwrap_or(backoff);
                let text = match body_text(resp).await {
                    Ok(t) => t,
                    Err(e) => return Err(ModelError::Protocol(format!("{url}: HTTP {status}: {e}"))),
                };
                if (200..300).contains(&status) {
                    return serde_json::from_str(&text).map_err(|e| {
                        ModelError::Protocol(format!("{url}: the answer is not JSON ({e}): {}", excerpt(&text)))
                    });
                }
                if !retryable(status) {
                    return Err(ModelError::Protocol(format!("{url}: HTTP {status}: {}", excerpt(&text))));
                }
                (
                    wait,
                    ModelError::Transport(format!(
                        "{url}: HTTP {status} after {} attempt(s): {}",
                        attempt + 1,
                        excerpt(&text)
                    )),
                )
            }
        };
        if attempt >= policy.max_retries {
            return Err(failure);
        }
        tracing::info!(%url, attempt, delay_ms = delay.as_millis() as u64, "model endpoint: retrying ({failure})");
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}
