//! Issue 26 §2: the cost the input check adds to a nested call (goal ≤ 1 µs for a typical
//! three-field object): a valid input (the common path), and a refused one (which builds the
//! message). `cargo bench -p codemode-catalog --bench input_check`.
#![allow(missing_docs)]

use codemode_catalog::Catalog;
use codemode_core::catalog::{ToolDefinition, ToolSource};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;

fn bench_input_check(c: &mut Criterion) {
    let def = ToolDefinition::new(ToolSource::Mcp, "files", "search").with_parameters(json!({
        "type": "object",
        "properties": {
            "query": { "type": "string", "minLength": 1 },
            "limit": { "type": "integer", "minimum": 1, "maximum": 100 },
            "path": { "type": "string" }
        },
        "required": ["query"]
    }));
    let catalog = Catalog::build([def]);
    let tool = catalog.mcp_tool("files", "search").cloned().unwrap_or_else(|| panic!("tool"));
    let valid = json!({ "query": "invoices 2026", "limit": 20, "path": "/srv/docs" });
    let invalid = json!({ "query": "invoices 2026", "limit": "twenty", "path": "/srv/docs" });
    // Compiled on the first call, as in a run.
    let _ = tool.check_input(&valid);
    c.bench_function("input check, valid 3-field object", |b| {
        b.iter(|| black_box(tool.check_input(black_box(&valid))))
    });
    c.bench_function("input check, refused 3-field object", |b| {
        b.iter(|| black_box(tool.check_input(black_box(&invalid))))
    });
}

criterion_group!(benches, bench_input_check);
criterion_main!(benches);
