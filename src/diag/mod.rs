//! Diagnostics: spans, stable error codes and the error value every stage
//! returns. Rendering to text (with miette) lives in `render`.

mod code;
mod render;
mod span;

pub use code::Code;
pub use render::{render, SourceMap};
pub use span::{FileId, Span};

/// A labelled span inside a diagnostic.
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

/// One error, as data. Stages never print; they return these.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub code: Code,
    pub message: String,
    /// The first label is the primary location.
    pub labels: Vec<Label>,
    pub help: Option<String>,
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn new(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic { code, message: message.into(), labels: Vec::new(), help: None, notes: Vec::new() }
    }

    /// Adds a labelled span; the first one added is the primary location.
    pub fn label(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { span, message: message.into() });
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    /// The primary span, if any.
    pub fn span(&self) -> Option<Span> {
        self.labels.first().map(|l| l.span)
    }

    pub fn internal(message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(Code::Internal, message)
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error[{}]: {}", self.code.as_str(), self.message)
    }
}

/// The result type of every compiler stage: a value or at least one diagnostic.
pub type Result<T> = std::result::Result<T, Vec<Diagnostic>>;

/// Shorthand for a single-diagnostic error.
pub fn fail<T>(d: Diagnostic) -> Result<T> {
    Err(vec![d])
}

/// Closest candidate by edit distance, for "did you mean" help.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.len() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != name)
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_name_within_a_third_of_its_length() {
        assert_eq!(did_you_mean("sofmax", ["softmax", "sum", "exp"]), Some("softmax"));
        assert_eq!(did_you_mean("xyz", ["softmax"]), None);
    }
}
