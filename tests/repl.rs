//! `tfc repl` as a user meets it, two ways.
//!
//! Through stdin: every `tests/cases/repl/*.txt` is a transcript fed to
//! `tfc repl` (working directory: that folder); its exit status, stdout and
//! stderr are snapshotted (`tests/snapshots/repl__NAME.snap`), with the
//! numbers that vary between runs (milliseconds, examples per second)
//! replaced by `<n>`.
//!
//! Through a pseudo-terminal (Unix): the line editor's multi-line entry,
//! history across sessions, tab completion, and Ctrl-C during a long
//! training run. The child gets its own session with the pty as its
//! controlling terminal, so Ctrl-C is a real SIGINT. Every wait is for an
//! expected piece of output, with a generous deadline (a loaded CI machine),
//! never a fixed sleep.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/repl")
}

/// Runs `tfc repl ARGS` with `input` on stdin, in `dir`.
fn repl_piped(args: &[&str], input: &[u8], dir: &Path) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .arg("repl")
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tfc binary runs");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin.write_all(input).expect("write the transcript");
    drop(stdin);
    child.wait_with_output().expect("tfc repl finishes")
}

/// Replaces each number directly before `ms` or `ex/s` with `<n>`.
fn sanitize(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let fixed: Vec<&str> = words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let next = words.get(i + 1).copied().unwrap_or("");
                let varies = next.starts_with("ms") || next == "ex/s";
                if varies && w.parse::<f64>().is_ok() {
                    "<n>"
                } else {
                    w
                }
            })
            .collect();
        out.push_str(&fixed.join(" "));
        out.push('\n');
    }
    out
}

fn transcript(name: &str) {
    let input = std::fs::read(cases_dir().join(format!("{name}.txt"))).expect("read the transcript");
    let o = repl_piped(&[], &input, &cases_dir());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "tfc panicked:\n{stderr}");
    let text = format!(
        "status: {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        sanitize(&String::from_utf8_lossy(&o.stdout)),
        sanitize(&stderr)
    );
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(format!("repl__{name}"), text));
}

macro_rules! transcripts {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { transcript(stringify!($name)); })*
        const TRANSCRIPTS: &[&str] = &[$(stringify!($name)),*];
    };
}

transcripts!(basics, errors, training, inspect, load_quit, cache, quantize);

#[test]
fn every_transcript_file_has_a_test() {
    let mut files: Vec<String> = std::fs::read_dir(cases_dir())
        .expect("tests/cases/repl exists")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.path().file_name()?.to_str()?.strip_suffix(".txt").map(String::from))
        .collect();
    files.sort();
    let mut listed: Vec<String> = TRANSCRIPTS.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "list every tests/cases/repl/*.txt in `transcripts!`");
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfc-repl-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn a_clean_session_exits_zero_and_a_failed_entry_exits_one() {
    let ok = repl_piped(&[], b"let x = 2.0\nprint(x * 3.0)\n", &cases_dir());
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "f32 6\n");
    assert!(ok.stderr.is_empty(), "no prompts or banners when stdin is not a terminal");
    let bad = repl_piped(&[], b"print(nope)\nprint(1)\n", &cases_dir());
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&bad.stdout), "1\n", "the session goes on after an error");
}

#[test]
fn an_entry_left_open_at_the_end_of_input_is_a_syntax_error() {
    let o = repl_piped(&[], b"print(1)\nprint([1.0,\n", &cases_dir());
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("E0101") && err.contains("<stdin line 2>"), "{err}");
}

#[test]
fn a_file_argument_is_loaded_first_and_its_bindings_stay() {
    let dir = scratch_dir("file-arg");
    std::fs::write(dir.join("defs.tfl"), "let base = [1.0, 2.0]\nfn twice(v) = v * 2.0\nprint(\"loaded\")\n")
        .expect("write defs.tfl");
    let o = repl_piped(&["defs.tfl"], b"twice(base)\n", &dir);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "loaded\nf32[2] [2, 4]\n");
}

#[test]
fn save_writes_a_program_that_tfc_run_accepts() {
    let dir = scratch_dir("save");
    let input = b"use std.optim.sgd\nmodel M {\n  param w: f32[2] = ones()\n  fn forward(x) = x * w\n}\n\
                  let net = M()\nnet([3.0, 4.0])\nlet k = 2.0\nprint(net([1.0, 1.0]) * k)\n:save session.tfl\n";
    let o = repl_piped(&[], input, &dir);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let saved = std::fs::read_to_string(dir.join("session.tfl")).expect("the saved file");
    assert!(saved.contains("model M {") && saved.contains("let k = 2.0"), "{saved}");
    assert!(!saved.contains("print(") && !saved.contains("net([3.0"), "expressions are not definitions:\n{saved}");
    let run = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .args(["check", "session.tfl"])
        .current_dir(&dir)
        .output()
        .expect("tfc check runs");
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
}

#[test]
fn a_repeated_expression_is_not_compiled_again() {
    let o = repl_piped(
        &[],
        b"let x = [1.0, 2.0]\n:time x * 2.0\n:time x * 2.0\nlet x = [3.0]\n:time x * 2.0\n",
        &cases_dir(),
    );
    let out = sanitize(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(
        out,
        "f32[2] [2, 4]\ncompile <n> ms, run <n> ms\nf32[2] [2, 4]\ncompile cached, run <n> ms\n\
         f32[1] [6]\ncompile <n> ms, run <n> ms\n"
    );
}

/// What the last `:time` line of a session says, and everything printed
/// before it.
fn timed(input: &str) -> (String, String) {
    let o = repl_piped(&[], input.as_bytes(), &cases_dir());
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut lines: Vec<&str> = out.lines().collect();
    let last = lines.pop().unwrap_or_default().to_string();
    (lines.join("\n"), last)
}

#[test]
fn a_cache_hit_on_new_values_prints_what_a_fresh_compile_prints() {
    let setup = "fn f(v, k) = softmax(tanh(v @ v) * k, axis = 1) - mean(v) / sum(exp(v))\n\
                 let k = 3.0\nlet a = normal([8, 8], seed = 1)\nlet b = uniform([8, 8], seed = 7, low = -2.0)\n";
    // The graph traced for `a`, run on `b` …
    let (cached, hit) = timed(&format!("{setup}print(f(a, k))\n:time print(f(b, k))\n"));
    assert!(hit.starts_with("compile cached"), "{hit}");
    // … prints exactly what tracing `f(b, k)` in a fresh session prints.
    let (fresh, miss) = timed(&format!("{setup}:time print(f(b, k))\n"));
    assert!(!miss.starts_with("compile cached"), "{miss}");
    let cached_b = cached.lines().last().unwrap_or_default();
    assert_eq!(cached_b, fresh.lines().last().unwrap_or_default());
    assert!(cached_b.starts_with("f32[8, 8]"), "{cached_b}");
}

#[test]
fn a_changed_compile_time_value_misses_the_cache() {
    // `k` is read by value (a compile-time number), `v` by its type.
    let (out, last) = timed("let v = [1.0, 2.0]\nlet k = 2.0\nv * k\nlet k = 3.0\n:time v * k\n");
    assert!(!last.starts_with("compile cached"), "{last}");
    assert!(out.ends_with("f32[2] [3, 6]"), "{out}");
    let (out, last) = timed("let v = [1.0, 2.0]\nv * 2.0\nlet v = [3.0, 4.0]\n:time v * 2.0\n");
    assert!(last.starts_with("compile cached"), "{last}");
    assert!(out.ends_with("f32[2] [6, 8]"), "{out}");
    // A name used as a named argument or a field is read by identity.
    let (_, last) = timed("let seed = [1.0]\nnormal([2], seed = 1)\nlet seed = [2.0]\n:time normal([2], seed = 1)\n");
    assert!(!last.starts_with("compile cached"), "{last}");
}

#[cfg(unix)]
mod pty {
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::path::Path;
    use std::process::{Child, Command};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::{Duration, Instant};

    /// How long any one expected output may take (a loaded 2-core machine).
    const DEADLINE: Duration = Duration::from_secs(60);

    /// `tfc repl` on a pseudo-terminal: what it printed so far, and its input.
    pub struct Session {
        master: std::fs::File,
        child: Child,
        output: Arc<(Mutex<Vec<u8>>, Condvar)>,
        /// Output before this offset was already matched.
        seen: usize,
    }

    impl Session {
        pub fn start(dir: &Path, history: &Path) -> Session {
            let (mut master_fd, mut slave_fd) = (0, 0);
            let size = libc::winsize { ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 };
            // SAFETY: openpty writes two descriptors into the given ints; the
            // name and termios pointers may be null.
            let rc =
                unsafe { libc::openpty(&mut master_fd, &mut slave_fd, std::ptr::null_mut(), std::ptr::null(), &size) };
            assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
            // SAFETY: both descriptors were just opened and are owned here.
            let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master_fd), OwnedFd::from_raw_fd(slave_fd)) };
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_tfc"));
            cmd.arg("repl")
                .current_dir(dir)
                .env("TERM", "xterm")
                .env("TFC_HISTORY", history)
                .env("NO_COLOR", "1")
                .stdin(slave.try_clone().expect("dup"))
                .stdout(slave.try_clone().expect("dup"))
                .stderr(slave);
            // SAFETY: only async-signal-safe calls between fork and exec: a
            // new session whose controlling terminal is the pty (stdin), so
            // Ctrl-C typed on it is a SIGINT for the child.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let child = cmd.spawn().expect("spawn tfc repl on a pty");
            drop(cmd);
            let master = std::fs::File::from(master);
            let output = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
            let (mut reader, mut answer) = (master.try_clone().expect("dup"), master.try_clone().expect("dup"));
            let sink = output.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                // Ends with EIO once the child has exited and closed the pty.
                while let Ok(n) = reader.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let chunk = &buf[..n];
                    // The line editor asks where the cursor is; a terminal answers.
                    if chunk.windows(4).any(|w| w == b"\x1b[6n") {
                        let _ = answer.write_all(b"\x1b[1;1R");
                    }
                    let (lock, cvar) = &*sink;
                    lock.lock().expect("output lock").extend_from_slice(chunk);
                    cvar.notify_all();
                }
            });
            Session { master, child, output, seen: 0 }
        }

        /// Everything the terminal showed so far.
        pub fn text(&self) -> String {
            let (lock, _) = &*self.output;
            String::from_utf8_lossy(&lock.lock().expect("output lock")).into_owned()
        }

        /// Waits until `needle` appears in output not matched before.
        pub fn expect(&mut self, needle: &str) {
            if !self.wait_for(needle, DEADLINE) {
                let (lock, _) = &*self.output;
                let out = lock.lock().expect("output lock");
                let text = String::from_utf8_lossy(&out[self.seen..]).into_owned();
                panic!("timed out waiting for {needle:?}; the terminal shows:\n{text}");
            }
        }

        /// Waits for a fresh, empty prompt. The editor redraws the prompt
        /// with the line on every keystroke, so a bare `tfl> ` may be an
        /// echo of the entry still being typed; only a new prompt is
        /// followed directly by the carriage return that parks the cursor.
        /// Text sent before the editor reads again would be lost.
        pub fn prompt(&mut self) {
            self.expect("tfl> \r");
        }

        /// Enters `text` (Enter included) and waits for the next prompt.
        pub fn enter(&mut self, text: &str) {
            self.send(&format!("{text}\r"));
            self.prompt();
        }

        /// Enters `text`, waits for `output`, then for the next prompt.
        pub fn check(&mut self, text: &str, output: &str) {
            self.send(&format!("{text}\r"));
            self.expect(output);
            self.prompt();
        }

        /// Waits until the line editor has given the terminal back (signals
        /// on again): the entry sent last is being compiled or run.
        pub fn wait_until_busy(&mut self) {
            use std::os::fd::AsRawFd;
            let until = Instant::now() + DEADLINE;
            loop {
                // SAFETY: termios is plain data, filled in by tcgetattr.
                let mut t: libc::termios = unsafe { std::mem::zeroed() };
                // SAFETY: the descriptor is the open pty master.
                let rc = unsafe { libc::tcgetattr(self.master.as_raw_fd(), &mut t) };
                assert_eq!(rc, 0, "tcgetattr: {}", std::io::Error::last_os_error());
                if t.c_lflag & libc::ISIG != 0 {
                    return;
                }
                assert!(Instant::now() < until, "the line editor kept the terminal");
                std::thread::sleep(Duration::from_millis(10));
            }
        }

        /// Presses Ctrl-C until `needle` shows: one that lands after the line
        /// editor gave the terminal back but before the REPL re-armed its
        /// flag for the entry is forgotten, so it is pressed again after a
        /// while (a second Ctrl-C on a set flag would end the process).
        pub fn interrupt(&mut self, needle: &str) {
            let until = Instant::now() + DEADLINE;
            while Instant::now() < until {
                self.send("\x03");
                if self.wait_for(needle, Duration::from_secs(10)) {
                    return;
                }
            }
            panic!("Ctrl-C never produced {needle:?}");
        }

        /// Like `expect`, giving up (false) after `limit`.
        fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
            let (lock, cvar) = &*self.output;
            let until = Instant::now() + limit;
            let mut out = lock.lock().expect("output lock");
            loop {
                let text = String::from_utf8_lossy(&out[self.seen..]).into_owned();
                if let Some(i) = text.find(needle) {
                    self.seen += text[..i + needle.len()].len();
                    return true;
                }
                let now = Instant::now();
                if now >= until {
                    return false;
                }
                out = cvar.wait_timeout(out, until - now).expect("output lock").0;
            }
        }

        pub fn send(&mut self, text: &str) {
            self.master.write_all(text.as_bytes()).expect("write to the pty");
            self.master.flush().expect("flush the pty");
        }

        /// Sends Ctrl-D at the prompt and returns the exit status.
        pub fn finish(mut self) -> Option<i32> {
            self.send("\x04");
            let until = Instant::now() + DEADLINE;
            loop {
                if let Some(status) = self.child.try_wait().expect("wait for tfc") {
                    return status.code();
                }
                if Instant::now() > until {
                    let _ = self.child.kill();
                    panic!("tfc repl did not exit on Ctrl-D");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// A failed test must not leave `tfc repl` waiting on its terminal.
    impl Drop for Session {
        fn drop(&mut self) {
            if let Ok(None) = self.child.try_wait() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

#[cfg(unix)]
#[test]
fn pty_multi_line_entries_continue_until_complete() {
    let dir = scratch_dir("pty-multi");
    let mut s = pty::Session::start(&dir, &dir.join("history"));
    s.prompt();
    s.send("fn twice(v) =\r");
    s.enter("    v * 2.0");
    s.check("twice([1.5, 2.5])", "f32[2] [3, 5]");
    s.enter("let m = max([\r    4.0,\r    9.0])");
    s.check("m", "f32 9");
    assert_eq!(s.finish(), Some(0));
}

#[cfg(unix)]
#[test]
fn pty_history_is_kept_across_sessions() {
    let dir = scratch_dir("pty-history");
    let history = dir.join("history");
    let mut s = pty::Session::start(&dir, &history);
    s.prompt();
    s.check("print(40 + 2)", "42");
    assert_eq!(s.finish(), Some(0));
    let saved = std::fs::read_to_string(&history).expect("the history file");
    assert!(saved.contains("print(40 + 2)"), "{saved}");
    // A new session: the up arrow brings the entry back.
    let mut s = pty::Session::start(&dir, &history);
    s.prompt();
    s.check("\x1b[A", "42");
    assert_eq!(s.finish(), Some(0));
}

#[cfg(unix)]
#[test]
fn pty_tab_completes_names_members_and_commands() {
    let dir = scratch_dir("pty-complete");
    let mut s = pty::Session::start(&dir, &dir.join("history"));
    s.prompt();
    s.enter("let learning_rate = 0.25");
    // Each Tab is its own keystroke: wait for the completion to show.
    s.send("learn\t");
    s.expect("learning_rate");
    s.check("", "f32 0.25");
    s.enter("model Lin {\r  param weight: f32[1] = ones()\r  fn forward(x) = x * weight\r}");
    s.enter("let net = Lin()");
    s.send("net.wei\t");
    s.expect("net.weight");
    s.check(" * 3.0", "f32[1] [3]");
    s.send(":ty\t");
    s.expect(":type");
    s.check(" learning_rate", "float (f32[] in a tensor context)");
    s.send("use std.lo\t");
    s.expect("std.loss");
    s.enter("");
    s.send("loss.ms\t");
    s.expect("loss.mse");
    s.check("([1.0], [3.0])", "f32 4");
    assert_eq!(s.finish(), Some(0));
}

#[cfg(unix)]
#[test]
fn pty_an_unwritable_history_file_only_turns_saving_off() {
    let dir = scratch_dir("pty-no-history");
    let mut s = pty::Session::start(&dir, Path::new("/proc/tfc-no-such-dir/history"));
    s.prompt();
    s.send("print(5 * 5)\r");
    s.expect("history is not saved");
    s.expect("25");
    s.prompt();
    s.check("print(6 * 6)", "36");
    assert_eq!(s.finish(), Some(0));
}

#[cfg(unix)]
#[test]
fn pty_ctrl_c_cancels_training_and_keeps_the_model_as_it_was() {
    let dir = scratch_dir("pty-ctrl-c");
    let mut s = pty::Session::start(&dir, &dir.join("history"));
    s.prompt();
    s.enter("use std.optim.sgd");
    s.enter("model Scale {\r  param w: f32[1] = zeros()\r  fn forward(x) = x * w\r}");
    s.enter("let net = Scale()");
    // Far more epochs than the test waits for: only Ctrl-C ends it.
    s.send(
        "train net on from_tensors(ones([100000])) |> batch(1) { loss(x) = mean((net(x) - 1.0) ^ 2.0); \
         optimizer = sgd(lr = 0.01); epochs = 100000000 }\r",
    );
    s.expect("ex/s");
    s.send("\x03");
    s.expect("E0403");
    // The progress bar's line is cleared before the error, which starts a
    // line of its own (also when Ctrl-C came right after an epoch's line).
    let text = s.text();
    let (bar, error) = (text.rfind("ex/s").unwrap_or(0), text.find("error[E0403]").unwrap_or(0));
    let fresh = |between: &str| between.contains("\x1b[K") || between.contains('\n');
    assert!(bar < error && fresh(&text[bar..error]), "the error follows the bar: {text:?}");
    s.prompt();
    s.check("net.w + 7.0", "f32[1] [7]");
    assert_eq!(s.finish(), Some(0));
}

#[cfg(unix)]
#[test]
fn pty_ctrl_c_stops_a_long_compile() {
    let dir = scratch_dir("pty-ctrl-c-compile");
    let mut s = pty::Session::start(&dir, &dir.join("history"));
    s.prompt();
    s.enter("fn fib(n) = if n < 2 { 1.0 } else { fib(n - 1) + fib(n - 2) }");
    // Tracing `fib(60)` evaluates some 10^12 calls at compile time (there
    // is nothing to run): only Ctrl-C ends it.
    s.send("fib(60)\r");
    s.wait_until_busy();
    s.interrupt("E0403");
    s.prompt();
    s.check("fib(5)", "f32 8");
    assert_eq!(s.finish(), Some(0));
}

/// A model that instantiates itself is E0102 in the REPL as in a file; the
/// session lives on and runs the next entry (it used to die of a stack
/// overflow).
#[test]
fn a_self_instantiating_model_is_an_error_and_the_session_goes_on() {
    let dir = std::env::temp_dir();
    let o = repl_piped(&[], b"model M { inner = M() }\nlet m = M()\nprint(40 + 2)\n", &dir);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(err.contains("error[E0102]") && err.contains("does `M` instantiate itself?"), "{err}");
    assert!(out.contains("42"), "the session went on: {out}\n{err}");
    assert_eq!(o.status.code(), Some(1), "an entry failed");
}

/// An MLP trained on random data, printing its weights' sums with every
/// digit: the compiled kernels and the interpreter round it differently.
const TRAIN_AND_PRINT: &str = "use std.nn.{Dense}\nuse std.loss.softmax_cross_entropy\nuse std.optim.adam\n\
    model Mlp { l1 = Dense(64, 32, act = relu)\n l2 = Dense(32, 10)\n fn forward(x: f32[B, 64]) -> f32[B, 10] = x |> l1 |> l2 }\n\
    let xs = normal([512, 64], seed = 1)\nlet ys = cast(floor(uniform([512], seed = 2) * 10.0), i32)\n\
    let net = Mlp(seed = 0)\n\
    train net on from_tensors(xs, ys) |> batch(64) { loss(x, y) = softmax_cross_entropy(net(x), y)\n optimizer = adam(lr = 1e-2)\n epochs = 3 }\n\
    print(sum(net.l1.w), sum(net.l2.w))\n";

/// The standard output of `tfc ARGS main.tfl` on `TRAIN_AND_PRINT` in `dir`.
fn run_printed(dir: &Path, args: &[&str]) -> String {
    std::fs::write(dir.join("main.tfl"), TRAIN_AND_PRINT).expect("write the program");
    let o =
        Command::new(env!("CARGO_BIN_EXE_tfc")).args(args).arg("main.tfl").current_dir(dir).output().expect("tfc runs");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The REPL trains on the backend `tfc run` would (compiled kernels by
/// default, `--backend interp` for the interpreter) and prints the same
/// bits as `tfc run -O0` on it: it runs the session graph unoptimized,
/// with the kernels, order and arena the plan gives.
#[test]
fn the_repl_trains_on_the_backend_it_is_given() {
    let dir = scratch_dir("backend");
    let jit = run_printed(&dir, &["run", "-O0", "--backend", "jit"]);
    let interp = run_printed(&dir, &["run", "-O0", "--backend", "interp"]);
    assert_ne!(jit, interp, "the two backends must round differently for this test to tell them apart");
    for (args, expected) in
        [(&[][..], &jit), (&["--backend", "jit", "--threads", "2"][..], &jit), (&["--backend", "interp"][..], &interp)]
    {
        let o = repl_piped(args, TRAIN_AND_PRINT.as_bytes(), &dir);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(&String::from_utf8_lossy(&o.stdout), expected, "tfc repl {args:?}");
    }
}
