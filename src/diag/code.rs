//! Stable error codes. Each code is documented in docs/errors.md; tests assert
//! codes, so a code never changes meaning once published.

macro_rules! codes {
    ($($name:ident = $code:literal, $summary:literal;)*) => {
        /// Every error tfc can report, by stable code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Code { $($name),* }

        impl Code {
            /// The stable code, e.g. `E0303`.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$name => $code),* }
            }

            /// A one-line summary, as listed in docs/errors.md.
            pub fn summary(self) -> &'static str {
                match self { $(Code::$name => $summary),* }
            }

            /// All codes, in order (used to check that docs/errors.md lists each).
            pub const ALL: &'static [Code] = &[$(Code::$name),*];
        }
    };
}

codes! {
    Io = "E0001", "a source or data file cannot be read";
    NotUtf8 = "E0002", "a source file is not valid UTF-8";
    EmptyProgram = "E0003", "the program contains no items or statements";
    ReplCommand = "E0004", "a REPL command is unknown or lacks its argument";
    NoPoints = "E0005", "a training log given to `tfc plot` has no points to draw";
    Syntax = "E0101", "syntax error: the parser expected something else";
    TooDeep = "E0102", "expressions or blocks are nested too deeply";
    BadNumber = "E0103", "a number literal is malformed or out of range";
    BadEscape = "E0104", "a string literal has an unknown escape";
    UnknownName = "E0201", "a name is not defined in scope";
    UnknownModule = "E0202", "a `use` names a module or item that does not exist";
    Duplicate = "E0203", "a name is defined twice in the same scope";
    UnknownArgument = "E0204", "a call passes a named argument the callee does not take";
    MissingArgument = "E0205", "a call omits a required argument";
    Arity = "E0206", "a call passes too many positional arguments";
    NotCallable = "E0207", "a value that is not a function or model is called";
    UnknownField = "E0208", "a model or value has no field or method of that name";
    DtypeMismatch = "E0301", "operands have different dtypes (no implicit promotion)";
    Broadcast = "E0302", "shapes cannot be broadcast together";
    MatmulShape = "E0303", "matrix product: inner dimensions differ or rank too low";
    Rank = "E0304", "an operand has the wrong rank";
    Axis = "E0305", "an axis is out of range for the operand's rank";
    Reshape = "E0306", "reshape: element counts differ or the target shape is malformed";
    Index = "E0307", "an index or slice is out of bounds or malformed";
    Annotation = "E0308", "a value does not match its declared type";
    Kind = "E0309", "a value of the wrong kind (e.g. a tuple where a tensor is expected)";
    Concat = "E0310", "concat/stack: operand shapes differ outside the axis";
    ConvShape = "E0311", "convolution or pooling: shapes or parameters do not fit";
    BadValue = "E0312", "an argument has an invalid value (e.g. not a permutation)";
    NotStatic = "E0313", "a value that must be known at compile time is not";
    Destructure = "E0314", "a tuple pattern does not match the value's arity";
    Ragged = "E0315", "a tensor literal is ragged or mixes kinds of elements";
    SymbolicDim = "E0316", "a symbolic dimension is bound to two different sizes";
    TooLarge = "E0317", "a tensor shape is too large to allocate";
    LossNotScalar = "E0318", "a training loss is not a float scalar";
    NoGradient = "E0319", "a trained parameter gets no gradient from the loss";
    LoopTooLong = "E0320", "a compile-time `for` loop would unroll too many iterations";
    StateWrite = "E0321", "a model's state is written outside the training step of its model";
    StaticAssert = "E0322", "a compile-time assertion (`static_assert`) failed";
    Precision = "E0323", "a training precision is unknown or has nothing to apply to";
    Quantize = "E0324", "a model cannot be quantized, or a quantized model is trained or loaded from an f32 file";
    ScanCarry = "E0330", "a `scan` function's result does not fit: not a pair, or a carry of another type";
    ScanLength = "E0331", "the tensors a `scan` steps through differ in length along axis 0";
    ExportType = "E0340", "an exported function's parameters or result have no fixed tensor types";
    OnnxExport = "E0341", "an exported function computes something ONNX export cannot write";
    OnnxParse = "E0342", "an ONNX model file does not parse";
    OnnxUnsupported = "E0343", "an ONNX model uses an operator, attribute, opset or dtype tfc cannot import";
    LibraryExport = "E0345", "an exported function computes something an ahead-of-time library cannot run";
    AssertFailed = "E0401", "assert_close found values that differ beyond the tolerance";
    Runtime = "E0402", "an operation failed while running (e.g. an index out of range)";
    Interrupted = "E0403", "the run was stopped by Ctrl-C";
    Launch = "E0410", "a multi-process run cannot start: workers, hosts, hostfile, TF_CONFIG or the MPI launcher";
    Shards = "E0411", "a data-parallel global batch does not split over the virtual shards and workers";
    RankMismatch = "E0412", "the ranks of a data-parallel run compiled different programs, shapes or kernels";
    RankSilent = "E0413", "a rank of a data-parallel run stopped answering or failed";
    Unsupported = "E0901", "the construct parses but is not executable in this version";
    OutOfMemory = "E0902", "the program needs more memory than the device has";
    Isa = "E0903", "the instruction set forced with `TFC_ISA` is unknown or this CPU lacks it";
    Internal = "E0999", "an internal compiler error (a bug in tfc)";
}
