//! Marks the request path of the current thread, so a test's counting global allocator can tell
//! allocations made while handling requests and replies (which the steady GET/SET path must not
//! make) from the runtime's own (one record per io_uring operation in compio). One thread-local
//! increment and decrement per read batch; nothing is shared between threads.

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// While alive, the current thread is on the request path (see [`in_request_path`]).
pub struct RequestPath(());

impl RequestPath {
    /// Enters the request path until the returned guard drops (nesting allowed).
    #[inline]
    pub fn enter() -> RequestPath {
        DEPTH.with(|d| d.set(d.get() + 1));
        RequestPath(())
    }
}

impl Drop for RequestPath {
    #[inline]
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// True while the current thread parses, routes or answers requests, or matches upstream replies
/// to them. Safe to call from a global allocator (no allocation, const-initialised thread local).
#[inline]
pub fn in_request_path() -> bool {
    DEPTH.try_with(|d| d.get() > 0).unwrap_or(false)
}
