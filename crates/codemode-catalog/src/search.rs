//! Ranking for `tools.search` (contract §7): BM25 over tool names, labels, descriptions, owners and ids,
//! with deterministic tie-breaks (catalog order).

use std::collections::HashMap;

const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Field weights: a term in the name counts three times, in the label twice.
const NAME_WEIGHT: f64 = 3.0;
const LABEL_WEIGHT: f64 = 2.0;
const TEXT_WEIGHT: f64 = 1.0;
/// Bonus for a query that is exactly a tool's name or id.
const EXACT_BONUS: f64 = 1000.0;

/// Splits text into lowercase search terms: on non-alphanumerics and camelCase boundaries, with a
/// light plural folding (`shipments` → `shipment`).
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && prev_lower && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
            cur.extend(c.to_lowercase());
        } else {
            prev_lower = false;
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out.into_iter().map(fold).collect()
}

fn fold(term: String) -> String {
    if term.len() > 3 && term.ends_with('s') && !term.ends_with("ss") {
        term[..term.len() - 1].to_string()
    } else {
        term
    }
}

/// The text fields of one document.
#[derive(Debug, Clone, Copy)]
pub struct DocFields<'a> {
    /// Tool name.
    pub name: &'a str,
    /// Catalog id.
    pub id: &'a str,
    /// Label, if any.
    pub label: Option<&'a str>,
    /// Description.
    pub description: &'a str,
    /// Owner (plugin id, server).
    pub owner: &'a str,
}

#[derive(Debug, Clone)]
struct Doc {
    tf: HashMap<String, f64>,
    len: f64,
    name: String,
    id: String,
}

/// A BM25 index over catalog entries; built once per catalog.
#[derive(Debug, Clone, Default)]
pub struct SearchIndex {
    docs: Vec<Doc>,
    df: HashMap<String, u32>,
    avg_len: f64,
}

impl SearchIndex {
    /// Builds the index; document `i` is the `i`-th item.
    pub fn build<'a>(docs: impl IntoIterator<Item = DocFields<'a>>) -> Self {
        let mut index = SearchIndex::default();
        for d in docs {
            let mut tf: HashMap<String, f64> = HashMap::new();
            let mut len = 0.0;
            let mut add = |text: &str, w: f64| {
                for t in tokenize(text) {
                    *tf.entry(t).or_default() += w;
                    len += w;
                }
            };
            add(d.name, NAME_WEIGHT);
            if let Some(l) = d.label {
                add(l, LABEL_WEIGHT);
            }
            add(d.description, TEXT_WEIGHT);
            add(d.owner, TEXT_WEIGHT);
            for t in tf.keys() {
                *index.df.entry(t.clone()).or_default() += 1;
            }
            index.docs.push(Doc { tf, len, name: d.name.to_lowercase(), id: d.id.to_lowercase() });
        }
        let n = index.docs.len().max(1) as f64;
        index.avg_len = index.docs.iter().map(|d| d.len).sum::<f64>() / n;
        index
    }

    /// Ranks documents for `query`; returns document indices, best first, at most `limit`.
    /// An empty query lists documents in catalog order.
    pub fn search(&self, query: &str, limit: usize) -> Vec<usize> {
        let terms = tokenize(query);
        let q = query.trim().to_lowercase();
        if terms.is_empty() && q.is_empty() {
            return (0..self.docs.len()).take(limit).collect();
        }
        let n = self.docs.len() as f64;
        let mut scored: Vec<(f64, usize)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let mut score = 0.0;
                for t in &terms {
                    if let Some(&f) = d.tf.get(t) {
                        let df = f64::from(self.df.get(t).copied().unwrap_or(0));
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        let norm = 1.0 - B + B * d.len / self.avg_len.max(1e-9);
                        score += idf * (f * (K1 + 1.0)) / (f + K1 * norm);
                    }
                }
                if !q.is_empty() && (d.name == q || d.id == q) {
                    score += EXACT_BONUS;
                }
                (score > 0.0).then_some((score, i))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(limit).map(|(_, i)| i).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc<'a>(name: &'a str, description: &'a str) -> DocFields<'a> {
        DocFields { name, id: name, label: None, description, owner: "demo" }
    }

    #[test]
    fn tokenizes_names() {
        assert_eq!(tokenize("demo_shipping_list"), ["demo", "shipping", "list"]);
        assert_eq!(tokenize("getWeatherForecasts"), ["get", "weather", "forecast"]);
        assert_eq!(tokenize("Read a LOCAL file!"), ["read", "a", "local", "file"]);
        assert_eq!(tokenize("class"), ["class"]);
    }

    #[test]
    fn ranks_name_matches_first_and_breaks_ties_by_order() {
        let idx = SearchIndex::build([
            doc("web_fetch", "Fetch a URL and return markdown."),
            doc("list_shipments", "List shipments with paid status and tonnage."),
            doc("message", "Send a message about shipments."),
            doc("read", "Read a local file."),
            doc("write", "Write a local file."),
        ]);
        assert_eq!(idx.search("list shipments", 3)[0], 1);
        assert_eq!(idx.search("local file", 5), vec![3, 4]);
        assert_eq!(idx.search("read", 5)[0], 3);
        assert!(idx.search("zebra", 5).is_empty());
        assert_eq!(idx.search("", 2), vec![0, 1]);
        assert_eq!(idx.search("message", 1), vec![2]);
    }
}
