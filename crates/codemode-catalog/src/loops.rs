//! Loop detection for nested calls (`tools.loopDetection`, `agents.list[].tools.loopDetection`,
//! contract §22): a session's recent nested calls are kept as a bounded history; three detectors look
//! for repetition that makes no progress.
//!
//! - `genericRepeat`: the same tool with the same input, N times within the history;
//! - `knownPollNoProgress`: the same tool with the same input returning the same output, N times in
//!   a row (a poll that is not getting anywhere);
//! - `pingPong`: two calls alternating A/B/A/B…, N calls long, each side returning what it returned
//!   before.
//!
//! A detector's count reaching `warningThreshold` adds a warning the model sees (once per
//! threshold crossing); reaching `criticalThreshold` refuses the call (a catchable failure); reaching
//! `globalCircuitBreakerThreshold` fails the whole run. Off by default.
//!
//! ```json5
//! tools: { loopDetection: { enabled: true, warningThreshold: 10, criticalThreshold: 20,
//!          globalCircuitBreakerThreshold: 30, historySize: 30,
//!          detectors: { genericRepeat: true, knownPollNoProgress: true, pingPong: true } } }
//! ```

use codemode_core::config::{ConfigError, type_name};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};

/// Default `warningThreshold` (the source's example value).
pub const DEFAULT_WARNING: u32 = 10;
/// Default `criticalThreshold`.
pub const DEFAULT_CRITICAL: u32 = 20;
/// Default `globalCircuitBreakerThreshold`.
pub const DEFAULT_BREAKER: u32 = 30;
/// Default `historySize`.
pub const DEFAULT_HISTORY: u32 = 30;
/// Largest `historySize`. Prevents: a configuration making every nested call scan a huge history.
pub const MAX_HISTORY: u32 = 1_000;

/// One loop-detection configuration (`tools.loopDetection` or an agent's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopConfig {
    /// `enabled` (default `false`).
    pub enabled: bool,
    /// `warningThreshold`.
    pub warning: u32,
    /// `criticalThreshold`.
    pub critical: u32,
    /// `globalCircuitBreakerThreshold`.
    pub breaker: u32,
    /// `historySize` (1..=[`MAX_HISTORY`]).
    pub history: u32,
    /// `detectors.genericRepeat`.
    pub generic_repeat: bool,
    /// `detectors.knownPollNoProgress`.
    pub poll_no_progress: bool,
    /// `detectors.pingPong`.
    pub ping_pong: bool,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            enabled: false,
            warning: DEFAULT_WARNING,
            critical: DEFAULT_CRITICAL,
            breaker: DEFAULT_BREAKER,
            history: DEFAULT_HISTORY,
            generic_repeat: true,
            poll_no_progress: true,
            ping_pong: true,
        }
    }
}

impl LoopConfig {
    /// `base` with the fields `v` sets (an agent's override over the global value).
    fn read(base: &LoopConfig, v: &Value, path: &str) -> Result<LoopConfig, ConfigError> {
        let obj =
            v.as_object().ok_or_else(|| ConfigError::new(path, format!("expected an object, got {}", type_name(v))))?;
        let mut c = base.clone();
        let int = |k: &str, x: &Value| {
            x.as_u64()
                .filter(|n| *n >= 1)
                .map(|n| n.min(u64::from(u32::MAX)) as u32)
                .ok_or_else(|| ConfigError::new(format!("{path}.{k}"), "expected a positive integer"))
        };
        for (k, x) in obj {
            match k.as_str() {
                "enabled" => {
                    c.enabled = x
                        .as_bool()
                        .ok_or_else(|| ConfigError::new(format!("{path}.enabled"), "expected true or false"))?
                }
                "warningThreshold" => c.warning = int(k, x)?,
                "criticalThreshold" => c.critical = int(k, x)?,
                "globalCircuitBreakerThreshold" => c.breaker = int(k, x)?,
                "historySize" => c.history = int(k, x)?.min(MAX_HISTORY),
                "detectors" => {
                    let d = x
                        .as_object()
                        .ok_or_else(|| ConfigError::new(format!("{path}.detectors"), "expected an object"))?;
                    for (name, on) in d {
                        let at = format!("{path}.detectors.{name}");
                        let on = on.as_bool().ok_or_else(|| ConfigError::new(&at, "expected true or false"))?;
                        match name.as_str() {
                            "genericRepeat" => c.generic_repeat = on,
                            "knownPollNoProgress" => c.poll_no_progress = on,
                            "pingPong" => c.ping_pong = on,
                            _ => {
                                return Err(ConfigError::new(
                                    at,
                                    "unknown detector (genericRepeat, knownPollNoProgress, pingPong)",
                                ));
                            }
                        }
                    }
                }
                _ => {
                    return Err(ConfigError::new(
                        format!("{path}.{k}"),
                        "unknown field (enabled, warningThreshold, criticalThreshold, globalCircuitBreakerThreshold, historySize, detectors)",
                    ));
                }
            }
        }
        if !(c.warning <= c.critical && c.critical <= c.breaker) {
            return Err(ConfigError::new(
                path,
                "thresholds must satisfy warningThreshold <= criticalThreshold <= globalCircuitBreakerThreshold",
            ));
        }
        Ok(c)
    }
}

/// The loop-detection policy of a config file: global and per agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopPolicy {
    /// `tools.loopDetection`.
    pub global: LoopConfig,
    /// `agents.list[].tools.loopDetection`, by agent id, merged over the global one.
    pub agents: BTreeMap<String, LoopConfig>,
}

impl LoopPolicy {
    /// Reads `tools.loopDetection` and `agents.list[].tools.loopDetection` of a config document.
    pub fn from_document(doc: &Value) -> Result<Self, ConfigError> {
        let mut p = LoopPolicy::default();
        if let Some(v) = doc.get("tools").and_then(|t| t.get("loopDetection")) {
            p.global = LoopConfig::read(&LoopConfig::default(), v, "tools.loopDetection")?;
        }
        for (i, agent) in
            doc.get("agents").and_then(|a| a.get("list")).and_then(Value::as_array).into_iter().flatten().enumerate()
        {
            if let (Some(id), Some(v)) =
                (agent.get("id").and_then(Value::as_str), agent.get("tools").and_then(|t| t.get("loopDetection")))
            {
                let c = LoopConfig::read(&p.global, v, &format!("agents.list[{i}].tools.loopDetection"))?;
                p.agents.insert(id.to_string(), c);
            }
        }
        Ok(p)
    }

    /// A policy with `config` for everyone.
    pub fn global(config: LoopConfig) -> Self {
        LoopPolicy { global: config, agents: BTreeMap::new() }
    }

    /// The configuration for `agent`.
    pub fn for_agent(&self, agent: Option<&str>) -> &LoopConfig {
        agent.and_then(|a| self.agents.get(a)).unwrap_or(&self.global)
    }

    /// Whether no configuration enables detection.
    pub fn is_off(&self) -> bool {
        !self.global.enabled && self.agents.values().all(|c| !c.enabled)
    }
}

/// A 64-bit fingerprint of a JSON value (inputs and outputs are compared by fingerprint).
///
/// Canonical: object keys are hashed in sorted order, so `{a, b}` and `{b, a}` are the same call.
/// Prevents: a cell that cycles the key order of one input evading the repeat detectors (every
/// order used to be a "different" call). Numbers hash by their JSON text, so `1` and `1.0` differ.
/// Hashes the value in place (no text is built), and stops descending past `MAX_FINGERPRINT_DEPTH`
/// levels (deeper levels are hashed by their kind only: the bridge's depth limit is far lower).
pub fn fingerprint(v: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash_canonical(v, &mut h, 0);
    h.finish()
}

/// Deepest level [`fingerprint`] descends into.
const MAX_FINGERPRINT_DEPTH: usize = 128;

fn hash_canonical(v: &Value, h: &mut impl Hasher, depth: usize) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            if depth < MAX_FINGERPRINT_DEPTH {
                for item in items {
                    hash_canonical(item, h, depth + 1);
                }
            }
        }
        Value::Object(map) => {
            (5u8, map.len()).hash(h);
            if depth < MAX_FINGERPRINT_DEPTH {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (k, item) in entries {
                    k.hash(h);
                    hash_canonical(item, h, depth + 1);
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Call {
    /// Fingerprint of tool id + input.
    signature: u64,
    /// Fingerprint of the output, once the call completed successfully.
    output: Option<u64>,
    /// The caller's id for this call (to attach the output later).
    key: u64,
}

/// Which detector fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detector {
    /// `genericRepeat`.
    GenericRepeat,
    /// `knownPollNoProgress`.
    PollNoProgress,
    /// `pingPong`.
    PingPong,
}

impl Detector {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Detector::GenericRepeat => "genericRepeat",
            Detector::PollNoProgress => "knownPollNoProgress",
            Detector::PingPong => "pingPong",
        }
    }
}

/// What the history says about a call about to be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to report.
    Ok,
    /// The call runs; the model sees this warning.
    Warn(String),
    /// The call is refused with this message (catchable).
    Critical(String),
    /// The run fails with this message.
    Breaker(String),
}

/// A session's recent nested calls. Serializable, so a fleet of replicas shares one session's
/// history through its snapshot store (the fingerprints are the same in every replica of one build).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct History {
    calls: VecDeque<Call>,
}

impl History {
    /// Judges a call of `tool_id` with `input` (then records it under `key`).
    pub fn check(&mut self, config: &LoopConfig, key: u64, tool_id: &str, input: &Value) -> Verdict {
        // A call checked again (approved after it parked, or issued again) counts once: its earlier
        // record goes, and it is judged at its newest place.
        if let Some(at) = self.calls.iter().position(|c| c.key == key) {
            self.calls.remove(at);
        }
        if !config.enabled {
            return Verdict::Ok;
        }
        let signature = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            tool_id.hash(&mut h);
            fingerprint(input).hash(&mut h);
            h.finish()
        };
        let mut worst: Option<(u32, Detector)> = None;
        let mut consider = |count: u32, d: Detector| {
            if worst.is_none_or(|(c, _)| count > c) {
                worst = Some((count, d));
            }
        };
        // Counts include the call being judged.
        if config.generic_repeat {
            let n = self.calls.iter().filter(|c| c.signature == signature).count() as u32 + 1;
            consider(n, Detector::GenericRepeat);
        }
        // The newest output of this signature (a refused call inherits it: it made no progress).
        let last_output = self.calls.iter().rev().find(|c| c.signature == signature).and_then(|c| c.output);
        if config.poll_no_progress {
            // The latest calls with this signature, newest first: a run of identical outputs.
            let mut same = self.calls.iter().rev().filter(|c| c.signature == signature);
            let n = match same.next().and_then(|c| c.output) {
                None => 0,
                Some(first) => 1 + same.take_while(|c| c.output == Some(first)).count() as u32,
            };
            if n > 0 {
                consider(n + 1, Detector::PollNoProgress);
            }
        }
        if config.ping_pong {
            consider(self.ping_pong_len(signature), Detector::PingPong);
        }
        let refused = worst.is_some_and(|(count, _)| count >= config.critical);
        self.calls.push_back(Call { signature, output: if refused { last_output } else { None }, key });
        while self.calls.len() > config.history as usize {
            self.calls.pop_front();
        }
        let Some((count, detector)) = worst else { return Verdict::Ok };
        let what = match detector {
            Detector::GenericRepeat => format!("`{tool_id}` was called with the same input {count} times"),
            Detector::PollNoProgress => {
                format!("`{tool_id}` returned the same result {} times in a row for the same input", count - 1)
            }
            Detector::PingPong => {
                format!("calls alternate between two tools (here `{tool_id}`) with no new results, {count} calls long")
            }
        };
        let name = detector.name();
        if count >= config.breaker {
            Verdict::Breaker(format!(
                "loop detection ({name}): {what}; the circuit breaker (globalCircuitBreakerThreshold {}) stopped the run",
                config.breaker
            ))
        } else if count >= config.critical {
            Verdict::Critical(format!(
                "loop detection ({name}): {what}; the call was refused (criticalThreshold {}). Change the input or the approach",
                config.critical
            ))
        } else if count == config.warning {
            Verdict::Warn(format!(
                "loop detection ({name}) warning: {what} (warningThreshold {}); repeating it further will be refused at {}",
                config.warning, config.critical
            ))
        } else {
            Verdict::Ok
        }
    }

    /// Records the output of the call recorded under `key` (successful calls only).
    pub fn record_output(&mut self, key: u64, output: &Value) {
        if let Some(c) = self.calls.iter_mut().rev().find(|c| c.key == key) {
            c.output = Some(fingerprint(output));
        }
    }

    /// Length (including the new call) of an A/B/A/B tail ending in `signature`, where each side's
    /// completed outputs never changed.
    fn ping_pong_len(&self, signature: u64) -> u32 {
        let calls: Vec<&Call> = self.calls.iter().collect();
        let n = calls.len();
        if n < 1 || calls[n - 1].signature == signature {
            return 0;
        }
        let other = calls[n - 1].signature;
        let (mut len, mut expect) = (1u32, other);
        let (mut out_a, mut out_b): (Option<u64>, Option<u64>) = (None, None);
        for c in calls.iter().rev() {
            if c.signature != expect {
                break;
            }
            let slot = if expect == signature { &mut out_a } else { &mut out_b };
            match (c.output, *slot) {
                (Some(o), Some(prev)) if o != prev => break,
                (Some(o), None) => *slot = Some(o),
                _ => {}
            }
            len += 1;
            expect = if expect == signature { other } else { signature };
        }
        if len >= 4 { len } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn on(warning: u32, critical: u32, breaker: u32) -> LoopConfig {
        LoopConfig { enabled: true, warning, critical, breaker, ..LoopConfig::default() }
    }

    #[test]
    fn config_parses_with_agent_overrides() {
        let doc = json!({
            "tools": {"loopDetection": {"enabled": true, "warningThreshold": 3, "criticalThreshold": 5, "globalCircuitBreakerThreshold": 8, "historySize": 20, "detectors": {"pingPong": false}}},
            "agents": {"list": [{"id": "a", "tools": {"loopDetection": {"enabled": false}}}, {"id": "b", "tools": {"loopDetection": {"warningThreshold": 2}}}]}
        });
        let p = LoopPolicy::from_document(&doc).unwrap();
        assert_eq!((p.global.warning, p.global.critical, p.global.breaker, p.global.history), (3, 5, 8, 20));
        assert!(!p.global.ping_pong && p.global.generic_repeat);
        assert!(!p.for_agent(Some("a")).enabled);
        assert_eq!(p.for_agent(Some("b")).warning, 2);
        assert_eq!(p.for_agent(Some("b")).critical, 5, "inherits the global fields");
        assert_eq!(p.for_agent(None), &p.global);
        assert!(LoopPolicy::from_document(&json!({})).unwrap().is_off());
        for (bad, at) in [
            (json!({"tools": {"loopDetection": {"enabled": "yes"}}}), "tools.loopDetection.enabled"),
            (json!({"tools": {"loopDetection": {"warningThreshold": 0}}}), "tools.loopDetection.warningThreshold"),
            (
                json!({"tools": {"loopDetection": {"warningThreshold": 30, "criticalThreshold": 20}}}),
                "tools.loopDetection",
            ),
            (
                json!({"tools": {"loopDetection": {"detectors": {"other": true}}}}),
                "tools.loopDetection.detectors.other",
            ),
            (json!({"tools": {"loopDetection": {"colour": 1}}}), "tools.loopDetection.colour"),
        ] {
            assert_eq!(LoopPolicy::from_document(&bad).unwrap_err().path, at, "{bad}");
        }
        assert_eq!(
            LoopPolicy::from_document(&json!({"tools": {"loopDetection": {"historySize": 99999}}}))
                .unwrap()
                .global
                .history,
            MAX_HISTORY
        );
    }

    #[test]
    fn off_by_default() {
        let mut h = History::default();
        for i in 0..100 {
            assert_eq!(h.check(&LoopConfig::default(), i, "t", &json!({})), Verdict::Ok);
        }
    }

    #[test]
    fn generic_repeat_warns_then_refuses_then_breaks() {
        let c = LoopConfig { poll_no_progress: false, ping_pong: false, history: 50, ..on(3, 5, 7) };
        let mut h = History::default();
        let verdicts: Vec<Verdict> = (0..7).map(|i| h.check(&c, i, "plugin:x:t", &json!({"q": 1}))).collect();
        assert_eq!(verdicts[..2], [Verdict::Ok, Verdict::Ok]);
        assert!(matches!(verdicts[2], Verdict::Warn(ref m) if m.contains("genericRepeat") && m.contains("3 times")));
        assert_eq!(verdicts[3], Verdict::Ok, "one warning per crossing");
        assert!(matches!(verdicts[4], Verdict::Critical(_)));
        assert!(matches!(verdicts[5], Verdict::Critical(_)));
        assert!(matches!(verdicts[6], Verdict::Breaker(_)));
        // A different input is another signature.
        assert_eq!(h.check(&c, 99, "plugin:x:t", &json!({"q": 2})), Verdict::Ok);
    }

    /// Cycling the key order of one input is the same call to every detector (it used to
    /// be three "different" calls, so 300 identical calls ran under the default thresholds).
    #[test]
    fn key_order_does_not_evade_detection() {
        let c = LoopConfig { poll_no_progress: false, ping_pong: false, history: 50, ..on(3, 5, 7) };
        let orders = [
            serde_json::from_str::<Value>(r#"{"a":1,"b":{"x":[1,{"p":1,"q":2}],"y":2},"c":3}"#).unwrap(),
            serde_json::from_str::<Value>(r#"{"c":3,"a":1,"b":{"y":2,"x":[1,{"q":2,"p":1}]}}"#).unwrap(),
            serde_json::from_str::<Value>(r#"{"b":{"x":[1,{"p":1,"q":2}],"y":2},"c":3,"a":1}"#).unwrap(),
        ];
        assert_eq!(fingerprint(&orders[0]), fingerprint(&orders[1]));
        assert_eq!(fingerprint(&orders[0]), fingerprint(&orders[2]));
        let mut h = History::default();
        let verdicts: Vec<Verdict> = (0..7).map(|i| h.check(&c, i, "plugin:x:t", &orders[i as usize % 3])).collect();
        assert!(matches!(verdicts[2], Verdict::Warn(_)), "{verdicts:?}");
        assert!(matches!(verdicts[6], Verdict::Breaker(_)), "{verdicts:?}");
        // Still distinct: array order, values, and a key moved to another level.
        for (a, b) in [
            (json!([1, 2]), json!([2, 1])),
            (json!({"a": 1}), json!({"a": 2})),
            (json!({"a": {"b": 1}}), json!({"b": {"a": 1}})),
            (json!({"a": "1"}), json!({"a": 1})),
            (json!({}), json!([])),
        ] {
            assert_ne!(fingerprint(&a), fingerprint(&b), "{a} vs {b}");
        }
    }

    #[test]
    fn poll_without_progress_versus_progress() {
        let c = LoopConfig { generic_repeat: false, ping_pong: false, ..on(3, 4, 10) };
        let mut h = History::default();
        // A poll whose output changes each time is progress: never flagged.
        for i in 0..20 {
            assert_eq!(h.check(&c, i, "t", &json!({"job": 1})), Verdict::Ok);
            h.record_output(i, &json!({"done": i}));
        }
        // The same output again and again: flagged.
        let mut h = History::default();
        let mut out = Vec::new();
        for i in 0..5 {
            out.push(h.check(&c, i, "t", &json!({"job": 1})));
            h.record_output(i, &json!({"status": "running"}));
        }
        assert_eq!(out[..2], [Verdict::Ok, Verdict::Ok]);
        assert!(matches!(out[2], Verdict::Warn(ref m) if m.contains("knownPollNoProgress")));
        assert!(matches!(out[3], Verdict::Critical(_)));
    }

    #[test]
    fn ping_pong_needs_alternation_without_progress() {
        let c = LoopConfig { generic_repeat: false, poll_no_progress: false, history: 50, ..on(6, 8, 12) };
        let mut h = History::default();
        let mut out = Vec::new();
        for i in 0..8u64 {
            let tool = if i % 2 == 0 { "a" } else { "b" };
            out.push(h.check(&c, i, tool, &json!({})));
            h.record_output(i, &json!(tool));
        }
        assert!(out[..5].iter().all(|v| *v == Verdict::Ok), "{out:?}");
        assert!(matches!(out[5], Verdict::Warn(ref m) if m.contains("pingPong")), "{out:?}");
        assert!(matches!(out[7], Verdict::Critical(_)), "{out:?}");
        // Alternation whose results change is progress.
        let mut h = History::default();
        for i in 0..30u64 {
            let tool = if i % 2 == 0 { "a" } else { "b" };
            assert_eq!(h.check(&c, i, tool, &json!({})), Verdict::Ok);
            h.record_output(i, &json!(i));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// No false positive: calls whose inputs are all distinct never trip any detector, whatever
        /// the thresholds, tools and outputs.
        #[test]
        fn distinct_inputs_never_trip(
            tools in proptest::collection::vec(0u8..3, 1..120),
            outputs in proptest::collection::vec(0u8..2, 120),
            warning in 2u32..8,
        ) {
            let c = on(warning, warning + 2, warning + 4);
            let mut h = History::default();
            for (i, t) in tools.iter().enumerate() {
                let v = h.check(&c, i as u64, &format!("tool{t}"), &json!({ "n": i }));
                proptest::prop_assert_eq!(v, Verdict::Ok);
                h.record_output(i as u64, &json!(outputs[i]));
            }
        }

        /// Trips at the threshold: the same call with the same result is fine until the warning
        /// threshold, warns exactly there, is refused from the critical threshold, and breaks the
        /// run at the breaker.
        #[test]
        fn repeats_trip_exactly_at_the_thresholds(warning in 2u32..10, gap in 0u32..5, gap2 in 0u32..5, detector in 0u8..2) {
            let (critical, breaker) = (warning + gap + 1, warning + gap + 1 + gap2);
            let c = LoopConfig {
                generic_repeat: detector == 0,
                poll_no_progress: detector == 1,
                ping_pong: false,
                history: MAX_HISTORY,
                ..on(warning, critical, breaker)
            };
            let mut h = History::default();
            for n in 1..=breaker {
                let v = h.check(&c, u64::from(n), "plugin:x:poll", &json!({"job": 7}));
                h.record_output(u64::from(n), &json!({"status": "running"}));
                let expected = if n >= breaker { "breaker" } else if n >= critical { "critical" } else if n == warning { "warn" } else { "ok" };
                let got = match v { Verdict::Ok => "ok", Verdict::Warn(_) => "warn", Verdict::Critical(_) => "critical", Verdict::Breaker(_) => "breaker" };
                proptest::prop_assert_eq!(got, expected, "call {}", n);
            }
        }
    }
}
