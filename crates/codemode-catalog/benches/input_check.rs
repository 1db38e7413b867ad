//! The cost the input check adds to a nested call (goal ≤ 1 µs for a typical
//! three-field object): a valid input (the common path), and a refused one (which builds the
//! message), and of learning result types. `cargo bench -p codemode-catalog --bench input_check`.
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

/// What learning result types adds to a nested call — a result the learned type
/// already accepts (the common path: one walk, no allocation), and a first result (merge).
fn bench_observed(c: &mut Criterion) {
    use codemode_catalog::observed::Observed;
    let result = json!({ "id": "SHP-1002", "customerId": "C-02", "paid": false, "tons": 4.0, "tags": ["cold", "eu"] });
    let mut learned = Observed::default();
    learned.record(&result);
    c.bench_function("observed record, accepted 5-field result", |b| {
        b.iter(|| black_box(learned.record(black_box(&result))))
    });
    c.bench_function("observed record, first result", |b| {
        b.iter(|| {
            let mut fresh = Observed::default();
            black_box(fresh.record(black_box(&result)))
        })
    });
}

criterion_group!(benches, bench_input_check, bench_observed);
criterion_main!(benches);
