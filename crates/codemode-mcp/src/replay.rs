//! The replay window of `codemode serve --http`: the SSE events of recent streams, kept in memory so
//! a client whose stream dropped can resume it with `Last-Event-ID` (SEP-1699) and still get what
//! was sent while it was away — above all the result of a long `exec`, which would otherwise be
//! lost when it is produced before the client reconnects.
//!
//! A replay returns the stored events after the given one and ends; a client that reconnected
//! before its result was ready reconnects again after the stream's `retry` hint and gets it then.
//! Event ids are decimal numbers, unique within the process.
//!
//! Limits, each against a client or cell that would make the server keep everything it ever sent:
//! at most [`MAX_EVENTS`] events and [`MAX_BYTES`] bytes of messages, each kept at most
//! [`MAX_AGE`]; the oldest go first.

use rmcp::transport::common::server_side_http::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::{EventId, EventStore, EventStoreError, EventStream};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most events kept.
pub const MAX_EVENTS: usize = 4_096;
/// Most message bytes kept (JSON text of the events' messages).
pub const MAX_BYTES: usize = 64 << 20;
/// Longest time an event is kept.
pub const MAX_AGE: Duration = Duration::from_secs(300);

struct Stored {
    id: u64,
    stream: String,
    event: ServerSseMessage,
    at: Instant,
    bytes: usize,
}

#[derive(Default)]
struct Window {
    next: u64,
    events: VecDeque<Stored>,
    bytes: usize,
}

/// An in-memory [`EventStore`] over a bounded window of recent events (see the module docs).
#[derive(Default)]
pub struct ReplayWindow {
    window: Mutex<Window>,
}

impl std::fmt::Debug for ReplayWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("ReplayWindow").field("events", &w.events.len()).field("bytes", &w.bytes).finish()
    }
}

impl ReplayWindow {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    fn evict(w: &mut Window, now: Instant) {
        while let Some(front) = w.events.front() {
            let too_old = now.duration_since(front.at) > MAX_AGE;
            if !(too_old || w.events.len() > MAX_EVENTS || w.bytes > MAX_BYTES) {
                break;
            }
            if let Some(gone) = w.events.pop_front() {
                w.bytes -= gone.bytes;
            }
        }
    }
}

#[async_trait::async_trait]
impl EventStore for ReplayWindow {
    async fn store_event(&self, stream_id: &str, event: &ServerSseMessage) -> Result<EventId, EventStoreError> {
        let bytes = event.message.as_deref().map(codemode_core::result::serialized_len).unwrap_or(0) + stream_id.len();
        let now = Instant::now();
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let id = w.next;
        w.next += 1;
        w.events.push_back(Stored { id, stream: stream_id.to_string(), event: event.clone(), at: now, bytes });
        w.bytes += bytes;
        Self::evict(&mut w, now);
        Ok(id.to_string())
    }

    async fn replay_events_after(&self, last_event_id: &str) -> Result<EventStream, EventStoreError> {
        let last: u64 =
            last_event_id.parse().map_err(|_| format!("`{last_event_id}` is not an event id of this server"))?;
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        Self::evict(&mut w, Instant::now());
        let Some(stream) = w.events.iter().find(|e| e.id == last).map(|e| e.stream.clone()) else {
            return Err(format!("event `{last}` is no longer kept (older than the replay window)").into());
        };
        let later: Vec<ServerSseMessage> = w
            .events
            .iter()
            .filter(|e| e.id > last && e.stream == stream)
            .map(|e| {
                let mut event = e.event.clone();
                event.event_id = Some(e.id.to_string());
                event
            })
            .collect();
        Ok(Box::pin(futures::stream::iter(later)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt as _;

    fn event() -> ServerSseMessage {
        let note = rmcp::model::ServerNotification::ToolListChangedNotification(Default::default());
        ServerSseMessage::from_message(rmcp::model::ServerJsonRpcMessage::notification(note))
    }

    #[tokio::test]
    async fn replays_only_later_events_of_the_same_stream() {
        let w = ReplayWindow::new();
        let a0 = w.store_event("a", &event()).await.unwrap();
        let b0 = w.store_event("b", &event()).await.unwrap();
        let a1 = w.store_event("a", &event()).await.unwrap();
        let a2 = w.store_event("a", &event()).await.unwrap();
        let ids: Vec<String> =
            w.replay_events_after(&a0).await.unwrap().map(|e| e.event_id.unwrap_or_default()).collect().await;
        assert_eq!(ids, [a1, a2.clone()]);
        assert_eq!(w.replay_events_after(&b0).await.unwrap().count().await, 0);
        assert_eq!(w.replay_events_after(&a2).await.unwrap().count().await, 0);
        assert!(w.replay_events_after("nope").await.is_err());
        assert!(w.replay_events_after("999").await.is_err());
    }

    #[tokio::test]
    async fn the_window_is_bounded() {
        let w = ReplayWindow::new();
        let first = w.store_event("s", &event()).await.unwrap();
        for _ in 0..MAX_EVENTS + 10 {
            w.store_event("s", &event()).await.unwrap();
        }
        let len = w.window.lock().unwrap().events.len();
        assert_eq!(len, MAX_EVENTS);
        assert!(w.replay_events_after(&first).await.is_err(), "the oldest event left the window");
    }
}
