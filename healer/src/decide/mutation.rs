//! The mutation checks' switch: in tests, a guard can be turned off for one thread, so
//! the simulation can show that each guard is what keeps its invariant (with it off, a
//! seed fails). Outside tests every guard is always on and this compiles away.

#[cfg(test)]
use std::cell::RefCell;
#[cfg(test)]
use std::collections::BTreeSet;

#[cfg(test)]
thread_local! {
    static OFF: RefCell<BTreeSet<&'static str>> = const { RefCell::new(BTreeSet::new()) };
}

/// Whether the guard named `rule` is on (always, outside tests).
#[inline]
pub(crate) fn on(rule: &'static str) -> bool {
    #[cfg(test)]
    {
        !OFF.with(|o| o.borrow().contains(rule))
    }
    #[cfg(not(test))]
    {
        let _ = rule;
        true
    }
}

/// Runs `f` with the guard named `rule` off in this thread.
#[cfg(test)]
pub(crate) fn without<T>(rule: &'static str, f: impl FnOnce() -> T) -> T {
    OFF.with(|o| o.borrow_mut().insert(rule));
    let out = f();
    OFF.with(|o| o.borrow_mut().remove(rule));
    out
}
