//! `load_text` (§8) and `print_text` (§11) end to end through `tfc run`:
//! a text file's bytes, plain and gzipped, as elements or windows, printed
//! back as text; and every bad input — a missing file, bad gzip, bytes that
//! are not UTF-8, an empty file, a file shorter than one window, a byte
//! value that `print_text` cannot print — is a diagnostic naming the file
//! (or the value) with exit code 1, never a panic.

mod support;
use support::*;

#[test]
fn bytes_and_windows_plain_and_gzipped() {
    let d = scratch("text_ok");
    let text = "to be,\nor not\n";
    put(&d, "a.txt", text.as_bytes());
    put(&d, "a.txt.gz", &gz(text.as_bytes()));
    let program = |name: &str| {
        format!(
            "let bytes = load_text(\"{name}\")\n\
             print(count(bytes), first(bytes))\n\
             print_text(collect(bytes))\n\
             let w = load_text(\"{name}\", window = 5, stride = 3)\n\
             print(count(w), count(load_text(\"{name}\", window = 5)))\n\
             print(first(w))\n\
             print_text(collect(w))\n"
        )
    };
    // 14 bytes: windows at 0, 3, 6 and 9 (9..14 ends at the last byte);
    // without a stride, at 0 and 5.
    let want = "14 i32 116\nto be,\nor not\n\n4 2\ni32[5] [116, 111, 32, 98, 101]\nto be\nbe,\no\n\nor n\n not\n\n";
    assert_eq!(ok(&d, &program("a.txt")), want);
    assert_eq!(ok(&d, &program("a.txt.gz")), want);
}

#[test]
fn windows_train_a_next_byte_model() {
    // The windows as a character-level model uses them: inputs and
    // next-byte targets, batched and trained.
    let d = scratch("text_train");
    put(&d, "abc.txt", "abcabcabcabcabcabc".repeat(4).as_bytes());
    let program = "use std.optim.adam\n\
        use std.loss.softmax_cross_entropy\n\
        let data = load_text(\"abc.txt\", window = 5, stride = 1) |> map(fn(w) = (w[:4], w[1:])) |> batch(8)\n\
        model Bigram {\n    param w: f32[128, 128] = zeros()\n    fn forward(x) = embedding(w, x)\n}\n\
        let net = Bigram()\n\
        train net on data {\n    loss(x, y) = softmax_cross_entropy(reshape(net(x), [-1, 128]), reshape(y, [-1]))\n    optimizer = adam(lr = 0.1)\n    epochs = 5\n}\n\
        print_text(argmax(net([97, 98, 99]), axis = -1))\n";
    assert_eq!(ok(&d, program), "bca\n");
}

#[test]
fn bad_text_files_name_the_file() {
    let d = scratch("text_bad");
    fails(&d, "print(count(load_text(\"missing.txt\")))\n", &["missing.txt", "no such file", "E0001"]);
    put(&d, "empty.txt", b"");
    fails(&d, "print(count(load_text(\"empty.txt\")))\n", &["empty.txt", "the file is empty"]);
    put(&d, "latin1.txt", b"first line\ncaf\xe9\n");
    fails(&d, "print(count(load_text(\"latin1.txt\")))\n", &["latin1.txt:2", "not valid UTF-8"]);
    put(&d, "short.txt", b"abc");
    fails(
        &d,
        "print(count(load_text(\"short.txt\", window = 129)))\n",
        &["short.txt", "holds 3 bytes, fewer than one window of 129"],
    );
    put(&d, "cut.txt.gz", &gz(b"some text to compress\n")[..12]);
    fails(&d, "print(count(load_text(\"cut.txt.gz\")))\n", &["cut.txt.gz", "truncated"]);
    put(&d, "notgz.txt.gz", b"plain text");
    fails(&d, "print(count(load_text(\"notgz.txt.gz\")))\n", &["notgz.txt.gz", "gzip"]);
    put(&d, "ok.txt", b"abc");
    fails(&d, "print(count(load_text(\"ok.txt\", window = -1)))\n", &["window must be positive, not -1", "E0312"]);
    fails(&d, "print(count(load_text(\"ok.txt\", stride = 1)))\n", &["a `stride` needs a `window`"]);
}

#[test]
fn print_text_of_a_value_that_is_not_a_byte_is_a_run_time_error() {
    let d = scratch("text_not_byte");
    let stderr = fails(
        &d,
        "print_text([72, 105])\nprint_text([[72, 105], [256, 33]])\n",
        &["E0402", "the value 256 at index [1, 0] is not a byte value (0 to 255)", "while printing this"],
    );
    assert!(stderr.contains("main.tfl:2"), "{stderr}");
    let r = run(&d, "print_text([72, 105])\nprint_text([-1])\n", &[]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(1), "Hi\n"), "the first line prints before the error");
}
