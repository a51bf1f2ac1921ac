//! The scopes a trace makes, and their teardown.
//!
//! A function value keeps the scope it was defined in (`Closure::env`), and
//! that scope binds the function: a reference cycle that `Rc` never frees
//! (every `fn` of the prelude is one). So every scope is made through
//! `Scopes`, which remembers it weakly; dropping `Scopes` (the tracer's at
//! the end of a file's trace, the REPL session's when the session ends)
//! empties every scope still alive, which breaks every cycle at once.
//!
//! A call or block scope is also released when its code is done, if the only
//! references left to it are functions bound in it that nothing else holds
//! (a local lambda): a long REPL session does not accumulate those.
//!
//! ```text
//! let mut scopes = Scopes::default();
//! let s = scopes.child(&parent);   // remembered
//! …                                 // fn f bound in s: s -> f -> s
//! drop(scopes);                    // s emptied: f and s are freed
//! ```

use super::value::{Scope, Value};
use std::rc::{Rc, Weak};

/// Every scope made during a trace (or a REPL session), held weakly.
#[derive(Default)]
pub struct Scopes {
    made: Vec<Weak<Scope>>,
    /// How many were alive at the last pruning: the list is pruned of dead
    /// scopes when it has doubled since, so it stays proportional to the
    /// scopes alive (amortized constant work per scope).
    alive_at_prune: usize,
}

impl Scopes {
    /// A scope with no parent.
    pub fn root(&mut self) -> Rc<Scope> {
        self.remember(Rc::new(Scope::default()))
    }

    /// A scope whose names fall back to `parent`'s.
    pub fn child(&mut self, parent: &Rc<Scope>) -> Rc<Scope> {
        self.remember(Scope::child(parent))
    }

    /// How many of the scopes made are still alive.
    pub fn alive(&self) -> usize {
        self.made.iter().filter(|w| w.strong_count() > 0).count()
    }

    fn remember(&mut self, scope: Rc<Scope>) -> Rc<Scope> {
        if self.made.len() >= 2 * self.alive_at_prune.max(32) {
            self.made.retain(|w| w.strong_count() > 0);
            self.alive_at_prune = self.made.len();
        }
        self.made.push(Rc::downgrade(&scope));
        scope
    }
}

impl Drop for Scopes {
    fn drop(&mut self) {
        for weak in self.made.drain(..) {
            if let Some(scope) = weak.upgrade() {
                // Taken out first and dropped after: dropping the values may
                // drop other scopes, never this one (held here).
                drop(scope.take_vars());
            }
        }
    }
}

/// Called by the code that made `scope` when it is done with it: if every
/// other reference to `scope` comes from a function value bound in it (or in
/// a tuple bound in it) that nothing outside the scope holds, the scope can
/// never be reached again, and it is emptied now.
pub fn release_if_unreachable(scope: Rc<Scope>) {
    let others = Rc::strong_count(&scope) - 1;
    if others == 0 {
        return; // freed as `scope` drops
    }
    let mut holders: Vec<(*const (), usize, usize)> = Vec::new(); // (holder, its count, seen in scope)
    let mut closed = true;
    scope.for_each_local(|v| closed &= note_holders(v, &scope, &mut holders));
    let inside_only = holders.iter().all(|&(_, count, seen)| count == seen);
    if closed && inside_only && holders.len() == others {
        drop(scope.take_vars());
    }
}

/// Records the values in `v` that hold `scope` (each `Rc` once, with how
/// often it is seen); false when `v` could hold `scope` in a way not counted.
fn note_holders(v: &Value, scope: &Rc<Scope>, holders: &mut Vec<(*const (), usize, usize)>) -> bool {
    let mut note = |ptr: *const (), count: usize| match holders.iter_mut().find(|h| h.0 == ptr) {
        Some(h) => h.2 += 1,
        None => holders.push((ptr, count, 1)),
    };
    match v {
        Value::Func(c) if Rc::ptr_eq(&c.env, scope) => note(Rc::as_ptr(c).cast(), Rc::strong_count(c)),
        Value::ModelDef(d) if Rc::ptr_eq(&d.env, scope) => note(Rc::as_ptr(d).cast(), Rc::strong_count(d)),
        Value::OptimizerDef(d) if Rc::ptr_eq(&d.env, scope) => note(Rc::as_ptr(d).cast(), Rc::strong_count(d)),
        Value::Optimizer(o) if Rc::ptr_eq(&o.scope, scope) => note(Rc::as_ptr(o).cast(), Rc::strong_count(o)),
        Value::Tuple(items) => return items.iter().all(|i| note_holders(i, scope, holders)),
        // A module is a scope itself; a `grad` keeps a function inside it:
        // not counted, so the scope is left to the teardown.
        Value::Module(_) | Value::Grad(_) => return false,
        _ => {}
    }
    true
}
