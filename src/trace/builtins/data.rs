//! Dataset built-ins (§8): sources (`load_csv`, `load_idx`, `load_npy`,
//! `load_safetensors`, `load_text`, `from_tensors`, `range`),
//! transforms (`map filter shuffle batch repeat take skip cache prefetch
//! split`) and looking inside (`first count collect`). A dataset is a plan;
//! `map`/`filter` functions are traced once into regions over the element
//! types, like any other function. `load_csv` and `load_text` read their
//! file while checking,
//! and the binary loaders read (and size-check) theirs, because the element
//! shapes and count come from them.

use crate::diag::{Code, Diagnostic, Span};
use crate::ir::plan::{Dataset, FileFormat, FileSource, Region, RegionId, Source, Transform};
use crate::ir::{DType, Effect, Op, TensorType};
use crate::trace::args::BuiltinArgs;
use crate::trace::value::Value;
use crate::trace::{TResult, Tracer};
use std::rc::Rc;

impl Tracer<'_> {
    pub(crate) fn data_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        match a.name {
            "load_csv" => self.load_csv(a),
            "load_text" => self.load_text(a),
            "from_tensors" => self.tensors_source(a),
            "range" => {
                let n = a.int(0)?;
                if n < 0 {
                    return Err(a.bad_value(0, format!("the length cannot be negative ({n})")));
                }
                let n = n as usize;
                Ok(dataset(Dataset {
                    source: Source::Range(n),
                    transforms: vec![],
                    element: vec![TensorType::scalar(DType::I32)],
                    len: Some(n),
                    batch_sizes: vec![],
                }))
            }
            "first" | "collect" => self.collect_builtin(a),
            "count" => {
                let d = self.arg_dataset(a, 0)?;
                match d.len {
                    Some(n) => Ok(Value::Int(n as i64)),
                    None => Err(Diagnostic::new(
                        Code::NotStatic,
                        "the number of elements after `filter` is not known before running",
                    )
                    .label(a.span_of(0), "this dataset is filtered")
                    .into()),
                }
            }
            "split" => self.split(a),
            "load_npy" | "load_idx" | "load_safetensors" | "load_tfrecord" => self.load_file(a),
            _ => self.transform(a),
        }
    }

    pub(crate) fn arg_dataset(&mut self, a: &BuiltinArgs, i: usize) -> TResult<Rc<Dataset>> {
        match a.get(i) {
            Some((Value::Dataset(d), _)) => Ok(d.clone()),
            _ => Err(a.bad(i, "a dataset")),
        }
    }

    fn load_csv(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let path = match a.get(0) {
            Some((Value::Str(s), _)) => s.clone(),
            _ => return Err(a.bad(0, "a file path string")),
        };
        let label = match a.get(1) {
            None => None,
            Some(_) => Some(a.int(1)?),
        };
        let full = self.base_dir.join(&path);
        let key = (full.clone(), label);
        let host = match self.csv_cache.get(&key) {
            Some(h) => h.clone(),
            None => {
                let h = std::sync::Arc::new(
                    crate::io::csv::load_csv(&full, label).map_err(|d| d.label(a.span_of(0), "loaded here"))?,
                );
                self.csv_cache.insert(key, h.clone());
                h
            }
        };
        let n = host.columns.first().map(|(t, _)| t.shape[0]).unwrap_or(0);
        let element = host.columns.iter().map(|(t, _)| TensorType::new(t.dtype, t.shape[1..].to_vec())).collect();
        Ok(dataset(Dataset {
            source: Source::Host(host),
            transforms: vec![],
            element,
            len: Some(n),
            batch_sizes: vec![],
        }))
    }

    /// `load_text(path, window = none, stride = window)`: the file's bytes as
    /// `i32` scalars, or windows of `window` bytes every `stride` bytes
    /// (`io::text`), read now: the count comes from the file.
    fn load_text(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let path = match a.get(0) {
            Some((Value::Str(s), _)) => s.clone(),
            _ => return Err(a.bad(0, "a file path string")),
        };
        let positive = |i: usize, what: &str| -> TResult<usize> {
            let n = a.int(i)?;
            if n <= 0 {
                return Err(a.bad_value(i, format!("the {what} must be positive, not {n}")));
            }
            Ok(n as usize)
        };
        let window = match (a.get(1), a.get(2)) {
            (None, None) => None,
            (None, Some(_)) => return Err(a.bad_value(2, "a `stride` needs a `window`".to_string())),
            (Some(_), stride) => {
                let w = positive(1, "window")?;
                Some((w, if stride.is_some() { positive(2, "stride")? } else { w }))
            }
        };
        let host = crate::io::text::load_text(&self.base_dir.join(&path), window)
            .map_err(|d| d.label(a.span_of(0), "loaded here"))?;
        let n = host.columns[0].0.shape[0];
        let element = match window {
            Some((w, _)) => TensorType::new(DType::I32, vec![w]),
            None => TensorType::scalar(DType::I32),
        };
        Ok(dataset(Dataset {
            source: Source::Host(std::sync::Arc::new(host)),
            transforms: vec![],
            element: vec![element],
            len: Some(n),
            batch_sizes: vec![],
        }))
    }

    /// `load_idx(images, labels)`, `load_npy(path)`, `load_safetensors(path,
    /// keys…)`, `load_tfrecord(paths, features…)`: the headers are read now
    /// (element types and counts), the data when running. Every path but
    /// safetensors' may be a pattern or a tuple of paths and patterns: the
    /// shards, read one after another.
    fn load_file(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let (format, shards, keys) = match a.name {
            "load_idx" => {
                let images = self.shard_paths(a, 0)?;
                let labels = match a.get(1) {
                    Some(_) => Some(self.shard_paths(a, 1)?),
                    None => None,
                };
                if let Some(labels) = labels.as_ref().filter(|l| l.len() != images.len()) {
                    return Err(Diagnostic::new(
                        Code::Io,
                        format!(
                            "{} images files but {} labels files: each images file needs its labels file",
                            images.len(),
                            labels.len()
                        ),
                    )
                    .label(a.span, "loaded here")
                    .into());
                }
                let shards = images
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| std::iter::once(p).chain(labels.as_ref().map(|l| l[i].clone())).collect())
                    .collect();
                (FileFormat::Idx, shards, vec![])
            }
            "load_npy" => (FileFormat::Npy, self.shard_paths(a, 0)?.into_iter().map(|p| vec![p]).collect(), vec![]),
            "load_tfrecord" => (
                FileFormat::TfRecord,
                self.shard_paths(a, 0)?.into_iter().map(|p| vec![p]).collect(),
                string_args(a, 1, "feature names (strings)")?,
            ),
            _ => {
                let Some((Value::Str(path), _)) = a.get(0) else { return Err(a.bad(0, "a file path string")) };
                (
                    FileFormat::Safetensors,
                    vec![vec![self.base_dir.join(path)]],
                    string_args(a, 1, "tensor names (strings)")?,
                )
            }
        };
        let probed = crate::io::loaders::probe(format, &shards, &keys).map_err(|d| d.label(a.span, "loaded here"))?;
        let n = probed.columns.first().map(|t| t.shape[0]).unwrap_or(0);
        let element = probed.columns.iter().map(|t| TensorType::new(t.dtype, t.shape[1..].to_vec())).collect();
        let source = FileSource { format, shards, keys, columns: probed.columns, counts: probed.counts };
        Ok(dataset(Dataset {
            source: Source::File(std::sync::Arc::new(source)),
            transforms: vec![],
            element,
            len: Some(n),
            batch_sizes: vec![],
        }))
    }

    /// The files argument `i` names: a path, a pattern
    /// (`data/train-*.tfrecord`, expanded now, sorted) or a tuple of paths
    /// and patterns.
    fn shard_paths(&self, a: &BuiltinArgs, i: usize) -> TResult<Vec<std::path::PathBuf>> {
        let given: Vec<String> = match a.get(i) {
            Some((Value::Str(s), _)) => vec![s.clone()],
            Some((Value::Tuple(items), _)) if !items.is_empty() => items
                .iter()
                .map(|v| match v {
                    Value::Str(s) => Ok(s.clone()),
                    _ => Err(a.bad(i, "file paths (strings)")),
                })
                .collect::<TResult<_>>()?,
            _ => return Err(a.bad(i, "a file path or pattern, or a tuple of them")),
        };
        let mut paths = Vec::new();
        for pattern in &given {
            let found =
                crate::io::glob::expand(&self.base_dir, pattern).map_err(|d| d.label(a.span_of(i), "these files"))?;
            paths.extend(found);
        }
        Ok(paths)
    }

    fn tensors_source(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let parts: Vec<(Value, Span)> = match a.get(0) {
            Some((Value::Tuple(items), s)) => items.iter().map(|v| (v.clone(), *s)).collect(),
            _ => return Err(a.bad(0, "one or more tensors")),
        };
        let mut ids = Vec::new();
        let mut element = Vec::new();
        let mut n = None;
        for (v, s) in &parts {
            let o = self.operand(v, None, *s)?;
            let Some(&first) = o.ty.shape.first() else {
                return Err(Diagnostic::new(
                    Code::Rank,
                    format!("`from_tensors` needs tensors of rank ≥ 1 (elements along the first axis), found {}", o.ty),
                )
                .label(*s, o.ty.to_string())
                .into());
            };
            if n.is_some_and(|n| n != first) {
                return Err(Diagnostic::new(
                    Code::Concat,
                    format!(
                        "`from_tensors`: the tensors hold different numbers of elements ({} and {first})",
                        n.unwrap_or(0)
                    ),
                )
                .label(*s, o.ty.to_string())
                .into());
            }
            n = Some(first);
            ids.push(o.id);
            element.push(TensorType::new(o.ty.dtype, o.ty.shape[1..].to_vec()));
        }
        Ok(dataset(Dataset { source: Source::Nodes(ids), transforms: vec![], element, len: n, batch_sizes: vec![] }))
    }

    fn split(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let d = self.arg_dataset(a, 0)?;
        let fraction = a.float_or(1, 0.5)?;
        if !(0.0..=1.0).contains(&fraction) {
            return Err(a.bad_value(1, format!("the fraction must be in [0, 1], not {fraction}")));
        }
        let seed = a.int_or(2, 0)? as u64;
        let Some(len) = d.len else {
            return Err(Diagnostic::new(
                Code::NotStatic,
                "`split` needs a dataset whose length is known (not filtered)",
            )
            .label(a.span_of(0), "filtered dataset")
            .into());
        };
        let count = (fraction * len as f64).round() as usize;
        let part = |first: bool, n: usize| {
            let mut p = (*d).clone();
            p.transforms.push(Transform::Split { seed, count, first });
            p.len = Some(n);
            dataset(p)
        };
        Ok(Value::Tuple(vec![part(true, count), part(false, len - count)]))
    }

    fn transform(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let d = self.arg_dataset(a, 0)?;
        let mut out = (*d).clone();
        let t = match a.name {
            "map" | "filter" => {
                let f = a.get(1).map(|(v, _)| v.clone()).ok_or_else(|| a.bad(1, "a function"))?;
                let (mut regions, outputs, sizes) = self.function_regions(&d, f, a.span_of(1), a.span)?;
                let by_size = regions.len() > 1;
                let region = regions.remove(0).1;
                let one_or_by_size = |region: Region, filter: bool, rest: Vec<(usize, Region)>| {
                    if by_size {
                        let mut all = vec![(d.batch_sizes[0], region)];
                        all.extend(rest);
                        Transform::BySize { filter, regions: all }
                    } else if filter {
                        Transform::Filter(region)
                    } else {
                        Transform::Map(region)
                    }
                };
                if a.name == "filter" {
                    match outputs.as_slice() {
                        [t] if t.dtype == DType::Bool && t.rank() == 0 => {}
                        _ => {
                            return Err(Diagnostic::new(
                                Code::Kind,
                                format!(
                                    "a `filter` function must return a bool scalar, it returns {}",
                                    types_text(&outputs)
                                ),
                            )
                            .label(a.span_of(1), "this function")
                            .into())
                        }
                    }
                    out.len = None;
                    one_or_by_size(region, true, regions)
                } else {
                    out.element = outputs;
                    out.batch_sizes = sizes;
                    let parallel = match a.get(2) {
                        None => None,
                        Some((Value::Str(s), _)) if s == "auto" => Some(None),
                        Some(_) => {
                            let n = a.int(2)?;
                            if n <= 0 {
                                return Err(a.bad_value(2, format!("`parallel` must be positive or `auto`, not {n}")));
                            }
                            Some(Some(n as usize))
                        }
                    };
                    let map = one_or_by_size(region, false, regions);
                    if let Some(p) = parallel {
                        out.transforms.push(map);
                        Transform::Parallel(p)
                    } else {
                        map
                    }
                }
            }
            "shuffle" => {
                let buffer = a.int(1)?;
                if buffer <= 0 {
                    return Err(a.bad_value(1, format!("the buffer size must be positive, not {buffer}")));
                }
                Transform::Shuffle { buffer: buffer as usize, seed: a.int_or(2, 0)? as u64 }
            }
            "batch" => {
                let n = a.int(1)?;
                if n <= 0 {
                    return Err(a.bad_value(1, format!("the batch size must be positive, not {n}")));
                }
                if !d.batch_sizes.is_empty() {
                    return Err(Diagnostic::new(Code::Unsupported, "batching a batched dataset is not supported yet")
                        .label(a.span, "second batch")
                        .into());
                }
                let n = n as usize;
                let drop = a.bool_or(2, false)?;
                // Every batch size gets its own compiled step (or metric, or
                // function), so each must be known before running.
                if d.len.is_none() && !drop {
                    return Err(Diagnostic::new(
                        Code::NotStatic,
                        "the size of the last batch of a filtered dataset is not known before running",
                    )
                    .label(a.span, "this batch")
                    .help(format!(
                        "after `filter` the number of elements is not known; use `batch({n}, drop_remainder = true)`"
                    ))
                    .into());
                }
                out.element =
                    d.element.iter().map(|t| TensorType::new(t.dtype, [vec![n], t.shape.clone()].concat())).collect();
                out.batch_sizes = vec![n];
                if let Some(len) = d.len {
                    if !drop && len % n != 0 {
                        out.batch_sizes.push(len % n);
                    }
                    out.len = Some(if drop { len / n } else { len.div_ceil(n) });
                }
                Transform::Batch { n, drop_remainder: drop }
            }
            "repeat" => match a.get(1) {
                None => Transform::Repeat(None),
                Some(_) => {
                    let n = a.int(1)?;
                    if n < 0 {
                        return Err(a.bad_value(1, format!("the count cannot be negative ({n})")));
                    }
                    out.len = d.len.map(|l| l * n as usize);
                    Transform::Repeat(Some(n as usize))
                }
            },
            "take" | "skip" => {
                let n = a.int(1)?;
                if n < 0 {
                    return Err(a.bad_value(1, format!("the count cannot be negative ({n})")));
                }
                let n = n as usize;
                out.len = d.len.map(|l| if a.name == "take" { l.min(n) } else { l.saturating_sub(n) });
                if a.name == "take" {
                    Transform::Take(n)
                } else {
                    Transform::Skip(n)
                }
            }
            "interleave" => {
                if !matches!(d.source, Source::File(_)) || !d.transforms.is_empty() {
                    return Err(Diagnostic::new(
                        Code::Unsupported,
                        "`interleave` reads the shard files of a source: put it right after `load_tfrecord`, `load_npy` or `load_idx`",
                    )
                    .label(a.span_of(0), "not a file source")
                    .into());
                }
                let positive = |i: usize, what: &str, default: i64| -> TResult<usize> {
                    let n = if a.get(i).is_some() { a.int(i)? } else { default };
                    if n <= 0 {
                        return Err(a.bad_value(i, format!("`{what}` must be positive, not {n}")));
                    }
                    Ok(n as usize)
                };
                let parallel = match a.get(3) {
                    None => None,
                    Some((Value::Str(s), _)) if s == "auto" => Some(None),
                    Some(_) => Some(Some(positive(3, "parallel", 1)?)),
                };
                Transform::Interleave {
                    cycle: positive(1, "cycle_length", 1)?,
                    block: positive(2, "block_length", 1)?,
                    parallel,
                }
            }
            "cache" => match a.get(1) {
                None => Transform::Cache(None),
                Some((Value::Str(s), _)) => Transform::Cache(Some(self.base_dir.join(s))),
                Some(_) => return Err(a.bad(1, "a file path string")),
            },
            _ => match a.get(1) {
                Some((Value::Str(s), _)) if s == "auto" => Transform::Prefetch(None),
                None => Transform::Prefetch(None),
                Some(_) => {
                    let k = a.int(1)?;
                    if k <= 0 {
                        return Err(a.bad_value(1, format!("the prefetch buffer must be positive or `auto`, not {k}")));
                    }
                    Transform::Prefetch(Some(k as usize))
                }
            },
        };
        out.transforms.push(t);
        Ok(dataset(out))
    }

    /// Traces `f` over the elements of `d`: once, or — after a `batch` that
    /// leaves a shorter last batch — once per batch size, since each size is
    /// compiled on its own. Returns the regions with their batch sizes (full
    /// batches first), the output types for the first, and the batch sizes
    /// of the result: the same when every output keeps the batch axis in
    /// front, none when every output is the same for each size.
    #[allow(clippy::type_complexity)]
    fn function_regions(
        &mut self,
        d: &Dataset,
        f: Value,
        f_span: Span,
        span: Span,
    ) -> TResult<(Vec<(usize, Region)>, Vec<TensorType>, Vec<usize>)> {
        let (region, types) = self.element_region(&d.element, f.clone(), f_span, span)?;
        let Some((&full, shorter)) = d.batch_sizes.split_first() else {
            return Ok((vec![(0, region)], types, vec![]));
        };
        let mut regions = vec![(full, region)];
        let (mut batched, mut same) = (true, true);
        for &size in shorter {
            let element: Vec<TensorType> = d
                .element
                .iter()
                .map(|t| TensorType::new(t.dtype, [vec![size], t.shape[1..].to_vec()].concat()))
                .collect();
            let (region, other) = self.element_region(&element, f.clone(), f_span, span)?;
            same &= other == types;
            batched &= other.len() == types.len()
                && types.iter().zip(&other).all(|(a, b)| {
                    a.dtype == b.dtype
                        && a.shape.first() == Some(&full)
                        && b.shape.first() == Some(&size)
                        && a.shape[1..] == b.shape[1..]
                });
            if !batched && !same {
                return Err(Diagnostic::new(
                    Code::Unsupported,
                    format!(
                        "a function over batches must keep the batch axis in front in every output, or give \
                         the same types for every batch size: batches of {full} give {}, the last batch of \
                         {size} gives {}",
                        types_text(&types),
                        types_text(&other)
                    ),
                )
                .label(f_span, "this function")
                .into());
            }
            regions.push((size, region));
        }
        let sizes = if batched { d.batch_sizes.clone() } else { vec![] };
        Ok((regions, types, sizes))
    }

    /// Traces `f` once over slots of the element types; returns the region
    /// and its output types.
    fn element_region(
        &mut self,
        element: &[TensorType],
        f: Value,
        f_span: Span,
        span: Span,
    ) -> TResult<(Region, Vec<TensorType>)> {
        let (mut inputs, args) = self.slots_for(element, span);
        // Random ops in `f` (`dropout`, std.augment) draw from the element's
        // key — its index and the epoch, bound by the runtime after the
        // parts — so each element gets its own values, the same at any
        // `parallel` setting. The key slot exists only if something draws.
        let saved = (self.step_counter.take(), self.element_key.replace(None));
        let out = self.call_value(f, f_span, args, vec![], span);
        let key = self.element_key.take().flatten();
        (self.step_counter, self.element_key) = saved;
        let out = out?;
        if let Some((slot, _)) = key {
            inputs.push((slot, TensorType::scalar(DType::F32)));
        }
        let parts = match out {
            Value::Tuple(items) => items,
            v => vec![v],
        };
        let mut outputs = Vec::new();
        let mut types = Vec::new();
        for p in parts {
            let o = self.operand(&p, None, span)?;
            outputs.push(o.id);
            types.push(o.ty);
        }
        Ok((Region { id: self.new_region(), inputs, outputs }, types))
    }

    /// Fresh slot nodes for values of `types`: the region inputs and the
    /// values to pass as arguments.
    #[allow(clippy::type_complexity)]
    pub(crate) fn slots_for(
        &mut self,
        types: &[TensorType],
        span: Span,
    ) -> (Vec<(usize, TensorType)>, Vec<(Value, Span)>) {
        let mut inputs = Vec::new();
        let mut args = Vec::new();
        for t in types {
            let slot = self.new_slot();
            let id = self.graph.add(Op::Slot { slot, ty: t.clone() }, &[], t.clone(), span);
            inputs.push((slot, t.clone()));
            args.push((Value::Tensor(id, t.clone()), span));
        }
        (inputs, args)
    }

    /// The counter random ops mix into their seed: inside a `scan`'s
    /// function one that also counts the loop's steps (`scan_counters`),
    /// else the step inside a train step, the element key inside a
    /// `map`/`filter` function (its slot is created on first use), none
    /// elsewhere.
    pub(crate) fn random_counter(&mut self, span: Span) -> TResult<Option<crate::ir::NodeId>> {
        if let Some(innermost) = self.scan_counters.len().checked_sub(1) {
            return self.scan_random_counter(innermost, span).map(Some);
        }
        Ok(self.outer_random_counter(span))
    }

    /// [`Self::random_counter`] outside any `scan`.
    pub(crate) fn outer_random_counter(&mut self, span: Span) -> Option<crate::ir::NodeId> {
        if self.step_counter.is_some() {
            return self.step_counter;
        }
        match self.element_key {
            Some(Some((_, id))) => Some(id),
            Some(None) => {
                let ty = TensorType::scalar(DType::F32);
                let slot = self.new_slot();
                let id = self.graph.add(Op::Slot { slot, ty: ty.clone() }, &[], ty, span);
                self.element_key = Some(Some((slot, id)));
                Some(id)
            }
            None => None,
        }
    }

    pub(crate) fn new_slot(&mut self) -> usize {
        self.next_slot += 1;
        self.next_slot
    }

    /// A region id unique in the program (`Region::id`).
    pub(crate) fn new_region(&mut self) -> RegionId {
        self.next_region += 1;
        RegionId(self.next_region)
    }

    fn collect_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let d = self.arg_dataset(a, 0)?;
        let all = a.name == "collect";
        let types: Vec<TensorType> = if all {
            let Some(n) = d.len else {
                return Err(Diagnostic::new(
                    Code::NotStatic,
                    "`collect` needs a dataset whose length is known (not filtered)",
                )
                .label(a.span_of(0), "filtered dataset")
                .into());
            };
            if d.batch_sizes.len() > 1 {
                return Err(Diagnostic::new(
                    Code::Unsupported,
                    "`collect` of batches of different sizes is not supported; collect before batching or use `drop_remainder = true`",
                )
                .label(a.span_of(0), "the last batch is smaller")
                .into());
            }
            d.element.iter().map(|t| TensorType::new(t.dtype, [vec![n], t.shape.clone()].concat())).collect()
        } else {
            d.element.clone()
        };
        self.collected(&d, &types, all, a.span)
    }

    /// What `first(d)` (or, with `all`, `collect(d)`, its elements stacked
    /// as `types`) gives: values that an effect fills when it runs.
    pub(crate) fn collected(&mut self, d: &Dataset, types: &[TensorType], all: bool, span: Span) -> TResult<Value> {
        let mut slots = Vec::new();
        let mut values = Vec::new();
        for t in types {
            crate::trace::tensor::check_size(&t.shape, span)?;
            let slot = self.new_slot();
            let id = self.graph.add(Op::Slot { slot, ty: t.clone() }, &[], t.clone(), span);
            slots.push(slot);
            values.push(Value::Tensor(id, t.clone()));
        }
        self.effects.push(Effect::Collect { data: Box::new(d.clone()), all, slots, span });
        Ok(if values.len() == 1 { values.remove(0) } else { Value::Tuple(values) })
    }
}

fn dataset(d: Dataset) -> Value {
    Value::Dataset(Rc::new(d))
}

fn types_text(types: &[TensorType]) -> String {
    match types {
        [t] => t.to_string(),
        ts => format!("({})", ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// `(f32[64], i32[])`-style description of a dataset's elements.
pub fn elements_text(d: &Dataset) -> String {
    let n = d.len.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
    format!("{n} elements {}", types_text(&d.element))
}

/// Argument `i` of `a` and the rest as strings (`load_safetensors`'s tensor
/// names, `load_tfrecord`'s features), or none.
fn string_args(a: &BuiltinArgs, i: usize, what: &str) -> TResult<Vec<String>> {
    match a.get(i) {
        None => Ok(vec![]),
        Some((Value::Tuple(items), _)) => items
            .iter()
            .map(|v| match v {
                Value::Str(s) => Ok(s.clone()),
                _ => Err(a.bad(i, what)),
            })
            .collect(),
        Some(_) => Err(a.bad(i, what)),
    }
}
