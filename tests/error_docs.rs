//! docs/errors.md is the index of error codes: every code in `Code::ALL` has a
//! `## EXXXX — summary` section, in code order, with the summary the
//! compiler uses, and there is no section for a code that does not exist.

use tfc::diag::Code;

fn docs() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/errors.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The `## ` headings of the file, in order.
fn headings(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("## ")).collect()
}

#[test]
fn every_error_code_has_a_section_with_its_summary() {
    let text = docs();
    let headings = headings(&text);
    for code in Code::ALL {
        let expected = format!("{} — {}", code.as_str(), code.summary());
        assert!(
            headings.contains(&expected.as_str()),
            "docs/errors.md has no heading `## {expected}` (add it, or update it to the summary in src/diag/code.rs)"
        );
    }
}

#[test]
fn sections_follow_code_order_and_name_only_real_codes() {
    let text = docs();
    let listed: Vec<&str> = headings(&text).iter().filter_map(|h| h.split_whitespace().next()).collect();
    let codes: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(listed, codes);
}

#[test]
fn every_section_has_an_example_and_a_fix() {
    let text = docs();
    for section in text.split("\n## ").skip(1) {
        let code = section.split_whitespace().next().unwrap_or_default();
        assert!(section.contains("```tfl\n"), "{code} has no ```tfl example");
        assert!(section.contains("**When.**"), "{code} does not say when it happens");
        assert!(section.contains("**Fix.**"), "{code} does not say how to fix it");
    }
}
