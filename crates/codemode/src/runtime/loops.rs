//! Loop detection's per-session history (contract §22): kept per session in this process, and on a
//! fleet store handed through the store, so a session that spreads a loop over replicas is seen
//! whole.

use super::run::Run;
use super::{Inner, MAX_LOOP_SESSIONS};
use codemode_catalog::loops::History;
use codemode_core::scope::RunContext;
use std::sync::{Arc, Mutex};
use tokio::runtime::Handle;

/// The kind of session state a session's loop-detection history is kept under in a fleet store.
const LOOPS_STATE: &str = "loops";

impl Inner {
    /// The loop-detection configuration and history of `ctx`'s session, when detection is on for
    /// its agent. The history spans the session's `exec` / `wait` calls (in this process).
    pub(super) fn loop_history(
        &self,
        rt: &Handle,
        ctx: &RunContext,
    ) -> Option<(codemode_catalog::loops::LoopConfig, Arc<Mutex<History>>)> {
        let config = self.loops.for_agent(ctx.scope.agent_id.as_deref());
        if !config.enabled {
            return None;
        }
        // A fleet shares the session's history: the replica serving this call starts from the
        // one the fleet's store holds (another replica may have served the session's last call).
        let shared = if self.store.fleet() {
            match rt.block_on(self.store.session_state(&ctx.scope, LOOPS_STATE)) {
                Ok(Some(text)) => serde_json::from_str::<History>(&text).ok(),
                Ok(None) => Some(History::default()),
                Err(e) => {
                    tracing::warn!(error = %e, "loop-detection history not read from the store; this replica's is used");
                    None
                }
            }
        } else {
            None
        };
        let mut map = self.loop_histories.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_LOOP_SESSIONS
            && !map.contains_key(&ctx.scope)
            && let Some(k) = map.keys().next().cloned()
        {
            map.remove(&k);
        }
        let history = map.entry(ctx.scope.clone()).or_default().clone();
        if let Some(h) = shared {
            *history.lock().unwrap_or_else(|p| p.into_inner()) = h;
        }
        Some((config.clone(), history))
    }

    /// Hands the session's loop-detection history back to a fleet's store at the end of an `exec`
    /// / `wait` (last writer wins), so the session's next call sees it on any replica.
    pub(super) fn save_loop_history(&self, rt: &Handle, run: &Run) {
        let Some((_, history)) = run.loops.as_ref().filter(|_| self.store.fleet()) else { return };
        let text = {
            let h = history.lock().unwrap_or_else(|p| p.into_inner());
            serde_json::to_string(&*h).unwrap_or_default()
        };
        let ttl_ms = self.config.snapshot_ttl_seconds.saturating_mul(1000);
        if let Err(e) = rt.block_on(self.store.put_session_state(&run.context.scope, LOOPS_STATE, &text, ttl_ms)) {
            tracing::warn!(run = %run.id, error = %e, "loop-detection history not saved to the store");
        }
    }
}
