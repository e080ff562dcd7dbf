//! Holds a session's next request until an upstream exchange has answered: what a request that
//! runs on a leased connection (EXEC, WATCH, a blocking command) sets, so the client's later
//! requests run after it, in order, as at Redis.

use std::cell::{Cell, RefCell};

use super::transaction::Watch;
use crate::net::Notify;

/// One exchange the session waits for.
#[derive(Default)]
pub(super) struct Barrier {
    done: Cell<bool>,
    notify: Notify,
    /// The held connection (a WATCH's, an open transaction's) coming back from the exchange.
    watch: RefCell<Option<Watch>>,
    /// Set for a request that may block for long (BLPOP & co.): the session watches its client
    /// meanwhile and stops the exchange when it leaves.
    blocking: bool,
    stopped: Cell<bool>,
    stop: Notify,
}

impl Barrier {
    /// A barrier for an exchange that ends within `op_timeout` (EXEC, WATCH).
    pub(super) fn new() -> Barrier {
        Barrier::default()
    }

    /// A barrier for a blocking request, which the session may stop.
    pub(super) fn blocking() -> Barrier {
        Barrier {
            blocking: true,
            ..Barrier::default()
        }
    }

    /// True for a blocking request's barrier.
    pub(super) fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// The exchange has answered (its reply is in the sink): the session goes on, keeping
    /// `watch`.
    pub(super) fn open(&self, watch: Option<Watch>) {
        *self.watch.borrow_mut() = watch;
        self.done.set(true);
        self.notify.notify();
    }

    /// Waits until the exchange has answered.
    pub(super) async fn opened(&self) {
        while !self.done.get() {
            self.notify.notified().await;
        }
    }

    /// Waits until the exchange has answered; returns the WATCH to keep.
    pub(super) async fn wait(&self) -> Option<Watch> {
        while !self.done.get() {
            self.notify.notified().await;
        }
        self.watch.borrow_mut().take()
    }

    /// Asks the exchange to stop (its client left, or the worker drains).
    pub(super) fn stop(&self) {
        self.stopped.set(true);
        self.stop.notify();
    }

    /// Completes when [`Barrier::stop`] was called: what the exchange races.
    pub(super) async fn stopped(&self) {
        while !self.stopped.get() {
            self.stop.notified().await;
        }
    }
}
