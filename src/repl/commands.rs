//! The `:commands` of the REPL: the compiler's view of an expression
//! (`:type`, `:ir`, `:opt`, `:plan`, `:params`), timing (`:time`), files
//! (`:load`, `:save`) and `:help`/`:quit`.
//!
//! Contract: a command never changes the session except `:time` (which runs
//! its statement as an entry) and `:load`; the inspecting commands trace
//! their expression into the session graph and throw the entry away.
//! Problems are diagnostics: an unknown command or a missing argument is
//! E0004, anything wrong with the expression is the usual diagnostic.
//!
//! Example: after `let x = [[1.0, 2.0]]`, `:type x * 2.0` prints `f32[1, 2]`,
//! and `:ir x * 2.0` prints the graph of that expression alone (constant,
//! broadcast, mul, `output`).

use super::session::{Repl, Timing};
use crate::diag::{did_you_mean, Code, Diagnostic};
use crate::ir::{Effect, Graph, NodeId, Program};
use crate::trace::Value;
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;

/// What the loop does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Quit,
}

/// The commands, their argument and what they do (for `:help` and completion).
pub const COMMANDS: &[(&str, &str, &str)] = &[
    ("type", "EXPR", "the dtype and shape of an expression (a function's signature as written)"),
    ("ir", "EXPR", "the graph of an expression, as traced"),
    ("opt", "EXPR", "the graph of an expression after the optimizer"),
    ("plan", "EXPR", "the kernels, schedule and memory arena of an expression"),
    ("params", "MODEL", "a model's parameters: names, shapes and element counts"),
    ("time", "STMT", "run a statement and show its compile and run time"),
    ("load", "FILE", "run a .tfl file; its bindings join the session"),
    ("save", "FILE", "write the session's definitions as a .tfl file"),
    ("help", "", "this list"),
    ("quit", "", "leave the REPL (also Ctrl-D)"),
];

/// Runs the command line `line` (without its leading `:`).
pub fn run(repl: &mut Repl, line: &str, name: &str, out: &mut dyn Write) -> Result<Flow, Vec<Diagnostic>> {
    let line = line.trim();
    let (cmd, arg) = line.split_once(char::is_whitespace).map(|(c, a)| (c, a.trim())).unwrap_or((line, ""));
    let cmd = match cmd {
        "q" | "exit" => "quit",
        "h" | "?" => "help",
        "t" => "type",
        c => c,
    };
    let Some((_, want, _)) = COMMANDS.iter().find(|(c, _, _)| *c == cmd) else {
        let mut d = Diagnostic::new(Code::ReplCommand, format!("there is no command `:{cmd}`"));
        if let Some(s) = did_you_mean(cmd, COMMANDS.iter().map(|(c, _, _)| *c)) {
            d = d.help(format!("did you mean `:{s}`? (`:help` lists the commands)"));
        } else {
            d = d.help("`:help` lists the commands");
        }
        return Err(vec![d]);
    };
    if !want.is_empty() && arg.is_empty() {
        return Err(vec![Diagnostic::new(Code::ReplCommand, format!("`:{cmd}` needs {}", article(want)))
            .help(format!("for example `:{cmd} {}`", example(want)))]);
    }
    let say = |out: &mut dyn Write, text: &str| {
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    };
    match cmd {
        "quit" => return Ok(Flow::Quit),
        "help" => say(out, &help()),
        "type" => {
            let value = expression(repl, arg, name, cmd)?;
            say(out, &format!("{}\n", crate::trace::live::type_text(&value, repl.sources())));
        }
        "ir" | "opt" | "plan" => say(out, &graph_of(repl, arg, name, cmd)?),
        "params" => say(out, &params(repl, arg, name)?),
        "time" => {
            let t = repl.run_entry(arg, name, out)?;
            say(out, &timing(t));
        }
        "load" => repl.load(Path::new(arg), out)?,
        "save" => {
            let text = format!("// saved by `tfc repl`\n{}\n", repl.defs.join("\n"));
            std::fs::write(arg, text)
                .map_err(|e| vec![Diagnostic::new(Code::Io, format!("cannot write `{arg}`: {e}"))])?;
            say(out, &format!("saved {} definition{} to {arg}\n", repl.defs.len(), plural(repl.defs.len())));
        }
        _ => {}
    }
    Ok(Flow::Continue)
}

/// `compile 0.412 ms, run 0.031 ms` (or `compile cached`).
pub fn timing(t: Timing) -> String {
    let ms = |d: std::time::Duration| format!("{:.3} ms", d.as_secs_f64() * 1e3);
    match t.compile {
        Some(c) => format!("compile {}, run {}\n", ms(c), ms(t.run)),
        None => format!("compile cached, run {}\n", ms(t.run)),
    }
}

fn help() -> String {
    let mut s = String::from(
        "Enter items and statements as in a .tfl file; a bare expression prints its value.\n\
         Unclosed brackets and blocks continue on the next line. Ctrl-C cancels, Ctrl-D exits.\n",
    );
    for (c, arg, what) in COMMANDS {
        let usage = if arg.is_empty() { format!(":{c}") } else { format!(":{c} {arg}") };
        s.push_str(&format!("  {usage:<14} {what}\n"));
    }
    s
}

/// Traces `text` and returns the value of its trailing expression.
fn expression(repl: &mut Repl, text: &str, name: &str, cmd: &str) -> Result<Value, Vec<Diagnostic>> {
    let (_, value) = repl.trace_only(text, name)?;
    value.ok_or_else(|| {
        vec![Diagnostic::new(Code::ReplCommand, format!("`:{cmd}` needs an expression, not a statement"))
            .help(format!("for example `:{cmd} {}`", example("EXPR")))]
    })
}

/// `:ir`, `:opt`, `:plan`: the program of the entry alone (its effects and,
/// for a tensor expression, its value as the output).
fn graph_of(repl: &mut Repl, text: &str, name: &str, cmd: &str) -> Result<String, Vec<Diagnostic>> {
    let (key, deps) = repl.exact_key(text);
    let key = format!("{cmd}\u{0}{key}");
    if let Some((p, _)) = repl.compiled.get(&key) {
        return Ok(show(p, cmd));
    }
    let (effects, value) = repl.trace_only(text, name)?;
    let output = match value {
        Some(Value::Tensor(id, _)) => Some(id),
        _ => None,
    };
    if output.is_none() && effects.is_empty() {
        return Err(vec![Diagnostic::new(Code::ReplCommand, format!("`:{cmd}` found no graph to show"))
            .help("give a tensor expression or a statement with an effect, e.g. `:ir x * 2.0`")]);
    }
    let mut program = extract(repl.live.graph(), effects, output);
    if cmd != "ir" {
        crate::passes::optimize(&mut program, &crate::passes::Options::default(), &mut |_, _| {})
            .map_err(|d| vec![d])?;
    }
    let text = show(&program, cmd);
    if repl.compiled.len() >= super::session::MAX_CACHED {
        repl.compiled.clear();
    }
    repl.compiled.insert(key, (program, deps));
    Ok(text)
}

fn show(p: &Program, cmd: &str) -> String {
    if cmd == "plan" {
        crate::ir::plan_print::print_compiled(p)
    } else {
        crate::ir::print::print_program(p)
    }
}

/// A program holding only the nodes that `effects` and `output` read, in
/// their original order (node id order is topological in the session graph).
fn extract(g: &Graph, effects: Vec<Effect>, output: Option<NodeId>) -> Program {
    let mut p = Program { graph: Graph::new(), effects, compiled: None };
    p.graph.outputs.extend(output);
    let mut keep: BTreeSet<NodeId> = BTreeSet::new();
    let mut stack = p.roots();
    while let Some(n) = stack.pop() {
        if g.contains(n) && keep.insert(n) {
            stack.extend(g.inputs(n));
        }
    }
    let mut map: HashMap<NodeId, NodeId> = HashMap::new();
    for n in keep {
        let node = g.node(n);
        let inputs: Vec<NodeId> = g.inputs(n).iter().filter_map(|i| map.get(i).copied()).collect();
        map.insert(n, p.graph.add(node.op.clone(), &inputs, node.ty.clone(), node.span));
    }
    p.for_each_ref(&mut |id| {
        if let Some(new) = map.get(id) {
            *id = *new;
        }
    });
    p
}

/// `:params MODEL`: one line per parameter, then the total.
fn params(repl: &mut Repl, text: &str, name: &str) -> Result<String, Vec<Diagnostic>> {
    let value = expression(repl, text, name, "params")?;
    let Some(params) = crate::trace::live::params_of(&value) else {
        return Err(vec![Diagnostic::new(
            Code::Kind,
            format!("`:params` needs a model instance, found {}", value.describe()),
        )
        .help("for example `:params net` after `let net = MyModel()`")]);
    };
    let rows: Vec<(String, String, usize)> =
        params.iter().map(|(p, ty)| (p.clone(), ty.to_string(), ty.shape.iter().product())).collect();
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let mut s = String::new();
    for (p, ty, n) in &rows {
        s.push_str(&format!("{p:<w0$}  {ty:<w1$}  {n}\n"));
    }
    let total: usize = rows.iter().map(|r| r.2).sum();
    s.push_str(&format!("{} parameter tensor{}, {total} value{}\n", rows.len(), plural(rows.len()), plural(total)));
    Ok(s)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn article(arg: &str) -> &'static str {
    match arg {
        "EXPR" => "an expression",
        "STMT" => "a statement",
        "MODEL" => "a model",
        _ => "a file name",
    }
}

fn example(arg: &str) -> &'static str {
    match arg {
        "EXPR" => "x * 2.0",
        "STMT" => "print(x)",
        "MODEL" => "net",
        _ => "session.tfl",
    }
}
