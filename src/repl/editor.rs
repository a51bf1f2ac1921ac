//! The line editor's helper (rustyline): tab completion, multi-line entry,
//! and where the history file lives.
//!
//! Contract: completion offers, for the word before the cursor, the
//! `:commands` (at the start of a line), the members of a bound model or
//! module (`net.`), the std modules (`std.`), and otherwise every name in
//! scope plus the built-ins, dtypes and keywords. Enter on an incomplete
//! entry (`input::is_complete`) starts a new line of the same entry.
//!
//! Example: with `let learning_rate = 0.1` bound, `lear<Tab>` becomes
//! `learning_rate`; `:pa<Tab>` becomes `:params`.

use rustyline::completion::Completer;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::Context;
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

const KEYWORDS: &[&str] = &[
    "let",
    "fn",
    "model",
    "param",
    "train",
    "on",
    "use",
    "const",
    "if",
    "else",
    "for",
    "in",
    "optimizer",
    "true",
    "false",
];

/// What completion can offer, refreshed by the loop after every entry.
#[derive(Default)]
pub struct Names {
    /// Names in scope (session and prelude).
    pub scope: Vec<String>,
    /// Members of bound models and modules, by binding name.
    pub members: Vec<(String, Vec<String>)>,
}

pub struct Helper {
    pub names: Rc<RefCell<Names>>,
}

impl rustyline::Helper for Helper {}
impl Hinter for Helper {
    type Hint = String;
}
impl Highlighter for Helper {}

impl Validator for Helper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if super::input::is_complete(ctx.input()) {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

impl Completer for Helper {
    type Candidate = String;

    fn complete(&self, line: &str, pos: usize, _: &Context<'_>) -> rustyline::Result<(usize, Vec<String>)> {
        let before = &line[..pos];
        let start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_alphanumeric() || *c == '_' || *c == '.' || *c == ':')
            .last()
            .map(|(i, _)| i)
            .unwrap_or(pos);
        let word = &before[start..];
        Ok((start, self.candidates(word, before[..start].trim().is_empty())))
    }
}

impl Helper {
    /// The completions of `word`; `first` when it starts the line.
    pub fn candidates(&self, word: &str, first: bool) -> Vec<String> {
        let names = self.names.borrow();
        let mut out: Vec<String> = if let Some(cmd) = word.strip_prefix(':') {
            if !first {
                return Vec::new();
            }
            super::commands::COMMANDS
                .iter()
                .filter(|(c, _, _)| c.starts_with(cmd))
                .map(|(c, _, _)| format!(":{c}"))
                .collect()
        } else if let Some((base, member)) = word.rsplit_once('.') {
            let members: Vec<String> = if base == "std" {
                crate::stdlib::MODULES.iter().filter_map(|(m, _)| m.strip_prefix("std.")).map(String::from).collect()
            } else {
                names.members.iter().find(|(n, _)| n == base).map(|(_, m)| m.clone()).unwrap_or_default()
            };
            members.into_iter().filter(|m| m.starts_with(member)).map(|m| format!("{base}.{m}")).collect()
        } else {
            let builtins = crate::trace::builtin_names().iter().map(|s| s.to_string());
            let dtypes = crate::ir::DType::ALL.iter().map(|d| d.name().to_string());
            let keywords = KEYWORDS.iter().map(|s| s.to_string());
            names
                .scope
                .iter()
                .cloned()
                .chain(builtins)
                .chain(dtypes)
                .chain(keywords)
                .filter(|n| n.starts_with(word) && !n.starts_with('_'))
                .collect()
        };
        out.sort();
        out.dedup();
        out
    }
}

/// Where history is kept: `$TFC_HISTORY` (empty: nowhere), else
/// `$XDG_STATE_HOME/tfc/history`, else `~/.tfc_history`.
pub fn history_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TFC_HISTORY") {
        return (!p.is_empty()).then(|| PathBuf::from(p));
    }
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        let dir = PathBuf::from(state).join("tfc");
        let _ = std::fs::create_dir_all(&dir);
        return Some(dir.join("history"));
    }
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".tfc_history"))
}
