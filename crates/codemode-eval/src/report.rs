//! The report of an evaluation: a JSON file (every episode, every check), a Markdown table (per
//! task and arm, and totals per arm), and an SVG plot of tokens and turns per task for each arm.
//! It names the model that produced it; the oracle's numbers are labelled floors.

use crate::episode::EpisodeResult;
use crate::suite::{Arm, Kind};
use crate::tokens::TOKENIZER;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Sums of one arm over the suite.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ArmTotals {
    /// Episodes run.
    pub episodes: u32,
    /// Episodes whose checks all passed.
    pub passed: u32,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Model turns.
    pub turns: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Bytes of tool results in the context.
    pub result_bytes: u64,
    /// Milliseconds from first turn to answer.
    pub wall_ms: u64,
}

/// Sums of one kind of task in one arm.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KindTotals {
    /// The kind.
    pub kind: Kind,
    /// The arm.
    pub arm: Arm,
    /// The sums.
    #[serde(flatten)]
    pub totals: ArmTotals,
}

impl ArmTotals {
    /// The Markdown cells `passed | input tokens | … | wall ms` of a totals row.
    fn cells(&self) -> String {
        format!(
            "{}/{} | {} | {} | {} | {} | {} | {}",
            self.passed,
            self.episodes,
            self.input_tokens,
            self.output_tokens,
            self.turns,
            self.tool_calls,
            self.result_bytes,
            self.wall_ms
        )
    }

    fn add(&mut self, e: &EpisodeResult) {
        self.episodes += 1;
        self.passed += u32::from(e.passed);
        self.input_tokens += e.input_tokens;
        self.output_tokens += e.output_tokens;
        self.turns += u64::from(e.turns);
        self.tool_calls += u64::from(e.tool_calls);
        self.result_bytes += e.result_bytes;
        self.wall_ms += e.wall_ms;
    }
}

/// A whole evaluation.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The model that produced it.
    pub model: String,
    /// Whether that model is the oracle (its numbers are floors, not accuracy).
    pub oracle: bool,
    /// The tokenizer the counts come from, and what they mean.
    pub tokenizer: String,
    /// codemode's version.
    pub codemode_version: String,
    /// The arms run.
    pub arms: Vec<Arm>,
    /// Sums per arm.
    pub totals: BTreeMap<Arm, ArmTotals>,
    /// Sums per kind of task and arm.
    pub by_kind: Vec<KindTotals>,
    /// Every episode.
    pub episodes: Vec<EpisodeResult>,
}

impl Report {
    /// A report of `episodes`.
    pub fn new(model: String, oracle: bool, arms: Vec<Arm>, episodes: Vec<EpisodeResult>) -> Report {
        let mut totals: BTreeMap<Arm, ArmTotals> = arms.iter().map(|a| (*a, ArmTotals::default())).collect();
        let mut kinds: BTreeMap<(Kind, Arm), ArmTotals> = BTreeMap::new();
        for e in &episodes {
            totals.entry(e.arm).or_default().add(e);
            kinds.entry((e.kind, e.arm)).or_default().add(e);
        }
        let by_kind = kinds.into_iter().map(|((kind, arm), totals)| KindTotals { kind, arm, totals }).collect();
        let tokenizer = format!(
            "{TOKENIZER} (tiktoken, the GPT-4o family's tokenizer) over every turn's whole request as JSON: an approximation of what a provider bills, a looser one for models whose tokenizer is not public"
        );
        Report {
            model,
            oracle,
            tokenizer,
            codemode_version: env!("CARGO_PKG_VERSION").into(),
            arms,
            totals,
            by_kind,
            episodes,
        }
    }

    /// Every episode passed.
    pub fn all_passed(&self) -> bool {
        self.episodes.iter().all(|e| e.passed)
    }

    /// The failed episodes, as `task/arm: why`.
    pub fn failures(&self) -> Vec<String> {
        self.episodes
            .iter()
            .filter(|e| !e.passed)
            .map(|e| {
                let why = e.error.clone().unwrap_or_else(|| {
                    e.checks.iter().filter(|c| !c.passed).map(|c| c.why.clone()).collect::<Vec<_>>().join("; ")
                });
                format!("{}/{}: {why}", e.task, e.arm.name())
            })
            .collect()
    }

    /// The JSON file.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The Markdown table.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# codemode eval\n");
        let _ = writeln!(md, "- Model: **{}**", self.model);
        if self.oracle {
            let _ = writeln!(
                md,
                "- These are **floors**: the oracle replays a recorded minimal trajectory per arm against the real servers. They show what each arm costs at best and that every task is solvable in every arm; they are not a model's accuracy."
            );
        }
        let _ = writeln!(md, "- Tokens: {}", self.tokenizer);
        let _ = writeln!(md, "- codemode {}\n", self.codemode_version);
        let _ = writeln!(md, "## Totals\n");
        let _ = writeln!(
            md,
            "| arm | passed | input tokens | output tokens | turns | tool calls | result bytes | wall ms |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for (arm, t) in &self.totals {
            let _ = writeln!(md, "| {} | {} |", arm.name(), t.cells());
        }
        let _ = writeln!(md, "\n## By kind of task\n");
        let _ = writeln!(
            md,
            "| kind | arm | passed | input tokens | output tokens | turns | tool calls | result bytes | wall ms |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for k in &self.by_kind {
            let _ = writeln!(md, "| {:?} | {} | {} |", k.kind, k.arm.name(), k.totals.cells());
        }
        let _ = writeln!(md, "\n## Per task\n");
        let _ = writeln!(
            md,
            "| task | kind | arm | pass | input tokens | output tokens | turns | calls | result bytes | wall ms |"
        );
        let _ = writeln!(md, "|---|---|---|:-:|---:|---:|---:|---:|---:|---:|");
        for e in &self.episodes {
            let _ = writeln!(
                md,
                "| {} | {:?} | {} | {} | {} | {} | {} | {} | {} | {} |",
                e.task,
                e.kind,
                e.arm.name(),
                if e.passed { "✓" } else { "✗" },
                e.input_tokens,
                e.output_tokens,
                e.turns,
                e.tool_calls,
                e.result_bytes,
                e.wall_ms
            );
        }
        let failures = self.failures();
        if !failures.is_empty() {
            let _ = writeln!(md, "\n## Failures\n");
            for f in failures {
                let _ = writeln!(md, "- {}", f.replace('|', "\\|"));
            }
        }
        md
    }

    /// The plot: input tokens (top) and model turns (bottom) per task, one bar per arm.
    pub fn to_svg(&self) -> String {
        let mut tasks: Vec<&str> = Vec::new();
        for e in &self.episodes {
            if !tasks.contains(&e.task.as_str()) {
                tasks.push(&e.task);
            }
        }
        let value = |task: &str, arm: Arm, f: &dyn Fn(&EpisodeResult) -> f64| {
            self.episodes.iter().find(|e| e.task == task && e.arm == arm).map(f).unwrap_or(0.0)
        };
        let arms = &self.arms;
        let colors = ["#4e79a7", "#f28e2b", "#59a14f"];
        let group = 14.0 * arms.len().max(1) as f64 + 8.0;
        let (left, top, panel_h, gap, label_h) = (70.0, 40.0, 220.0, 60.0, 200.0);
        let width = left + group * tasks.len().max(1) as f64 + 120.0;
        let height = top + 2.0 * panel_h + gap + label_h;
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>"#
        );
        let title = format!("codemode eval — {}", self.model);
        let _ = write!(svg, r#"<text x="{left}" y="18" font-size="14">{}</text>"#, escape(&title));
        for (i, arm) in arms.iter().enumerate() {
            let x = left + 300.0 + i as f64 * 130.0;
            let _ = write!(
                svg,
                r#"<rect x="{x}" y="26" width="10" height="10" fill="{}"/><text x="{}" y="35">{}</text>"#,
                colors[i % colors.len()],
                x + 14.0,
                arm.name()
            );
        }
        let panels: [(&str, &Metric); 2] =
            [("input tokens", &|e| e.input_tokens as f64), ("model turns", &|e| f64::from(e.turns))];
        for (p, (label, f)) in panels.iter().enumerate() {
            let y0 = top + p as f64 * (panel_h + gap);
            let max = tasks
                .iter()
                .flat_map(|t| arms.iter().map(move |a| (t, a)))
                .map(|(t, a)| value(t, *a, *f))
                .fold(1.0, f64::max);
            let _ = write!(
                svg,
                r##"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/><text x="4" y="{:.1}">{label}</text><text x="4" y="{:.1}">{max:.0}</text>"##,
                y0 + panel_h,
                width - 120.0,
                y0 + panel_h,
                y0 + panel_h / 2.0,
                y0 + 10.0
            );
            for (ti, task) in tasks.iter().enumerate() {
                for (ai, arm) in arms.iter().enumerate() {
                    let v = value(task, *arm, *f);
                    let h = panel_h * v / max;
                    let x = left + ti as f64 * group + ai as f64 * 14.0;
                    let _ = write!(
                        svg,
                        r#"<rect x="{x:.1}" y="{:.1}" width="12" height="{h:.1}" fill="{}"><title>{} {}: {v:.0}</title></rect>"#,
                        y0 + panel_h - h,
                        colors[ai % colors.len()],
                        escape(task),
                        arm.name()
                    );
                }
            }
        }
        let base = top + 2.0 * panel_h + gap + 8.0;
        for (ti, task) in tasks.iter().enumerate() {
            let x = left + ti as f64 * group + group / 2.0;
            let _ = write!(
                svg,
                r#"<text x="{x:.1}" y="{base:.1}" transform="rotate(60 {x:.1} {base:.1})">{}</text>"#,
                escape(task)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// One plotted number of an episode.
type Metric = dyn Fn(&EpisodeResult) -> f64;

/// Text made safe for SVG/XML (task ids and model names come from files and the environment).
fn escape(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .map(|c| match c {
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&#39;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_markup() {
        assert_eq!(super::escape("<script>&\"'\u{7}"), "&lt;script&gt;&amp;&quot;&#39;");
    }
}
