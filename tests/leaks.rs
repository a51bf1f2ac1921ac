//! Tracing frees what it allocates: a function value keeps the scope it was
//! defined in, which binds the function (a cycle `Rc` alone never frees),
//! so the tracer tears its scopes down when it is done (`trace::scopes`).
//!
//! One test per binary on purpose: the counting allocator sees every thread
//! of the process, so nothing else may run while it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static OUTSTANDING: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        OUTSTANDING.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        OUTSTANDING.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        OUTSTANDING.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn outstanding() -> isize {
    OUTSTANDING.load(Ordering::Relaxed)
}

/// Functions, a local lambda that escapes (its scope must stay intact) and
/// one that does not, models, an optimizer, `grad`, std imports, training.
const PROGRAM: &str = r#"
use std.nn.{Dense}
use std.loss.softmax_cross_entropy
use std.optim.adam

fn make_scale(k) {
    let f = fn(x) = x * k
    f
}

fn twice(x: f32[4]) -> f32[4] {
    let g = fn(y) = y + y
    g(x)
}

model Net {
    l1 = Dense(4, 8, act = relu)
    l2 = Dense(8, 3)
    fn forward(x: f32[B, 4]) -> f32[B, 3] = x |> l1 |> l2
}

let net = Net(seed = 1)
let triple = make_scale(3.0)
let x = [1.0, 2.0, 3.0, 4.0]
print(triple(twice(x)))
print(grad(fn(v) = sum(v * v))(x))
let data = from_tensors([[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, 1.0]], [0, 2])
train net on data |> batch(2) {
    loss(x, y) = softmax_cross_entropy(net(x), y)
    optimizer = adam(lr = 1e-3)
    epochs = 2
}
print(net([[1.0, 2.0, 3.0, 4.0]]))
"#;

fn check_once() {
    let mut session = tfc::driver::Session::new();
    let file = session.add_source("leak.tfl", PROGRAM);
    if let Err(diags) = session.check(file) {
        panic!("the program does not check: {diags:?}");
    }
}

fn repl_session(entries: &[&str]) -> usize {
    let mut sources = tfc::diag::SourceMap::new();
    let mut live = tfc::trace::live::Live::new(&mut sources).expect("the prelude loads");
    for (i, text) in entries.iter().enumerate() {
        let file = sources.add(format!("<entry {i}>"), text.to_string());
        let program = tfc::syntax::parse(text, file).expect("the entry parses");
        let traced = live.trace(&program.stmts, &mut sources, std::path::Path::new(""), false);
        live.commit(traced.unwrap_or_else(|d| panic!("entry {i} fails: {d:?}")));
    }
    live.scopes_alive()
}

#[test]
fn tracing_frees_what_it_allocates() {
    // Warm up: lazily built tables (std sources, grammar) stay for good.
    check_once();
    check_once();
    let before = outstanding();
    for _ in 0..5 {
        check_once();
    }
    let grown = outstanding() - before;
    // Before the teardown every check kept the prelude's and the program's
    // scopes (about 100 KB); allow a little for allocator-independent noise.
    assert!(grown < 4096, "five checks of the program left {grown} bytes allocated");

    // A REPL session frees everything when it ends, functions included.
    let entries = ["fn add(a, b) = a + b", "let k = add(1.0, 2.0)", "let h = fn(x) = x * k", "print(h(2.0))"];
    repl_session(&entries);
    let before = outstanding();
    for _ in 0..3 {
        repl_session(&entries);
    }
    let grown = outstanding() - before;
    assert!(grown < 4096, "three REPL sessions left {grown} bytes allocated");

    // Within a session, calling a function whose local lambda does not
    // escape releases the call's scope at once: the scopes alive do not
    // grow with the number of calls.
    let define = "fn twice(x) {\n    let g = fn(y) = y + y\n    g(x)\n}";
    let calls = |n: usize| {
        let mut entries = vec![define.to_string()];
        entries.extend((0..n).map(|i| format!("let v{i} = twice({i}.0)")));
        let entries: Vec<&str> = entries.iter().map(String::as_str).collect();
        repl_session(&entries)
    };
    assert_eq!(calls(50), calls(5), "scopes alive after 50 calls and after 5");
}
