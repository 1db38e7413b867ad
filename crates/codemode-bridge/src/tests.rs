//! Unit tests of `src` (kept beside it so the module itself reads as one concern).

use super::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The string literals of the prelude's `const NAME = [ ... ];` array.
fn prelude_list(name: &str) -> Vec<String> {
    let start = PRELUDE.find(&format!("const {name} = [")).unwrap_or_else(|| panic!("{name} not in the prelude"));
    let body = &PRELUDE[start..];
    let body = &body[body.find('[').unwrap() + 1..body.find("];").unwrap()];
    body.split(',').map(|s| s.trim().trim_matches('"').to_string()).filter(|s| !s.is_empty()).collect()
}

/// The build script's digest is of `PRELUDE` exactly: a layer joined in another order, left out
/// of `PRELUDE`, or kept elsewhere fails here (the quickjs-wasi build id and module cache rely
/// on it changing with every prelude change).
#[test]
fn the_built_prelude_digest_is_of_the_prelude() {
    use sha2::Digest as _;
    let digest: String = sha2::Sha256::digest(PRELUDE.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(PRELUDE_SHA256, digest);
}

/// Error positions on a cell's first line are shifted back by the prefix's length, and the cell
/// ends on its own line (a trailing `//` comment must not swallow the closing brace).
#[test]
fn the_wrapper_prefix_is_as_long_as_positions_assume() {
    let wrapped = wrap_code("return 1 // done");
    let (prefix, rest) = wrapped.split_at(wrapped.find("return").unwrap_or(0));
    assert_eq!(prefix.chars().count() as u32, codemode_core::positions::WRAP_PREFIX_COLS);
    assert!(!prefix.contains('\n') && !prefix.starts_with('('), "{prefix:?}");
    assert_eq!(rest, "return 1 // done\n}");
}

#[test]
fn prelude_lists_equal_the_rust_ones() {
    assert_eq!(prelude_list("JS_INTERNAL_NAMES"), codemode_core::guest::JS_INTERNAL_NAMES);
    assert_eq!(prelude_list("RESERVED"), RESERVED_GLOBALS);
    assert_eq!(prelude_list("NS_HELPERS"), codemode_core::guest::MCP_NAMESPACE_HELPERS);
}

#[test]
fn the_prelude_pulls_with_the_keys_the_host_answers() {
    use pull_keys::*;
    for key in
        [ALL_TOOLS, CONVENIENCE, CONVENIENCES, API_LIST, API_FILE, MCP_TOOLS, MCP_SERVER, MCP_SERVERS, GATED, MCP_TOOL]
    {
        let pulled =
            ["pull", "pullJson", "pullList", "lazyJson"].iter().any(|f| PRELUDE.contains(&format!("{f}(\"{key}\"")));
        assert!(pulled, "the prelude never pulls `{key}`");
    }
}

/// The convenience answer's head, completed with an input and `}`, is the call the prelude's own
/// `callHead` would have written: the same request, whatever characters the id holds.
#[test]
fn a_convenience_answer_heads_the_call_message_of_its_tool() {
    for (id, gated) in [("plugin:demo:demo_echo", false), ("mcp:a\"b\\c\n\u{1f}é𝄞", true), ("", false)] {
        let answer = convenience_answer(id, gated);
        assert_eq!(&answer[..1], if gated { "1" } else { "0" });
        let message = format!("{}{{\"i\":1}}}}", &answer[1..]);
        let request =
            codemode_core::guest::GuestRequest::parse_tool_call(codemode_core::engine::RequestKind::Call, &message)
                .expect("a call")
                .expect("parses");
        assert_eq!(
            request,
            codemode_core::guest::GuestRequest::Call {
                id: id.to_owned(),
                input: json!({"i": 1}),
                mode: codemode_core::guest::CallMode::Value,
                line: None
            },
            "{message}"
        );
    }
}

/// A server's name is delimited by its length, so no server name and tool name can be read as
/// another pair (`a` + `bt` against `ab` + `t`), whatever characters they hold.
#[test]
fn an_mcp_member_key_names_its_server_unambiguously() {
    let server = |name: &str, tool: &str| codemode_core::guest::McpServerView {
        name: name.into(),
        alias: None,
        tools: vec![codemode_core::guest::McpToolView { name: tool.into(), alias: None, explicit: false }],
        resources: false,
        prompts: false,
        down: None,
    };
    let boot = BootData {
        mcp: vec![server("a", "bt"), server("ab", "t"), server("𝄞", "t")],
        max_depth: 64,
        ..BootData::default()
    };
    let source = BootText::new(&boot).source();
    let head = |k: &str| source.pull(k).map(|s| serde_json::from_str::<Value>(&s).unwrap()["head"].clone());
    assert_eq!(head("mcptool:1:abt"), Some(json!(r#"{"server":"a","tool":"bt","input":"#)));
    assert_eq!(head("mcptool:2:abt"), Some(json!(r#"{"server":"ab","tool":"t","input":"#)));
    assert_eq!(head("mcptool:2:𝄞t"), Some(json!(r#"{"server":"𝄞","tool":"t","input":"#)));
    // One unit of a two-unit character is no boundary.
    assert_eq!(head("mcptool:1:𝄞t"), None);
    assert_eq!(utf16_offset("é𝄞x", 3), Some("é𝄞".len()));
    assert_eq!(utf16_offset("é𝄞x", 4), Some("é𝄞x".len()));
    assert_eq!(utf16_offset("é𝄞x", 5), None);
}

#[test]
fn boot_head_is_small_and_the_catalog_is_pulled_by_key() {
    let mut api_files = BTreeMap::new();
    api_files.insert("mcp/x.d.ts".to_string(), "/** café → 𝄞 */\ndeclare namespace MCP.x {}\n".to_string());
    let boot = BootData {
        tools: vec![],
        conveniences: vec![("demo_echo".into(), "plugin:demo:demo_echo".into())],
        max_depth: 64,
        api_files: api_files.clone(),
        mcp: vec![codemode_core::guest::McpServerView {
            name: "x".into(),
            alias: None,
            tools: vec![codemode_core::guest::McpToolView {
                name: "über-tool".into(),
                alias: Some("überTool".into()),
                explicit: false,
            }],
            resources: false,
            prompts: true,
            down: None,
        }],
        gated: vec!["plugin:demo:demo_echo".into(), "mcp:x:über-tool".into()],
        namespaces: vec![],
    };
    let cached = BootText::new(&boot);
    assert!(std::sync::Arc::ptr_eq(&cached.with_namespaces(&[]), &cached.with_namespaces(&[])), "shared when empty");
    let head: Value = serde_json::from_str(&cached.with_namespaces(&[])).unwrap();
    assert_eq!(head, json!({"maxDepth": 64}));
    let source = cached.source();
    let pull = |k: &str| source.pull(k).map(|s| s.to_string());
    assert_eq!(pull("tools").as_deref(), Some("[]"));
    // Gated (the boot data gates it), then the call message up to the input.
    assert_eq!(pull("conv:demo_echo").as_deref(), Some(r#"1{"id":"plugin:demo:demo_echo","mode":"value","input":"#));
    assert_eq!(pull("conv:exec"), None);
    assert_eq!(pull("convs").as_deref(), Some(r#"[["demo_echo","plugin:demo:demo_echo"]]"#));
    assert_eq!(pull("api:mcp/x.d.ts"), Some(api_files["mcp/x.d.ts"].clone()));
    assert_eq!(pull("api:mcp/y.d.ts"), None);
    let list: Value = serde_json::from_str(&pull("apiList").unwrap()).unwrap();
    assert_eq!(list, json!([{"path": "mcp/x.d.ts", "bytes": api_files["mcp/x.d.ts"].len()}]));
    let tools: Value = serde_json::from_str(&pull("mcp:x").unwrap()).unwrap();
    assert_eq!(tools, json!([{ "name": "über-tool", "alias": "überTool" }]));
    let server = json!({"name": "x", "alias": null, "resources": false, "prompts": true});
    assert_eq!(serde_json::from_str::<Value>(&pull("mcpserver:x").unwrap()).unwrap(), server);
    assert_eq!(serde_json::from_str::<Value>(&pull("mcpservers").unwrap()).unwrap(), json!([server]));
    assert_eq!(pull("mcpserver:y"), None);
    let server = json!({"name": "x", "alias": null, "resources": false, "prompts": true});
    assert_eq!(serde_json::from_str::<Value>(&pull("mcpserver:x").unwrap()).unwrap(), server);
    assert_eq!(serde_json::from_str::<Value>(&pull("mcpservers").unwrap()).unwrap(), json!([server]));
    assert_eq!(pull("mcpserver:y"), None);
    assert_eq!(pull("gated:plugin:demo:demo_echo").as_deref(), Some("1"));
    assert_eq!(pull("gated:plugin:demo:other"), None);
    // An MCP tool by its exact name or its alias: its entry, its gating and its call head.
    let member = json!({
        "name": "über-tool",
        "alias": "überTool",
        "explicit": false,
        "gated": true,
        "head": r#"{"server":"x","tool":"über-tool","input":"#,
    });
    for key in ["mcptool:1:xüber-tool", "mcptool:1:xüberTool"] {
        assert_eq!(serde_json::from_str::<Value>(&pull(key).unwrap()).unwrap(), member, "{key}");
    }
    for key in [
        "mcptool:1:xnope",
        "mcptool:1:yüber-tool",
        "mcptool:1:x",
        "mcptool:0:xüber-tool",
        "mcptool:2:xüber-tool",
        "mcptool:xüber-tool",
        "mcptool:99:xüber-tool",
        "mcptool:-1:xüber-tool",
    ] {
        assert_eq!(pull(key), None, "{key}");
    }
    for unknown in ["", "tool", "conv", "api", "mcp:", "__proto__"] {
        assert_eq!(pull(unknown), None, "{unknown}");
    }
    // The head names the per-run namespaces; their JSON texts follow it.
    let mut boot = boot;
    boot.namespaces = vec![codemode_core::namespace::GuestNamespace {
        id: "ns-é".into(),
        global_name: "Ship".into(),
        // A newline in the data is escaped in JSON: the first raw newline still ends the head.
        data: json!({"label": "𝄞 café\nsecond line", "list": null}),
        calls: vec![codemode_core::namespace::GuestNamespaceCall {
            path: "list".into(),
            tool_id: "plugin:demo:demo_shipping_list".into(),
        }],
    }];
    assert_eq!(
        split_boot(&cached.with_namespaces(&[])),
        (r#"{"maxDepth":64}"#, "", ""),
        "no namespaces: no index, no texts"
    );
    let text = boot_json(&boot);
    let (head, index, rest) = split_boot(&text);
    let head: Value = serde_json::from_str(head).unwrap();
    assert_eq!(head, json!({"maxDepth": 64}), "the head is the cached one");
    // The length counts UTF-16 code units (the guest slices a JS string), not bytes.
    assert_eq!(index, format!("Ship {}", rest.encode_utf16().count()));
    assert!(rest.len() > rest.encode_utf16().count());
    let inner: Value = serde_json::from_str(rest).unwrap();
    assert_eq!(inner, serde_json::to_value(&boot.namespaces[0]).unwrap());
    // A name the index cannot carry is written empty, and its text still takes its place.
    let two = cached.with_namespace_texts([("A b", "{}"), ("C", "[1]")].into_iter());
    assert_eq!(split_boot(&two), (r#"{"maxDepth":64}"#, " 2 C 3", "{}[1]"));
    // The same namespaces again get the very text written last (shared, not rewritten), by any
    // clone; any difference in a name, a text or their number writes a new one.
    let again = cached.clone().with_namespace_texts([("A b", "{}"), ("C", "[1]")].into_iter());
    assert!(std::sync::Arc::ptr_eq(&two, &again));
    for (pairs, index, texts) in [
        (&[("A b", "{}"), ("C", "[2]")][..], " 2 C 3", "{}[2]"),
        (&[("A b", "{}"), ("D", "[2]")][..], " 2 D 3", "{}[2]"),
        (&[("A b", "{}")][..], " 2", "{}"),
        (&[("A b", "{}"), ("D", "[2]"), ("E", "é")][..], " 2 D 3 E 1", "{}[2]é"),
    ] {
        let written = cached.with_namespace_texts(pairs.iter().copied());
        assert_eq!(split_boot(&written), (r#"{"maxDepth":64}"#, index, texts), "{pairs:?}");
        assert!(!std::sync::Arc::ptr_eq(&two, &written));
    }
    // Runs on several threads at once, each with namespaces of its own (the one kept text
    // changing under them all the time), each get the text of exactly their namespaces.
    std::thread::scope(|s| {
        for t in 0..4 {
            let cached = cached.clone();
            s.spawn(move || {
                for i in 0..500 {
                    let text = format!("[{t},{}]", i % 3);
                    let pairs = [("A", "{}"), ("T", text.as_str())];
                    let written = cached.with_namespace_texts(pairs.into_iter());
                    let index = format!("A 2 T {}", text.len());
                    assert_eq!(split_boot(&written), (r#"{"maxDepth":64}"#, index.as_str(), &*format!("{{}}{text}")));
                }
            });
        }
    });
}

#[test]
fn head_max_depth_reads_only_the_head_boot_text_writes() {
    let boot = BootData { max_depth: 64, ..BootData::default() };
    let text = boot_json(&boot);
    assert_eq!(head_max_depth(split_boot(&text).0), Some(64), "the head BootText writes");
    for (head, want) in [(r#"{"maxDepth":0}"#, Some(0)), (r#"{"maxDepth":999999999}"#, Some(999_999_999))] {
        assert_eq!(head_max_depth(head), want, "{head}");
    }
    // Anything else goes to the prelude as text, which parses it.
    for head in [
        "{}",
        r#"{"maxDepth":}"#,
        r#"{"maxDepth":064}"#,
        r#"{"maxDepth":1000000000}"#,
        r#"{"maxDepth":-1}"#,
        r#"{"maxDepth":6.5}"#,
        r#"{"maxDepth":64,"x":1}"#,
        r#"{"maxDepth": 64}"#,
        r#"{"maxDepth":64} "#,
    ] {
        assert_eq!(head_max_depth(head), None, "{head}");
    }
}
