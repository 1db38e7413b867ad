//! The host half of the bridge: what happens when the guest calls the host primitive, and how
//! settled requests are encoded for delivery. Shared by every engine, so the protocol's rules (ids,
//! limits, output accounting) are implemented exactly once.

use crate::adapter::{RequestPayloadError, encode_for_guest, parse_guest_json, parse_request};
use codemode_core::engine::BootSource;
use codemode_core::engine::{
    Answer, Answerer, BridgeRequest, Delivery, GuestFailure, GuestLimits, RequestId, RequestKind,
};
use codemode_core::error::CodeModeErrorCode;
use codemode_core::result::CodeModeOutput;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The part of the bridge state that must survive a snapshot (ids are unique per run, so the next id
/// and the outstanding set travel with the VM).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeState {
    /// The next request id to hand out.
    pub next_id: RequestId,
    /// Requests issued and not yet delivered.
    pub outstanding: Outstanding,
}

/// Requests issued and not yet delivered, by id, in increasing order: a vector kept sorted (ids are
/// handed out in increasing order, so a new request goes at the end). A tree map made and freed
/// a node each time the set went from empty to one request and back — on every nested call a
/// cell awaits before making the next (~0.35k instructions of the call). Serialized as the map it
/// is: the same form, and the same bytes, as a `BTreeMap<RequestId, RequestKind>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outstanding(Vec<(RequestId, RequestKind)>);

impl Outstanding {
    /// Number of requests.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds request `id` (replacing the kind of one already there, which the bridge never does).
    pub fn insert(&mut self, id: RequestId, kind: RequestKind) {
        match self.0.last() {
            Some((last, _)) if *last >= id => match self.0.binary_search_by_key(&id, |(i, _)| *i) {
                Ok(at) => self.0[at].1 = kind,
                Err(at) => self.0.insert(at, (id, kind)),
            },
            _ => self.0.push((id, kind)),
        }
    }

    /// Takes request `id` out, if it is there.
    pub fn remove(&mut self, id: RequestId) -> Option<RequestKind> {
        let at = self.0.binary_search_by_key(&id, |(i, _)| *i).ok()?;
        Some(self.0.remove(at).1)
    }

    /// The kind of request `id`, if it is there.
    pub fn get(&self, id: RequestId) -> Option<RequestKind> {
        self.0.binary_search_by_key(&id, |(i, _)| *i).ok().map(|at| self.0[at].1)
    }

    /// The requests in increasing id order.
    pub fn iter(&self) -> impl Iterator<Item = (RequestId, RequestKind)> + '_ {
        self.0.iter().copied()
    }
}

impl Serialize for Outstanding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(id, kind)| (id, kind)))
    }
}

impl<'de> Deserialize<'de> for Outstanding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A map's keys come sorted and unique out of the tree.
        Ok(Outstanding(BTreeMap::<RequestId, RequestKind>::deserialize(d)?.into_iter().collect()))
    }
}

/// What the host primitive answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostCallResult {
    /// A request was queued under this id (> 0).
    Request(RequestId),
    /// A synchronous output item was accepted (the primitive returns 0).
    Accepted,
    /// The answer to a `pull`: the catalog text under the key (the primitive returns it as a
    /// string), or `None` (the primitive returns `undefined`). See [`BootSource`].
    Data(Option<Arc<str>>),
    /// The request is refused; throw a catchable error of this name and message in the guest.
    Throw {
        /// Error constructor name (`TypeError`, `RangeError`, `Error`).
        name: &'static str,
        /// Message.
        message: String,
    },
    /// The request was answered at once by the step's [`Answerer`]: the primitive answers with a
    /// new promise, which the engine settles with this outcome (resolved with the parsed `json`
    /// when `ok`, else rejected with the prelude's `hostError` of it) when the guest's job queue
    /// next runs dry, as a delivery in the next step would have.
    Settled {
        /// The request (an engine that files its promise by id may use it).
        id: RequestId,
        /// Resolve (`true`) or reject.
        ok: bool,
        /// The outcome, encoded for the guest as [`BridgeHost::prepare_delivery`] encodes it.
        json: String,
    },
    /// [`HostCallResult::Settled`] with a value, for an engine that makes guest values from host
    /// values itself ([`BridgeHost::take_values`]): the request resolved with `value`, which is
    /// within the bridge's limits ([`crate::adapter::fits_for_guest`]) and must become what
    /// `JSON.parse` makes of its encoding ([`BridgeHost::prepare_delivery`]'s text) — forbidden keys
    /// left out. Only a resolved outcome comes this way; anything else as `Settled`.
    SettledValue {
        /// The request.
        id: RequestId,
        /// The value it resolved with.
        value: serde_json::Value,
    },
    /// A limit was hit that ends the cell: the engine must interrupt the guest (uncatchably) and report
    /// [`BridgeHost::fatal`]. The guest additionally sees a thrown error until the interrupt lands.
    Fatal,
}

/// Deepest value handed over as [`HostCallResult::SettledValue`] (an engine may build it
/// recursively); deeper ones go as text, however deep the limits allow.
pub const VALUE_DEPTH_MAX: u32 = 64;

/// The engine-independent bridge state machine behind the host primitive.
#[derive(Debug)]
pub struct BridgeHost {
    limits: GuestLimits,
    state: BridgeState,
    requests: Vec<BridgeRequest>,
    output: Vec<CodeModeOutput>,
    output_used: u64,
    output_budget: u64,
    fatal: Option<GuestFailure>,
    source: Option<Arc<dyn BootSource>>,
    answerer: Option<Arc<dyn Answerer>>,
    takes_values: bool,
}

impl BridgeHost {
    /// A fresh bridge for a new run.
    pub fn new(limits: GuestLimits) -> Self {
        Self::with_state(limits, BridgeState { next_id: 1, outstanding: Outstanding::default() })
    }

    /// A bridge restored from a snapshot.
    pub fn with_state(limits: GuestLimits, state: BridgeState) -> Self {
        let state = BridgeState { next_id: state.next_id.max(1), ..state };
        Self {
            limits,
            state,
            requests: Vec::new(),
            output: Vec::new(),
            output_used: 0,
            output_budget: u64::MAX,
            fatal: None,
            source: None,
            answerer: None,
            takes_values: false,
        }
    }

    /// The engine makes guest values from host values itself: a request the answerer resolves at
    /// once with a value that certainly fits the bridge's limits comes back as
    /// [`HostCallResult::SettledValue`] (the value, not its text). Spares the encoding and the
    /// guest's parse of it on every such call.
    pub fn take_values(&mut self) {
        self.takes_values = true;
    }

    /// The state to put into a snapshot.
    pub fn state(&self) -> &BridgeState {
        &self.state
    }

    /// The limits in force.
    pub fn limits(&self) -> &GuestLimits {
        &self.limits
    }

    /// Starts a drive step with `output_budget` bytes of output allowed.
    pub fn begin_drive(&mut self, output_budget: u64) {
        self.output_budget = output_budget;
        self.output_used = 0;
    }

    /// Sets the catalog data `pull` answers from (each drive step passes the run's, see
    /// [`DriveInput::boot_source`](codemode_core::engine::DriveInput::boot_source)).
    pub fn set_boot_source(&mut self, source: Option<Arc<dyn BootSource>>) {
        self.source = source;
    }

    /// Sets who takes this step's requests as they are made (see [`Answerer`]); cleared by
    /// [`Self::finish_drive`]. Only engines whose primitive handles [`HostCallResult::Settled`]
    /// set one.
    pub fn set_answerer(&mut self, answerer: Option<Arc<dyn Answerer>>) {
        self.answerer = answerer;
    }

    /// The failure that ends the cell, if a fatal limit was hit.
    pub fn fatal(&self) -> Option<&GuestFailure> {
        self.fatal.as_ref()
    }

    /// Number of outstanding requests.
    pub fn outstanding(&self) -> usize {
        self.state.outstanding.len()
    }

    /// Handles one call of the host primitive `host(kind, payload)` (an engine joins a payload the
    /// prelude sends in parts before calling this).
    pub fn host_call(&mut self, kind: &str, payload: &str) -> HostCallResult {
        self.host_call_holding(kind, payload, 0)
    }

    /// [`Self::host_call`] for an engine whose guest holds `held` outcomes answered at once
    /// ([`HostCallResult::Settled`]) that it has not settled yet: they count as outstanding
    /// requests, as they would if they had been delivered in a later step, so the
    /// outstanding-request limit means the same with and without an answerer.
    pub fn host_call_holding(&mut self, kind: &str, payload: &str, held: usize) -> HostCallResult {
        if self.fatal.is_some() {
            return HostCallResult::Fatal;
        }
        match kind {
            // Catalog data on demand: a lookup in host memory, nothing queued, nothing counted (the
            // text lands in the guest heap, which its own limit bounds).
            "pull" => HostCallResult::Data(self.source.as_ref().and_then(|s| s.pull(payload))),
            "text" => {
                let item = CodeModeOutput::Text { text: payload.to_string() };
                self.push_output(item, payload.len() as u64)
            }
            "json" => {
                let cost = payload.len() as u64;
                if self.output_used.saturating_add(cost) > self.output_budget {
                    return self.output_overflow(cost);
                }
                match parse_guest_json(payload, self.limits.max_message_bytes, self.limits.max_json_depth) {
                    Ok(value) => {
                        let cost = CodeModeOutput::Json { value: value.clone() }.cost() as u64;
                        self.push_output(CodeModeOutput::Json { value }, cost)
                    }
                    Err(e) => HostCallResult::Throw { name: "RangeError", message: format!("json(): {e}") },
                }
            }
            _ => {
                let Some(kind) = RequestKind::parse(kind) else {
                    return HostCallResult::Throw {
                        name: "TypeError",
                        message: format!("unknown bridge request `{kind}`"),
                    };
                };
                if self.state.outstanding.len().saturating_add(held) >= self.limits.max_outstanding_requests as usize {
                    self.fatal = Some(GuestFailure {
                        code: Some(CodeModeErrorCode::TooManyPendingToolCalls),
                        message: format!(
                            "too many outstanding bridge requests (limit {}); await results before issuing more",
                            self.limits.max_outstanding_requests
                        ),
                    });
                    return HostCallResult::Fatal;
                }
                // Parsed once, here: everything after the primitive matches on the typed request.
                let (max_bytes, max_depth) = (self.limits.max_message_bytes, self.limits.max_json_depth);
                let request = match parse_request(kind, payload, max_bytes, max_depth) {
                    Ok(r) => r,
                    Err(RequestPayloadError::Adapter(e)) => {
                        return HostCallResult::Throw {
                            name: "RangeError",
                            message: format!("{}: {e}", kind.as_str()),
                        };
                    }
                    Err(RequestPayloadError::Shape(e)) => {
                        return HostCallResult::Throw { name: "TypeError", message: e.to_string() };
                    }
                };
                let id = self.state.next_id;
                self.state.next_id += 1;
                self.state.outstanding.insert(id, kind);
                let request = BridgeRequest { id, request };
                // Taken at once only while nothing of this step waits for the report (output, or a
                // request kept for it): so requests are handled in the order they were made, and
                // the output before a request is seen before what handling it emits. A yield ends
                // the step, so it always goes to the report.
                let takes = kind != RequestKind::Yield && self.output.is_empty() && self.requests.is_empty();
                let Some(answerer) = self.answerer.take_if(|_| takes) else {
                    self.requests.push(request);
                    return HostCallResult::Request(id);
                };
                let mut notes = Vec::new();
                let answer = answerer.answer(request, &mut notes);
                self.answerer = Some(answerer);
                // Notes (loop-detection warnings) are the host's, not the guest's: counted, never
                // refused, as when they are added after a step.
                for text in notes {
                    let item = CodeModeOutput::Text { text };
                    self.output_used = self.output_used.saturating_add(item.cost() as u64);
                    self.output.push(item);
                }
                match answer {
                    Answer::Started => HostCallResult::Request(id),
                    Answer::Declined(request) => {
                        self.requests.push(request);
                        HostCallResult::Request(id)
                    }
                    Answer::Settled(delivery) if delivery.id == id => self.settled_at_once(delivery),
                    // An answer for another request would leave this one unanswered.
                    Answer::Settled(_) => self.internal_fatal(id),
                    Answer::Stop(failure) => {
                        self.fatal = Some(failure);
                        HostCallResult::Fatal
                    }
                }
            }
        }
    }

    /// Ends the cell over an answerer that broke its contract (a bug, never the guest's doing):
    /// the request it answered wrongly could never settle.
    fn internal_fatal(&mut self, id: RequestId) -> HostCallResult {
        self.fatal = Some(GuestFailure {
            code: Some(CodeModeErrorCode::InternalError),
            message: format!("internal error: the answer to request {id} cannot be delivered"),
        });
        HostCallResult::Fatal
    }

    fn push_output(&mut self, item: CodeModeOutput, cost: u64) -> HostCallResult {
        if self.output_used.saturating_add(cost) > self.output_budget {
            return self.output_overflow(cost);
        }
        self.output_used += cost;
        self.output.push(item);
        HostCallResult::Accepted
    }

    fn output_overflow(&mut self, cost: u64) -> HostCallResult {
        self.fatal = Some(GuestFailure {
            code: Some(CodeModeErrorCode::OutputLimitExceeded),
            message: format!(
                "output limit exceeded: an item of {cost} bytes does not fit in the {} bytes left of maxOutputBytes",
                self.output_budget.saturating_sub(self.output_used)
            ),
        });
        HostCallResult::Fatal
    }

    /// Records a fatal failure found by the engine itself.
    pub fn set_fatal(&mut self, failure: GuestFailure) {
        if self.fatal.is_none() {
            self.fatal = Some(failure);
        }
    }

    /// The primitive's answer for a request the answerer settled at once: the value as it is for an
    /// engine that takes values ([`BridgeHost::take_values`]) when it certainly fits the limits,
    /// else the delivery encoded as [`BridgeHost::prepare_delivery`] encodes it. Either way the
    /// request leaves the outstanding set; one that was not in it is an internal failure.
    fn settled_at_once(&mut self, delivery: Delivery) -> HostCallResult {
        let id = delivery.id;
        let (max_bytes, max_depth) = (self.limits.max_delivery_bytes, self.limits.max_json_depth.min(VALUE_DEPTH_MAX));
        let as_value = self.takes_values
            && matches!(&delivery.outcome, Ok(value) if crate::adapter::fits_for_guest(value, max_bytes, max_depth));
        match delivery.outcome {
            Ok(value) if as_value => match self.state.outstanding.remove(id) {
                Some(_) => HostCallResult::SettledValue { id, value },
                None => self.internal_fatal(id),
            },
            outcome => match self.prepare_delivery(&Delivery { id, outcome }) {
                Some((ok, json)) => HostCallResult::Settled { id, ok, json },
                None => self.internal_fatal(id),
            },
        }
    }

    /// Prepares a delivery: `Some((ok, json))` to pass to the guest's settle function, or `None` when
    /// the id is not outstanding (never issued, or already delivered — a result is never delivered
    /// twice). A result too large or too deep for the bridge becomes an error delivery.
    pub fn prepare_delivery(&mut self, delivery: &Delivery) -> Option<(bool, String)> {
        self.state.outstanding.remove(delivery.id)?;
        let limits = self.limits;
        let encoded = match &delivery.outcome {
            Ok(value) => match encode_for_guest(value, limits.max_delivery_bytes, limits.max_json_depth) {
                Ok(json) => (true, json),
                Err(e) => (
                    false,
                    error_json("RangeError", &format!("result refused by the bridge: {e}"), Some("nested_tool_failed")),
                ),
            },
            Err(err) => {
                let v = serde_json::json!({ "name": err.name, "message": err.message, "code": err.code });
                match encode_for_guest(&v, limits.max_delivery_bytes, limits.max_json_depth) {
                    Ok(json) => (false, json),
                    Err(_) => (
                        false,
                        error_json(&err.name, "error message too large for the bridge", err.code.map(|c| c.as_str())),
                    ),
                }
            }
        };
        Some(encoded)
    }

    /// Ends a drive step: the requests and output items it produced.
    pub fn finish_drive(&mut self) -> (Vec<BridgeRequest>, Vec<CodeModeOutput>) {
        self.answerer = None;
        (std::mem::take(&mut self.requests), std::mem::take(&mut self.output))
    }

    /// Bytes of output produced in this drive step.
    pub fn output_used(&self) -> u64 {
        self.output_used
    }
}

fn error_json(name: &str, message: &str, code: Option<&str>) -> String {
    serde_json::json!({ "name": name, "message": message, "code": code }).to_string()
}

#[cfg(test)]
mod tests;
