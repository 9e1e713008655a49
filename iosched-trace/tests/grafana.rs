//! docs/grafana/iosched-trace.json against docs/EXPORTER.md's metric table: the dashboard is
//! well-formed, takes its data source as the `DS_PROMETHEUS` input, and every PromQL
//! expression in it (panels and template variables) names only metrics of the table, with
//! only their labels, and every metric of the table is on some panel. A renamed metric fails
//! here, not on someone's screen.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use serde_json::Value;

fn repo_file(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Sample names the table allows (a histogram's `_bucket`, `_count`, `_sum`), each with its
/// labels.
fn documented_metrics() -> BTreeMap<String, BTreeSet<String>> {
    let doc = repo_file("docs/EXPORTER.md");
    let mut metrics = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `iosched_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (name, kind, labels) = (cells[1].trim_matches('`'), cells[2], cells[3]);
        let labels: BTreeSet<String> = labels
            .split(',')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        let names: Vec<String> = if kind == "histogram" {
            ["_bucket", "_count", "_sum"]
                .iter()
                .map(|s| format!("{name}{s}"))
                .collect()
        } else {
            vec![name.to_string()]
        };
        for n in names {
            let mut l = labels.clone();
            if n.ends_with("_bucket") {
                l.insert("le".to_string());
            }
            metrics.insert(n, l);
        }
    }
    assert!(metrics.len() >= 20, "the table was not read: {metrics:?}");
    metrics
}

/// What an expression uses: metric names, and label names (matchers and groupings).
#[derive(Debug, Default)]
struct Uses {
    metrics: BTreeSet<String>,
    /// (metric, label) for matchers; (`""`, label) for `by`/`without` groupings.
    labels: BTreeSet<(String, String)>,
}

/// A small PromQL reader: enough for selectors, functions, aggregations and groupings;
/// strings and range durations are skipped.
fn promql_uses(expr: &str) -> Uses {
    let chars: Vec<char> = expr.chars().collect();
    let mut uses = Uses::default();
    let mut i = 0;
    let ident = |i: &mut usize| {
        let start = *i;
        while *i < chars.len() && (chars[*i].is_ascii_alphanumeric() || "_:".contains(chars[*i])) {
            *i += 1;
        }
        chars[start..*i].iter().collect::<String>()
    };
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    let skip_string = |i: &mut usize| {
        *i += 1;
        while *i < chars.len() && chars[*i] != '"' {
            *i += if chars[*i] == '\\' { 2 } else { 1 };
        }
        *i += 1;
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            skip_string(&mut i);
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' {
            let word = ident(&mut i);
            skip_ws(&mut i);
            let next = chars.get(i).copied();
            if [
                "by",
                "without",
                "on",
                "ignoring",
                "group_left",
                "group_right",
            ]
            .contains(&word.as_str())
            {
                assert_eq!(next, Some('('), "{expr}: {word} without its labels");
                i += 1;
                loop {
                    skip_ws(&mut i);
                    let label = ident(&mut i);
                    if !label.is_empty() {
                        uses.labels.insert((String::new(), label));
                    }
                    skip_ws(&mut i);
                    match chars.get(i) {
                        Some(',') => i += 1,
                        Some(')') => {
                            i += 1;
                            break;
                        }
                        other => panic!("{expr}: unexpected {other:?} in {word}(...)"),
                    }
                }
            } else if next == Some('(')
                || [
                    "sum",
                    "min",
                    "max",
                    "avg",
                    "count",
                    "group",
                    "stddev",
                    "stdvar",
                    "topk",
                    "bottomk",
                    "quantile",
                    "count_values",
                    "and",
                    "or",
                    "unless",
                    "bool",
                    "offset",
                ]
                .contains(&word.as_str())
            {
                // A function, an aggregation (its grouping may come first), an operator.
            } else {
                uses.metrics.insert(word.clone());
                if next == Some('{') {
                    i += 1;
                    loop {
                        skip_ws(&mut i);
                        let label = ident(&mut i);
                        skip_ws(&mut i);
                        if label.is_empty() {
                            assert_eq!(chars.get(i), Some(&'}'), "{expr}: bad matcher");
                            i += 1;
                            break;
                        }
                        uses.labels.insert((word.clone(), label));
                        while i < chars.len() && "=!~".contains(chars[i]) {
                            i += 1;
                        }
                        skip_ws(&mut i);
                        assert_eq!(chars.get(i), Some(&'"'), "{expr}: matcher without value");
                        skip_string(&mut i);
                        skip_ws(&mut i);
                        if chars.get(i) == Some(&',') {
                            i += 1;
                        }
                    }
                }
            }
        } else {
            i += 1;
        }
    }
    uses
}

/// Every `expr` of every panel's targets (rows nest panels).
fn exprs(panels: &[Value], out: &mut Vec<(String, String)>) {
    for p in panels {
        let title = p["title"].as_str().unwrap_or("?").to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((title.clone(), t["expr"].as_str().unwrap().to_string()));
        }
        if let Some(inner) = p["panels"].as_array() {
            exprs(inner, out);
        }
    }
}

#[test]
fn the_promql_reader_finds_metrics_and_labels() {
    let u = promql_uses(
        r#"histogram_quantile(0.99, sum by (le, device) (rate(a_bucket{instance=~"$i", device!="x,}"}[$__rate_interval]))) / b"#,
    );
    assert_eq!(u.metrics, ["a_bucket", "b"].map(String::from).into());
    let labels: Vec<(&str, &str)> = u
        .labels
        .iter()
        .map(|(m, l)| (m.as_str(), l.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("", "device"),
            ("", "le"),
            ("a_bucket", "device"),
            ("a_bucket", "instance")
        ]
    );
}

#[test]
fn the_dashboard_uses_only_documented_metrics_and_all_of_them() {
    let documented = documented_metrics();
    let dash: Value = serde_json::from_str(&repo_file("docs/grafana/iosched-trace.json"))
        .expect("docs/grafana/iosched-trace.json is not JSON");
    let inputs = dash["__inputs"].as_array().unwrap();
    assert!(
        inputs
            .iter()
            .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus")
    );

    let mut all = Vec::new();
    exprs(dash["panels"].as_array().unwrap(), &mut all);
    for v in dash["templating"]["list"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        assert_eq!(
            v["datasource"]["uid"], "${DS_PROMETHEUS}",
            "variable {name}"
        );
        // label_values(SELECTOR, LABEL): the selector is PromQL, the label one of its own.
        let q = v["query"]["query"].as_str().unwrap();
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {name}: {q}"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        let uses = promql_uses(selector);
        for m in &uses.metrics {
            let labels = documented.get(m).unwrap_or_else(|| panic!("{q}: {m}"));
            assert!(
                labels.contains(label.trim()) || label.trim() == "instance",
                "{q}"
            );
        }
        all.push((format!("variable {name}"), selector.to_string()));
    }
    assert!(all.len() >= 20, "{all:?}");

    let mut ids = BTreeSet::new();
    let mut shown = BTreeSet::new();
    for p in dash["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel id twice");
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{}", p["title"]);
        }
    }
    // Labels every series has from the scrape itself.
    let scrape_labels = ["instance", "job"];
    for (title, expr) in &all {
        let uses = promql_uses(expr);
        assert!(!uses.metrics.is_empty(), "{title}: {expr} names no metric");
        let mut their_labels = BTreeSet::new();
        for m in &uses.metrics {
            let labels = documented.get(m).unwrap_or_else(|| {
                panic!("{title}: {expr}: {m} is not in docs/EXPORTER.md's table")
            });
            their_labels.extend(labels.iter().cloned());
            shown.insert(m.clone());
        }
        for (m, l) in &uses.labels {
            let known = if m.is_empty() {
                their_labels.contains(l)
            } else {
                documented[m].contains(l)
            };
            assert!(
                known || scrape_labels.contains(&l.as_str()),
                "{title}: {expr}: label {l} is not one of {}",
                if m.is_empty() { "the metrics'" } else { m }
            );
        }
    }
    // Every family is on the dashboard (a histogram through its buckets).
    let missing: Vec<&String> = documented
        .keys()
        .filter(|m| !m.ends_with("_count") && !m.ends_with("_sum") && !shown.contains(*m))
        .collect();
    assert!(missing.is_empty(), "not on any panel: {missing:?}");
}
