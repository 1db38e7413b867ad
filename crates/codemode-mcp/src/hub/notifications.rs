//! What upstream servers tell the hub without being asked: tool-list changes and log messages
//! (through [`Senders`]), and progress of calls in flight, routed by progress token to the run that
//! made the call; and the `notifications/cancelled` sent when a call's future is dropped.

use super::*;

#[derive(Clone)]
pub(super) struct Handler {
    pub(super) server: String,
    pub(super) senders: Senders,
    /// Declare the tasks extension to this server (`tasks`, default on).
    pub(super) tasks: bool,
}

/// Where every connection reports: tool-list changes (by server name) and log messages.
#[derive(Clone)]
pub(super) struct Senders {
    pub(super) changed: mpsc::UnboundedSender<String>,
    pub(super) logs: mpsc::Sender<UpstreamLog>,
}

/// A `notifications/message` an upstream server sent (relayed to downstream clients that asked for
/// log messages with `logging/setLevel`).
#[derive(Debug, Clone)]
pub struct UpstreamLog {
    /// The server's configured name.
    pub server: String,
    /// The message as the server sent it.
    #[allow(deprecated)]
    pub message: rmcp::model::LoggingMessageNotificationParam,
}

/// Most upstream log messages queued for relaying. Prevents: a chatty or hostile server growing
/// the queue without bound (further messages are dropped until it drains).
pub(super) const MAX_QUEUED_LOGS: usize = 256;

/// Progress tokens of upstream calls in flight → where their progress goes (tokens are unique ids,
/// so one table serves every connection).
pub(super) fn progress_routes() -> &'static Mutex<HashMap<String, ProgressSink>> {
    static ROUTES: std::sync::OnceLock<Mutex<HashMap<String, ProgressSink>>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(Default::default)
}

/// The key of a progress token in [`progress_routes`] (rmcp numbers its requests' tokens).
pub(super) fn route_key(token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::Number(n) => format!("n:{n}"),
        NumberOrString::String(s) => format!("s:{s}"),
    }
}

/// Tells the upstream server a `tools/call` was abandoned when its future is dropped unfinished
/// (the run was aborted): `notifications/cancelled`, sent from a task of its own.
pub(super) struct CancelOnDrop {
    pub(super) peer: Peer<RoleClient>,
    pub(super) id: Option<rmcp::model::RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let (Some(id), Ok(rt)) = (self.id.take(), tokio::runtime::Handle::try_current()) else { return };
        let peer = self.peer.clone();
        rt.spawn(async move {
            let params =
                rmcp::model::CancelledNotificationParam::new(Some(id), Some("the code mode run was aborted".into()));
            let note = rmcp::model::CancelledNotification::new(params);
            let _ = peer.send_notification(note.into()).await;
        });
    }
}

/// Removes a progress route when its call ends (however it ends).
pub(super) struct ProgressRoute(pub(super) String);

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        lock(progress_routes()).remove(&self.0);
    }
}

/// Longest upstream progress message relayed.
pub(super) const MAX_UPSTREAM_PROGRESS_CHARS: usize = 500;

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        let _ = self.senders.changed.send(self.server.clone());
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        message: rmcp::model::LoggingMessageNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        let _ = self.senders.logs.try_send(UpstreamLog { server: self.server.clone(), message });
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _cx: NotificationContext<RoleClient>) {
        let Some(sink) = lock(progress_routes()).get(&route_key(&params.progress_token)).cloned() else { return };
        let mut text = match params.total {
            Some(total) => format!("{}/{total}", params.progress),
            None => format!("{}", params.progress),
        };
        if let Some(m) = &params.message {
            text.push_str(": ");
            text.extend(m.chars().take(MAX_UPSTREAM_PROGRESS_CHARS));
        }
        sink.report(text);
    }

    /// The client's capabilities: the tasks extension (SEP-2663) unless the server's `tasks` setting
    /// is off, so a server may answer a long call with a task the hub polls (see `hub::tasks`).
    fn get_info(&self) -> ClientConfig {
        let caps = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("codemode", env!("CARGO_PKG_VERSION")))
    }
}
