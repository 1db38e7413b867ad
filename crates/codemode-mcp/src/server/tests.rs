//! Unit tests of `server` (kept beside it so the module itself reads as one concern).

use super::*;

/// The guard inspects the payload itself, and refuses anything but exactly `exec`
/// and `wait` (an extra tool, a missing one, a renamed one).
#[test]
fn the_payload_guard_refuses_any_other_list() {
    let tool = |name: &str| {
        rmcp_tool(ModelTool { name: name.into(), description: String::new(), input_schema: serde_json::json!({}) })
    };
    assert!(guard_payload(&[tool("exec"), tool("wait")]).is_ok());
    assert!(guard_payload(&[tool("wait"), tool("exec")]).is_ok());
    for bad in [
        vec![tool("exec")],
        vec![tool("exec"), tool("wait"), tool("read_file")],
        vec![tool("exec"), tool("Wait")],
        vec![],
    ] {
        let e = guard_payload(&bad).unwrap_err();
        assert_eq!(e.code, Some(codemode::CodeModeErrorCode::InternalError));
        assert!(e.message.contains("failing closed"), "{}", e.message);
    }
}
