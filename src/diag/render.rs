//! Renders diagnostics to text with miette: source excerpts with labelled
//! spans, the code, help and notes. Colors only when asked (a terminal).

use super::{Diagnostic, FileId, Span};
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource};

/// The text of every file a session has read, by `FileId`.
#[derive(Default, Clone, Debug)]
pub struct SourceMap {
    files: Vec<(String, String)>,
}

impl SourceMap {
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    /// Adds a file and returns its id.
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        self.files.push((name.into(), text.into()));
        FileId((self.files.len() - 1) as u32)
    }

    pub fn name(&self, id: FileId) -> &str {
        self.files.get(id.0 as usize).map(|f| f.0.as_str()).unwrap_or("<unknown>")
    }

    pub fn text(&self, id: FileId) -> &str {
        self.files.get(id.0 as usize).map(|f| f.1.as_str()).unwrap_or("")
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, span: Span) -> (usize, usize) {
        let text = self.text(span.file);
        let upto = &text[..span.start.min(text.len())];
        let line = upto.matches('\n').count() + 1;
        let col = upto.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
        (line, col)
    }
}

#[derive(Debug)]
struct Rendered<'a> {
    diag: &'a Diagnostic,
    source: NamedSource<String>,
    labels: Vec<LabeledSpan>,
    notes: Option<String>,
}

impl std::fmt::Display for Rendered<'_> {
    /// `error[E0303]: message`, the form rustc users know; the code is part
    /// of the headline rather than miette's separate code line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error[{}]: {}", self.diag.code.as_str(), self.diag.message)
    }
}

impl std::error::Error for Rendered<'_> {}

impl miette::Diagnostic for Rendered<'_> {
    fn help<'b>(&'b self) -> Option<Box<dyn std::fmt::Display + 'b>> {
        match (&self.diag.help, &self.notes) {
            (None, None) => None,
            (Some(h), None) => Some(Box::new(h)),
            (None, Some(n)) => Some(Box::new(n)),
            (Some(h), Some(n)) => Some(Box::new(format!("{h}\n{n}"))),
        }
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(self.labels.clone().into_iter()))
    }
}

/// Source lines longer than this are not shown whole: a label on one is
/// shown as a note with its line and column and an excerpt around it (a
/// generated program with a megabyte line would otherwise print it all).
const LONG_LINE: usize = 240;

/// Renders each diagnostic (source excerpt, labels, help) one after another.
/// Labels outside the primary file, and labels on lines longer than
/// `LONG_LINE` bytes, become notes with file:line:col (the latter with an
/// excerpt around the span).
pub fn render(diags: &[Diagnostic], sources: &SourceMap, color: bool) -> String {
    let theme = if color { GraphicalTheme::unicode() } else { GraphicalTheme::unicode_nocolor() };
    let handler = GraphicalReportHandler::new_themed(theme).with_width(100);
    let mut out = String::new();
    for d in diags {
        let file = d.span().map(|s| s.file).unwrap_or_default();
        let mut notes: Vec<String> = d.notes.clone();
        let mut labels = Vec::new();
        let on_long_line = |s: Span| line_around(sources.text(s.file), s.start).len() > LONG_LINE;
        let long = d.labels.iter().any(|l| l.span.file == file && on_long_line(l.span));
        for (i, l) in d.labels.iter().enumerate() {
            if l.span.file == file && long {
                let (line, col) = sources.line_col(l.span);
                let excerpt = excerpt(sources.text(file), l.span);
                notes.push(format!("{}:{}:{}: {}\n{excerpt}", sources.name(file), line, col, l.message));
            } else if l.span.file == file {
                let text = if l.message.is_empty() { None } else { Some(l.message.clone()) };
                let span = clamp(l.span, sources.text(file).len());
                labels.push(if i == 0 {
                    LabeledSpan::new_primary_with_span(text, span)
                } else {
                    LabeledSpan::new_with_span(text, span)
                });
            } else {
                let (line, col) = sources.line_col(l.span);
                notes.push(format!("{}:{}:{}: {}", sources.name(l.span.file), line, col, l.message));
            }
        }
        let rendered = Rendered {
            diag: d,
            source: NamedSource::new(sources.name(file), sources.text(file).to_string()),
            labels,
            notes: if notes.is_empty() { None } else { Some(notes.join("\n")) },
        };
        if handler.render_report(&mut out, &rendered).is_err() {
            out.push_str(&format!("{d}\n"));
        }
    }
    out
}

/// The line of `text` holding byte `at`, without its newline.
fn line_around(text: &str, at: usize) -> &str {
    let at = floor_boundary(text, at.min(text.len()));
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    &text[start..end]
}

/// Up to 20 bytes of the span's line before it, the span (up to 40 bytes)
/// and 20 after, with `…` where the line goes on, and carets under the span
/// (short enough for the report's width, which would wrap it).
fn excerpt(text: &str, span: Span) -> String {
    let at = floor_boundary(text, span.start.min(text.len()));
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let end = floor_boundary(text, span.end.clamp(at, line_end).min(at + 40));
    let from = floor_boundary(text, at.saturating_sub(20).max(line_start));
    let to = floor_boundary(text, (end + 20).min(line_end));
    let (left, right) = (if from > line_start { "…" } else { "" }, if to < line_end { "…" } else { "" });
    let before = text[from..at].chars().count() + left.chars().count();
    let carets = "^".repeat(text[at..end].chars().count().max(1));
    format!("    {left}{}{right}\n    {}{carets}", &text[from..to], " ".repeat(before))
}

/// The largest char boundary of `text` at or below `at`.
fn floor_boundary(text: &str, mut at: usize) -> usize {
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn clamp(span: Span, len: usize) -> miette::SourceSpan {
    let start = span.start.min(len);
    let end = span.end.clamp(start, len);
    (start, end - start).into()
}
