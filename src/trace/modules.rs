//! `use` and the std modules: each module is parsed and traced once into its
//! own scope; `use std.nn.{Dense}` copies items into the importing scope,
//! `use std.nn` binds the module as a namespace. `std.math` is the prelude:
//! its scope is the parent of every program's scope.

use super::value::{Scope, Value};
use super::{TResult, Tracer};
use crate::diag::{did_you_mean, Code, Diagnostic};
use crate::syntax::ast::Ident;
use std::rc::Rc;

const PRELUDE: &str = "std.math";

impl Tracer<'_> {
    /// The scope a program runs in: a child of the prelude module's scope.
    pub(crate) fn prelude_scope(&mut self) -> Rc<Scope> {
        match self.load_module(PRELUDE, None) {
            Ok(m) => self.scopes.child(&m),
            Err(f) => {
                self.report(f);
                let builtins = self.builtin_scope();
                self.scopes.child(&builtins)
            }
        }
    }

    /// The outermost scope: names that are values rather than functions.
    fn builtin_scope(&mut self) -> Rc<Scope> {
        let root = self.scopes.root();
        root.set("auto", Value::Str("auto".into()));
        root
    }

    fn load_module(&mut self, name: &str, at: Option<&[Ident]>) -> TResult<Rc<Scope>> {
        if let Some(m) = self.modules.get(name) {
            return Ok(m.clone());
        }
        let Some(text) = crate::stdlib::source(name) else {
            let span = at.map(|p| p[0].span.to(p[p.len() - 1].span)).unwrap_or_default();
            let known = crate::stdlib::MODULES.iter().map(|(n, _)| *n);
            let mut d = Diagnostic::new(Code::UnknownModule, format!("there is no module `{name}`"))
                .label(span, "unknown module");
            if let Some(s) = did_you_mean(name, known) {
                d = d.help(format!("did you mean `{s}`?"));
            }
            return Err(d.into());
        };
        let file = self.sources.add(format!("std/{}.tfl", name.trim_start_matches("std.")), text);
        let program = crate::syntax::parse(text, file).map_err(|mut ds| super::Fail::from(ds.remove(0)))?;
        let parent = if name == PRELUDE { self.builtin_scope() } else { self.load_module(PRELUDE, None)? };
        let scope = self.scopes.child(&parent);
        // Mark the module loaded before running it, so an import cycle ends.
        self.modules.insert(name.to_string(), scope.clone());
        let before = self.diags.len();
        self.run_stmts(&program.stmts, &scope);
        if self.diags.len() > before {
            return Err(super::Fail::Poisoned);
        }
        Ok(scope)
    }

    pub(crate) fn import(&mut self, path: &[Ident], group: Option<&[Ident]>, env: &Rc<Scope>) -> TResult<()> {
        let dotted = |p: &[Ident]| p.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(".");
        if let Some(items) = group {
            let module = self.load_module(&dotted(path), Some(path))?;
            for item in items {
                self.import_item(&module, item, env)?;
            }
            return Ok(());
        }
        let full = dotted(path);
        if crate::stdlib::source(&full).is_some() {
            let module = self.load_module(&full, Some(path))?;
            if let Some(last) = path.last() {
                env.set(&last.name, Value::Module(module));
            }
            return Ok(());
        }
        // `use std.math.softmax` imports an item; when the prefix is not a
        // module either (`use std.mth`), the whole path is the unknown module
        // (not its prefix `std`), so the did-you-mean can find `std.math`.
        match path.split_last() {
            Some((item, module_path))
                if !module_path.is_empty() && crate::stdlib::source(&dotted(module_path)).is_some() =>
            {
                let module = self.load_module(&dotted(module_path), Some(module_path))?;
                self.import_item(&module, item, env)
            }
            _ => self.load_module(&full, Some(path)).map(|_| ()),
        }
    }

    fn import_item(&mut self, module: &Rc<Scope>, item: &Ident, env: &Rc<Scope>) -> TResult<()> {
        let found = module.get_local(&item.name).or_else(|| super::builtins::lookup(&item.name).map(Value::Builtin));
        match found {
            Some(v) => {
                env.set(&item.name, v);
                Ok(())
            }
            None => {
                let names = module.visible_names();
                let mut d = Diagnostic::new(Code::UnknownModule, format!("the module has no item `{}`", item.name))
                    .label(item.span, "not found in the module");
                if let Some(s) = did_you_mean(&item.name, names.iter().map(String::as_str)) {
                    d = d.help(format!("did you mean `{s}`?"));
                }
                Err(d.into())
            }
        }
    }
}
