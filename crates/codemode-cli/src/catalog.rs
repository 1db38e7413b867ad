//! `codemode catalog`: the effective catalog after policy — ids, sources, safe names, hints — what
//! the policy removed and why, the quick index, search results, and (with `--measure`) the size of
//! the model-visible tool list with code mode off and on.

use anyhow::Result;
use codemode::config_file::ConfigFile;
use codemode::surface::{ActivationRequest, ModelTool, activate, mcp_servers};
use codemode::{Catalog, CodeModeConfig, NamespaceRegistry, ToolDefinition};
use codemode_catalog::names::safe_name;
use codemode_catalog::quick_index::{QUICK_INDEX_MAX_CHARS, quick_index};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Options of `codemode catalog`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CatalogArgs {
    /// Configuration file (its `tools.*` / `agents.*` policy is applied).
    #[arg(long, value_name = "FILE", env = "CODEMODE_CONFIG")]
    config: Option<PathBuf>,
    /// Rank the catalog for this query, as `tools.search` would.
    #[arg(long, value_name = "QUERY")]
    search: Option<String>,
    /// Results of `--search`.
    #[arg(long, default_value_t = 8)]
    limit: usize,
    #[command(flatten)]
    policy: crate::PolicyArgs,
    /// Add N tools of the realistic fixture catalog (core, plugin, MCP and client tools) to the demo
    /// tools, e.g. to measure.
    #[arg(long, value_name = "N")]
    fixture: Option<usize>,
    /// Report the model-visible tool-list size with code mode off and on, and search latency.
    #[arg(long)]
    measure: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn bytes_of(tools: &[ModelTool]) -> usize {
    serde_json::to_string(tools).map(|s| s.len()).unwrap_or(0)
}

pub(crate) async fn run(args: CatalogArgs) -> Result<ExitCode> {
    let file = match &args.config {
        Some(p) => ConfigFile::load(p)?,
        None => ConfigFile { code_mode: CodeModeConfig::enabled(), ..ConfigFile::default() },
    };
    let target = args.policy.target();
    codemode_mcp::check_target(&file, &target)?;
    let mut tools: Vec<ToolDefinition> = codemode_demo::demo_tools().definitions();
    if let Some(n) = args.fixture {
        tools.extend(codemode_catalog::fixtures::realistic(n));
    }
    let hub = codemode_mcp::connect_servers(&file).await?;
    tools.extend(hub.tool_definitions());
    let statuses = hub.statuses();
    let down = hub.unavailable_servers();
    hub.shutdown().await;
    let cx = target.context();
    let outcome = file.policy.apply(tools.clone(), cx);
    let catalog = Catalog::build(outcome.kept.clone()).with_unavailable_mcp_servers(down);
    let index = quick_index(&catalog, QUICK_INDEX_MAX_CHARS);
    // The demo plugin's namespace and the file's declared ones, as a run of this catalog sees them.
    let namespaces = codemode_demo::demo_namespaces();
    file.register_namespaces(&namespaces)?;
    let visible = namespaces.visible(&catalog);
    let hidden: Vec<_> = namespaces.list().into_iter().filter(|n| !visible.iter().any(|v| v.id == n.id)).collect();

    let mut measure = serde_json::Value::Null;
    if args.measure {
        let direct: Vec<ModelTool> = outcome.kept.iter().map(ModelTool::direct).collect();
        let config = CodeModeConfig { enabled: true, ..file.code_mode.clone() };
        let req = ActivationRequest {
            tools: tools.clone(),
            policy_context: cx,
            engine_available: true,
            mcp_servers: mcp_servers(&outcome.kept),
            namespaces: Some(&namespaces),
            ..ActivationRequest::default()
        };
        let on = activate(&config, &file.policy, req)?;
        let (off_b, on_b) = (bytes_of(&direct), bytes_of(on.tools()));
        let queries = ["list open issues", "send a message", "read file", "create invoice", "search calendar events"];
        let mut samples: Vec<Duration> = Vec::new();
        for i in 0..500 {
            let q = queries[i % queries.len()];
            let t = Instant::now();
            std::hint::black_box(catalog.search(q, 8));
            samples.push(t.elapsed());
        }
        samples.sort();
        measure = json!({
            "tools": outcome.kept.len(),
            "directBytes": off_b,
            "directTokensApprox": off_b / 4,
            "codeModeBytes": on_b,
            "codeModeTokensApprox": on_b / 4,
            "reduction": if off_b > 0 { 1.0 - on_b as f64 / off_b as f64 } else { 0.0 },
            "searchMedianUs": samples[samples.len() / 2].as_secs_f64() * 1e6,
        });
    }

    let hits = args.search.as_deref().map(|q| catalog.search(q, args.limit.max(1)));
    if args.json {
        let entries: Vec<_> = catalog
            .tools()
            .iter()
            .map(|t| {
                json!({
                    "id": t.id, "source": t.def.source, "guestVisible": t.guest_visible,
                    "safeName": safe_name(&t.def.name), "input": t.entry.input, "output": t.entry.output,
                    "readOnly": t.def.read_only, "readOnlySource": read_only_source(&t.def),
                })
            })
            .collect();
        let removed: Vec<_> =
            outcome.removed.iter().map(|(id, r)| json!({ "id": id, "reason": r.to_string() })).collect();
        let nested: Vec<&str> = catalog
            .tools()
            .iter()
            .filter(|t| codemode_catalog::nested::is_nested_code_mode(&t.def))
            .map(|t| t.id.as_str())
            .collect();
        let out = json!({
            "catalog": entries,
            "nestedCodeModes": nested,
            "conveniences": catalog.conveniences(),
            "removed": removed,
            "warnings": outcome.warnings,
            "quickIndex": index.text,
            "search": hits,
            "measure": measure,
            "mcpServers": statuses,
            "namespaces": visible,
            "hiddenNamespaces": hidden,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    // Everything below may quote upstream servers (tool names, descriptions, errors): each value is
    // printed with control, line-break and bidi characters escaped, so a hostile
    // server cannot clear the operator's screen, move the cursor or forge or hide entries.
    let d = |s: &str| codemode::text::for_display(s).into_owned();
    println!("catalog: {} tools ({} in ALL_TOOLS)", catalog.len(), catalog.all_tools().len());
    for t in catalog.tools() {
        let conv = catalog
            .conveniences()
            .iter()
            .find(|(_, id)| *id == t.id)
            .map(|(n, _)| format!("tools.{n}"))
            .unwrap_or_else(|| "-".into());
        let view = if t.guest_visible { "" } else { " [not in tools.*]" };
        println!("  {:<48} {:<8} {:<28} {}{}", d(&t.id), t.def.source.as_str(), d(&conv), d(&t.entry.input), view);
        println!("  {:<48} {}", "", d(&read_only_source(&t.def)));
    }
    if !outcome.removed.is_empty() {
        println!("\nremoved by policy:");
        for (id, why) in &outcome.removed {
            println!("  {:<48} {}", d(id), d(&why.to_string()));
        }
    }
    for w in &outcome.warnings {
        println!("\nwarning: {}", d(w));
    }
    for t in catalog.tools().iter().filter(|t| codemode_catalog::nested::is_nested_code_mode(&t.def)) {
        println!("\nnested code mode: {}: {}", d(&t.id), codemode_catalog::nested::ADVICE);
    }
    for ns in &visible {
        println!(
            "\nnamespace {} ({}, owner {}): {}",
            d(&ns.global_name),
            d(&ns.id),
            d(&ns.owner.to_string()),
            d(&ns.description)
        );
        println!("  backing tools: {}", d(&ns.required_tools.join(", ")));
        if let Some(p) = &ns.prompt {
            println!("  prompt: {}", d(p));
        }
    }
    for ns in &hidden {
        println!(
            "\nnamespace {} ({}, owner {}): hidden — not every backing tool ({}) is in this catalog",
            d(&ns.global_name),
            d(&ns.id),
            d(&ns.owner.to_string()),
            d(&ns.required_tools.join(", "))
        );
    }
    for s in &statuses {
        println!(
            "\nMCP server {}: {} ({} tools){}",
            d(&s.name),
            s.state,
            s.tools,
            s.error.as_ref().map(|e| format!(": {}", d(e))).unwrap_or_default()
        );
    }
    let index_text: Vec<String> = index.text.lines().map(d).collect();
    println!("\nquick index ({} listed, {} omitted):\n{}", index.listed.len(), index.omitted, index_text.join("\n"));
    if let (Some(q), Some(hits)) = (&args.search, &hits) {
        println!("\nsearch {q:?}:");
        for h in hits {
            println!("  {}  {}", d(&h.id), d(&h.description));
        }
    }
    if !measure.is_null() {
        println!(
            "\nmodel-visible tool definitions for {} tools: direct {} bytes (~{} tokens), code mode {} bytes (~{} tokens): {:.1}% smaller; tools.search median {:.1} µs",
            measure["tools"],
            measure["directBytes"],
            measure["directTokensApprox"],
            measure["codeModeBytes"],
            measure["codeModeTokensApprox"],
            measure["reduction"].as_f64().unwrap_or(0.0) * 100.0,
            measure["searchMedianUs"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a tool is read-only and where that came from (for an upstream tool: the configuration,
/// or a trusted server's annotation).
fn read_only_source(def: &codemode::ToolDefinition) -> String {
    match &def.read_only_source {
        Some(source) => source.clone(),
        None if def.read_only => "read-only: declared by the host".to_string(),
        None => "side-effecting: declared by the host".to_string(),
    }
}
