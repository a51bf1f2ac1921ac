//! `tfc repl [FILE]`: an interactive session of the `.tfl` language. Every
//! entry is checked, compiled and run at once; the compiler's view of an
//! expression is one `:command` away.
//!
//! Contract: on a terminal the session reads with a line editor (history in
//! `editor::history_path`, tab completion, multi-line entries), shows
//! prompts and colored diagnostics, cancels the running entry on Ctrl-C and
//! exits on Ctrl-D or `:quit` with status 0. When stdin is not a terminal it
//! reads entries from stdin without prompts or colors and exits with status
//! 1 if any entry failed (0 otherwise), so scripts and tests can drive it.
//! Program output goes to stdout, diagnostics to stderr; no error ends the
//! session.
//!
//! Design: the session keeps the tracer alive between entries
//! (`trace::Live`, see its header) rather than re-tracing the accumulated
//! source, so an entry costs only its own statements, and it resumes the
//! runtime executor from the previous entry's values (`Executor::resume`),
//! so trained parameters and computed tensors stay. Everything runs on one
//! thread with a 64 MiB stack, the tracer's stack (the tracer's values are
//! `Rc`s and live across entries, so it cannot move to a fresh thread per
//! entry as `Session::check` does).
//!
//! Example (stdin not a terminal):
//! ```text
//! $ printf 'let x = [1.0, 2.0]\nx * 2.0\n:type x\n' | tfc repl
//! [2, 4]
//! f32[2]
//! ```

mod commands;
mod editor;
mod input;
mod key;
mod session;
mod template;

pub use input::is_complete;
pub use session::{Repl, Timing};

use crate::diag::{render, Diagnostic};
use commands::Flow;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The tracer's stack (see `driver::Session::check`).
const STACK_BYTES: usize = 64 << 20;

/// Runs the REPL, its entries with `options`; `file` is loaded first.
pub fn main(file: Option<&Path>, options: crate::runtime::exec::RunOptions) -> ExitCode {
    let file: Option<PathBuf> = file.map(Path::to_path_buf);
    let spawned = std::thread::Builder::new()
        .name("tfc-repl".into())
        .stack_size(STACK_BYTES)
        .spawn(move || session(file.as_deref(), options));
    match spawned {
        Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(e) => {
            eprintln!("error: cannot start the REPL thread: {e}");
            ExitCode::FAILURE
        }
    }
}

fn session(file: Option<&Path>, options: crate::runtime::exec::RunOptions) -> ExitCode {
    crate::interrupt::install();
    let interactive = std::io::stdin().is_terminal();
    let color = interactive && std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let mut repl = match Repl::with_options(options) {
        Ok(r) => r,
        Err(diags) => {
            eprint!("{}", render(&diags, &crate::diag::SourceMap::new(), false));
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    if let Some(path) = file {
        let mut out = std::io::stdout();
        if let Err(diags) = repl.load(path, &mut out) {
            report(&repl, &diags, color);
            failed = true;
        }
    }
    if interactive {
        interactive_loop(&mut repl, color);
        ExitCode::SUCCESS
    } else {
        failed |= piped_loop(&mut repl);
        if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// Runs one entry or command; returns whether it succeeded and what next.
fn process(repl: &mut Repl, text: &str, name: &str, color: bool) -> (bool, Flow) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return (true, Flow::Continue);
    }
    // Re-armed before each entry, so a Ctrl-C while it compiles stops it at
    // its first safe point, and after, so a Ctrl-C that came after the last
    // safe point is not taken for the "second Ctrl-C" of the next entry.
    crate::interrupt::clear();
    let result = match trimmed.strip_prefix(':') {
        Some(cmd) => commands::run(repl, cmd, name, &mut out),
        None => repl.run_entry(text, name, &mut out).map(|_| Flow::Continue),
    };
    crate::interrupt::clear();
    let _ = out.flush();
    match result {
        Ok(flow) => (true, flow),
        Err(diags) => {
            report(repl, &diags, color);
            (false, Flow::Continue)
        }
    }
}

fn report(repl: &Repl, diags: &[Diagnostic], color: bool) {
    let text = render(diags, repl.sources(), color);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Reads entries from a non-terminal stdin; returns whether any failed.
fn piped_loop(repl: &mut Repl) -> bool {
    let mut failed = false;
    let mut entry = String::new();
    let mut first_line = 0;
    let mut lines = std::io::stdin().lock().lines();
    let mut line_no = 0;
    loop {
        let line = match lines.next() {
            Some(Ok(line)) => Some(line),
            Some(Err(e)) => {
                eprintln!("error: cannot read stdin: {e}");
                failed = true;
                None
            }
            None => None,
        };
        let at_end = line.is_none();
        if let Some(line) = line {
            line_no += 1;
            if entry.is_empty() {
                first_line = line_no;
            }
            entry.push_str(&line);
            entry.push('\n');
            if !is_complete(&entry) {
                continue;
            }
        }
        if !entry.trim().is_empty() {
            let (ok, flow) = process(repl, &entry, &format!("<stdin line {first_line}>"), false);
            failed |= !ok;
            if flow == Flow::Quit {
                return failed;
            }
        }
        entry.clear();
        if at_end {
            return failed;
        }
    }
}

/// The terminal session: prompt, line editor, history.
fn interactive_loop(repl: &mut Repl, color: bool) {
    use rustyline::error::ReadlineError;
    let names = std::rc::Rc::new(std::cell::RefCell::new(editor::Names::default()));
    let config = rustyline::Config::builder().auto_add_history(false).build();
    let mut ed: rustyline::Editor<editor::Helper, rustyline::history::DefaultHistory> =
        match rustyline::Editor::with_config(config) {
            Ok(ed) => ed,
            Err(e) => {
                eprintln!("error: cannot start the line editor: {e}");
                return;
            }
        };
    ed.set_helper(Some(editor::Helper { names: names.clone() }));
    let mut history = editor::history_path();
    if let Some(path) = &history {
        let _ = ed.load_history(path);
    }
    println!("tfc {} REPL — :help for commands, Ctrl-D to exit", env!("CARGO_PKG_VERSION"));
    let mut n = 0;
    loop {
        {
            let mut names = names.borrow_mut();
            names.scope = repl.live.visible_names();
            names.members = repl.live.members();
        }
        let line = match ed.readline("tfl> ") {
            Ok(line) => line,
            // Ctrl-C at the prompt drops the line being edited.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("error: cannot read the terminal: {e}");
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let _ = ed.add_history_entry(line.as_str());
        if let Some(path) = &history {
            if let Err(e) = ed.append_history(path) {
                eprintln!("note: history is not saved ({}: {e})", path.display());
                history = None;
            }
        }
        n += 1;
        let (_, flow) = process(repl, &line, &format!("<input {n}>"), color);
        if flow == Flow::Quit {
            break;
        }
    }
}
