//! purebee patch: bounds for the engine's recursive walks over values.
//!
//! Formatting (`{{ value }}`, `~`, `|string`, `|pprint`), JSON serialization
//! (`|tojson`), comparisons and hashing walk a value and everything it
//! contains, recursively and without access to the [`State`](crate::State)
//! of the render.  Two things bound them here:
//!
//! * a nesting depth ([`MAX_VALUE_DEPTH`]): a value nested deeper than that
//!   (a namespace that holds itself is infinitely deep) is not walked further,
//!   so the walk cannot overflow the stack;
//! * with the `fuel` feature, the fuel of the render in progress, which is
//!   reachable from a thread-local while the engine evaluates instructions:
//!   the walks charge for every item they visit and every byte of string they
//!   copy *while* walking, and stop early once the fuel is used up (formatting
//!   truncates its output, comparisons give up), so that a value which is
//!   small in memory but huge when written out (a list that holds one list
//!   twice, forty levels deep: 2^40 items) cannot run for ever or exhaust
//!   the memory before it is charged.
//!
//! A walk that stops for either reason leaves the fuel tracker exhausted
//! (for the depth limit, with a reason), so the next instruction of the
//! render fails: with [`ErrorKind::OutOfFuel`] for fuel, with
//! [`ErrorKind::InvalidOperation`] naming the depth limit for nesting.
use std::cell::Cell;
#[cfg(feature = "fuel")]
use std::cell::RefCell;
#[cfg(feature = "fuel")]
use std::sync::Arc;

use crate::error::{Error, ErrorKind};
use crate::value::namespace_object::Namespace;
#[cfg(feature = "fuel")]
use crate::vm::fuel::FuelShared;

// purebee patch: the namespaces made by the render in progress on this thread (see
// `NamespaceScope`).
thread_local! {
    static RENDER_NAMESPACES: std::cell::RefCell<Option<Vec<std::sync::Arc<Namespace>>>> =
        const { std::cell::RefCell::new(None) };
}

/// purebee patch: while alive (around one `Template::render`), every namespace that
/// `namespace()` makes on this thread is recorded, and when it drops each one is emptied.
/// A namespace is the only value a template can change after making it, so it is the only
/// way a template builds a reference cycle (`{% set ns.a = ns %}`), which reference
/// counting never frees: without this, every render of such a template leaked what the
/// cycle held (up to what its fuel let it make). Emptying the namespaces breaks every
/// cycle; a render's result is text, so no namespace is used after it.
pub(crate) struct NamespaceScope {
    outer: Option<Vec<std::sync::Arc<Namespace>>>,
}

impl NamespaceScope {
    pub(crate) fn new() -> NamespaceScope {
        NamespaceScope {
            outer: RENDER_NAMESPACES
                .try_with(|current| current.replace(Some(Vec::new())))
                .ok()
                .flatten(),
        }
    }
}

impl Drop for NamespaceScope {
    fn drop(&mut self) {
        let outer = self.outer.take();
        let made = RENDER_NAMESPACES
            .try_with(|current| current.replace(outer))
            .ok()
            .flatten();
        for ns in made.into_iter().flatten() {
            ns.clear();
        }
    }
}

/// purebee patch: records a namespace made during a render (see [`NamespaceScope`]).
pub(crate) fn track_namespace(ns: &std::sync::Arc<Namespace>) {
    let _ = RENDER_NAMESPACES.try_with(|current| {
        if let Some(made) = current.borrow_mut().as_mut() {
            made.push(ns.clone());
        }
    });
}

/// The deepest nesting of values that formatting, serialization, comparison
/// and hashing walk.  Real data is nested a few levels deep; each level costs
/// a handful of stack frames (a few KiB in unoptimized builds), so this
/// stays well within a 2 MiB thread stack.
pub(crate) const MAX_VALUE_DEPTH: usize = 200;

/// The cost of one item visited by a walk, in fuel units.
#[cfg(feature = "fuel")]
pub(crate) const ITEM_COST: u64 = crate::vm::fuel::ITEM_COST;
/// The cost of one item visited by a walk, in fuel units.
#[cfg(not(feature = "fuel"))]
pub(crate) const ITEM_COST: u64 = 32;

thread_local! {
    // The nesting depth of the walk in progress on this thread.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    // The fuel of the render in progress on this thread.
    #[cfg(feature = "fuel")]
    static FUEL: RefCell<Option<Arc<FuelShared>>> = const { RefCell::new(None) };
}

/// The error of a value nested more than [`MAX_VALUE_DEPTH`] levels deep.
pub(crate) fn too_deep_error() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "value nested more than {MAX_VALUE_DEPTH} levels deep (does it contain itself?)"
        ),
    )
}

/// Is `err` the error of [`too_deep_error`] or of running out of fuel?
///
/// Filters that wrap the errors of a walk (`tojson`) pass these through.
pub(crate) fn is_limit_error(err: &Error) -> bool {
    #[cfg(feature = "fuel")]
    if err.kind() == ErrorKind::OutOfFuel {
        return true;
    }
    err.kind() == ErrorKind::InvalidOperation
        && err
            .detail()
            .is_some_and(|d| d.starts_with("value nested more than"))
}

/// One nesting level of a walk, left when dropped.
pub(crate) struct Level(());

impl Drop for Level {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// The nesting depth of the walk in progress (0 outside of walks).
#[inline]
pub(crate) fn depth() -> usize {
    DEPTH.try_with(|d| d.get()).unwrap_or(0)
}

/// Enters one nesting level of a walk over a container, charging `units`
/// of fuel for it.
///
/// Fails, and the walk must stop, past [`MAX_VALUE_DEPTH`] levels (which
/// also exhausts the fuel of the render, with the depth as the reason) or
/// when the fuel is used up.  The error says which.
#[inline]
pub(crate) fn enter(units: u64) -> Result<Level, Error> {
    let depth = depth();
    if depth >= MAX_VALUE_DEPTH {
        #[cfg(feature = "fuel")]
        with_fuel(|fuel| fuel.exhaust_too_deep());
        return Err(too_deep_error());
    }
    ok!(charge(units));
    let _ = DEPTH.try_with(|d| d.set(depth + 1));
    Ok(Level(()))
}

/// Charges `units` of fuel to the render in progress, if any.
///
/// Fails once the fuel is used up (and on every later call).
#[inline]
pub(crate) fn charge(units: u64) -> Result<(), Error> {
    #[cfg(feature = "fuel")]
    {
        with_fuel(|fuel| fuel.consume(units)).unwrap_or(Ok(()))
    }
    #[cfg(not(feature = "fuel"))]
    {
        let _ = units;
        Ok(())
    }
}

/// Charges for one item of a container that a walk visits (`units` on top
/// of [`ITEM_COST`], such as the bytes of a string), but only inside a
/// walk: values formatted at the top level are charged by the engine.
#[inline]
pub(crate) fn charge_item(units: u64) -> Result<(), Error> {
    if depth() == 0 {
        Ok(())
    } else {
        charge(ITEM_COST.saturating_add(units))
    }
}

/// Is the fuel of the render in progress used up (so that a walk should
/// stop visiting items)?
#[inline]
pub(crate) fn exhausted() -> bool {
    #[cfg(feature = "fuel")]
    {
        with_fuel(|fuel| fuel.is_exhausted()).unwrap_or(false)
    }
    #[cfg(not(feature = "fuel"))]
    {
        false
    }
}

#[cfg(feature = "fuel")]
#[inline]
fn with_fuel<R>(f: impl FnOnce(&FuelShared) -> R) -> Option<R> {
    FUEL.try_with(|fuel| fuel.borrow().as_deref().map(f))
        .ok()
        .flatten()
}

/// Makes `fuel` the fuel that walks charge on this thread until dropped,
/// when the previous one is restored.
#[cfg(feature = "fuel")]
pub(crate) struct FuelScope {
    previous: Option<Arc<FuelShared>>,
}

#[cfg(feature = "fuel")]
impl FuelScope {
    pub(crate) fn new(fuel: Option<Arc<FuelShared>>) -> FuelScope {
        FuelScope {
            previous: FUEL
                .try_with(|current| current.replace(fuel))
                .ok()
                .flatten(),
        }
    }
}

#[cfg(feature = "fuel")]
impl Drop for FuelScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        let _ = FUEL.try_with(|current| current.replace(previous));
    }
}
