//! A deterministic catalog of realistic tools for tests, snapshots and measurements: the core tools of
//! contract §22 followed by SaaS-style tools (issue trackers, chat, calendars, payments, …) from bundled
//! and external plugins, MCP servers and the client, with real-looking input schemas and, for some
//! trusted tools, closed output schemas.

use codemode_core::catalog::{ToolDefinition, ToolSource};
use serde_json::{Value, json};

const CORE: [(&str, &str); 24] = [
    ("exec", "Run a shell command."),
    ("process", "Manage background exec sessions: list, poll, log, write, kill."),
    ("read", "Read a file from the workspace."),
    ("write", "Write a file in the workspace."),
    ("edit", "Edit a file with exact string replacements."),
    ("apply_patch", "Apply a multi-hunk patch to files."),
    ("web_search", "Search the web."),
    ("web_fetch", "Fetch a URL and return markdown or text."),
    ("browser", "Control the managed browser: tabs, snapshot, screenshot, act, navigate."),
    ("canvas", "Present and evaluate on the node canvas."),
    ("nodes", "Paired nodes: notify, run, camera, screen, location."),
    ("image", "Analyze an image with the configured image model."),
    ("pdf", "Analyze PDF documents."),
    ("message", "Send messages and channel actions across chat channels."),
    ("cron", "Manage gateway cron jobs and wakeups."),
    ("gateway", "Restart or update the gateway; read and patch its config."),
    ("sessions_list", "List sessions."),
    ("sessions_history", "Read a session's history."),
    ("sessions_send", "Send a message to a session."),
    ("sessions_spawn", "Spawn a sub-agent session."),
    ("session_status", "Show the current session's status."),
    ("agents_list", "List agent ids that sessions_spawn may target."),
    ("memory_search", "Search long-term memory."),
    ("memory_get", "Read a memory entry."),
];

const DOMAINS: [(&str, &str); 25] = [
    ("github", "GitHub issue"),
    ("jira", "Jira ticket"),
    ("slack", "Slack message"),
    ("calendar", "calendar event"),
    ("drive", "Drive file"),
    ("gmail", "email thread"),
    ("notion", "Notion page"),
    ("linear", "Linear issue"),
    ("stripe", "Stripe invoice"),
    ("salesforce", "CRM opportunity"),
    ("zendesk", "support ticket"),
    ("hubspot", "HubSpot contact"),
    ("datadog", "Datadog monitor"),
    ("pagerduty", "PagerDuty incident"),
    ("sentry", "Sentry error event"),
    ("figma", "Figma file"),
    ("asana", "Asana task"),
    ("trello", "Trello card"),
    ("shopify", "Shopify order"),
    ("twilio", "SMS message"),
    ("aws", "AWS resource"),
    ("postgres", "database row"),
    ("docker", "container"),
    ("k8s", "Kubernetes deployment"),
    ("confluence", "Confluence page"),
];

const VERBS: [&str; 8] = ["list", "get", "create", "update", "delete", "search", "comment", "export"];

fn core_schema(name: &str) -> Value {
    match name {
        "exec" => {
            json!({"type": "object", "properties": {"command": {"type": "string"}, "yieldMs": {"type": "integer"}, "timeout": {"type": "integer"}, "background": {"type": "boolean"}}, "required": ["command"]})
        }
        "read" => {
            json!({"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"}}, "required": ["path"]})
        }
        "write" => {
            json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]})
        }
        "web_search" => {
            json!({"type": "object", "properties": {"query": {"type": "string"}, "count": {"type": "integer", "minimum": 1, "maximum": 10}}, "required": ["query"]})
        }
        "web_fetch" => {
            json!({"type": "object", "properties": {"url": {"type": "string"}, "maxChars": {"type": "integer"}}, "required": ["url"]})
        }
        "message" => {
            json!({"type": "object", "properties": {"action": {"enum": ["send", "react", "edit", "delete"]}, "to": {"type": "string"}, "text": {"type": "string"}}, "required": ["action"]})
        }
        _ => json!({"type": "object", "properties": {"id": {"type": "string"}, "options": {"type": "object"}}}),
    }
}

fn verb_schema(verb: &str, noun: &str) -> Value {
    let id = json!({"type": "string", "description": format!("The {noun}'s id")});
    match verb {
        "list" => {
            json!({"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}, "cursor": {"type": "string"}, "query": {"type": "string"}, "state": {"enum": ["open", "closed", "all"]}}})
        }
        "get" | "delete" => json!({"type": "object", "properties": {"id": id}, "required": ["id"]}),
        "create" => {
            json!({"type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"}, "labels": {"type": "array", "items": {"type": "string"}}, "assignee": {"type": "string"}}, "required": ["title"]})
        }
        "update" => {
            json!({"type": "object", "properties": {"id": id, "fields": {"type": "object"}}, "required": ["id", "fields"]})
        }
        "search" => {
            json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]})
        }
        "comment" => {
            json!({"type": "object", "properties": {"id": id, "text": {"type": "string"}}, "required": ["id", "text"]})
        }
        _ => {
            json!({"type": "object", "properties": {"format": {"enum": ["csv", "json"]}, "since": {"type": "string", "format": "date"}}})
        }
    }
}

fn item_schema() -> Value {
    json!({"type": "object", "additionalProperties": false,
           "properties": {"id": {"type": "string"}, "title": {"type": "string"}, "state": {"enum": ["open", "closed"]}, "updatedAt": {"type": "string"}},
           "required": ["id", "title", "state"]})
}

/// The first `n` tools of the fixture sequence (core tools, then domain tools; beyond 224 tools the
/// domains repeat with a numeric suffix, e.g. `github2`).
pub fn realistic(n: usize) -> Vec<ToolDefinition> {
    let mut out: Vec<ToolDefinition> = CORE
        .iter()
        .map(|(name, desc)| {
            ToolDefinition::new(ToolSource::Openclaw, "core", *name)
                .with_description(*desc)
                .with_parameters(core_schema(name))
        })
        .collect();
    let mut round = 1;
    while out.len() < n {
        for (d, (domain, noun)) in DOMAINS.iter().enumerate() {
            let owner = if round == 1 { domain.to_string() } else { format!("{domain}{round}") };
            let (source, external) = match d {
                0..=9 => (ToolSource::Plugin, false),
                10..=14 => (ToolSource::Plugin, true),
                15..=19 => (ToolSource::Mcp, false),
                _ => (ToolSource::Client, false),
            };
            for verb in VERBS {
                let name = format!("{owner}_{verb}");
                let desc = match verb {
                    "list" => format!(
                        "List {noun}s, newest first, with optional filters and pagination. Returns at most `limit` items and a nextCursor when more exist."
                    ),
                    "get" => {
                        format!("Get one {noun} by id with all its fields, including timestamps, state and assignee.")
                    }
                    "create" => {
                        format!("Create a {noun}. Returns the created {noun} with its id. Requires write access.")
                    }
                    "update" => format!(
                        "Update fields of an existing {noun}. Only the given fields change. Requires write access."
                    ),
                    "delete" => format!("Delete a {noun} by id. This cannot be undone. Requires admin access."),
                    "search" => format!("Full-text search over {noun}s the caller can see, ranked by relevance."),
                    "comment" => format!("Add a comment to a {noun}. Mentions with @name notify those users."),
                    _ => format!("Export {noun}s as CSV or JSON for reporting; large exports are paginated."),
                };
                let mut def = ToolDefinition::new(source, owner.clone(), name)
                    .with_description(desc)
                    .with_label(format!("{} {}", verb, noun))
                    .with_parameters(verb_schema(verb, noun));
                def.external = external;
                def.read_only = matches!(verb, "list" | "get" | "search" | "export");
                if d % 3 == 0 && (verb == "get" || verb == "list") {
                    def.output_schema = Some(if verb == "get" {
                        item_schema()
                    } else {
                        json!({"type": "array", "items": item_schema()})
                    });
                }
                out.push(def);
            }
        }
        round += 1;
    }
    out.truncate(n);
    out
}

/// [`realistic`]`(n)` plus the two special cases activation and the catalog must handle: a direct-only
/// core tool (`computer`) and a Tool Search control tool (`tool_search`).
pub fn realistic_with_special_tools(n: usize) -> Vec<ToolDefinition> {
    let mut tools = realistic(n);
    let mut computer = ToolDefinition::new(ToolSource::Openclaw, "core", "computer");
    computer.direct_only = true;
    tools.push(computer);
    tools.push(ToolDefinition::new(ToolSource::Openclaw, "core", "tool_search"));
    tools
}
