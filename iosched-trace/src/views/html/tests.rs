//! The page's text: a trace path with markup in it stays text, and the data stays JSON.

use iosched_core::{
    analysis::{self, Options, bins::TimeBins},
    record::DeviceInfo,
    source::MemorySource,
};

use super::*;

#[test]
fn markup_in_names_cannot_close_the_script_or_title() {
    let mut src = MemorySource::new(vec![DeviceInfo::default()], Vec::new());
    let mut report = analysis::analyze(&mut src, &Options::default()).unwrap();
    report.trace.path = "</script><b>x&y".into();
    let bins = TimeBins::new(&Options::default(), 64);
    let page = render(&Page {
        report: &report,
        bins: &bins,
        idle: &[],
        latency: &[],
        model: None,
    })
    .unwrap();
    // The only closing script tags are the page's own two.
    assert_eq!(page.matches("</script>").count(), 2);
    assert!(page.contains("<title>iosched-trace report: &lt;/script&gt;&lt;b&gt;x&amp;y</title>"));
    let start = page.find(r#"id="data">"#).unwrap() + r#"id="data">"#.len();
    let end = start + page[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
    assert_eq!(data["report"]["trace"]["path"], "</script><b>x&y");
    assert_eq!(data["axis"]["bins"], 0);
}
