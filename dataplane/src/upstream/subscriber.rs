//! Subscriber connections: one per worker and host, carrying every channel, pattern and shard
//! channel that the worker's clients subscribed to on that host. Redis writes each message to
//! the connection once, whatever the number of local subscribers; the layer above fans it out.
//!
//! The connection speaks RESP2 (Redis's subscribed mode), so a message frame can be forwarded
//! to a RESP2 client byte for byte, and to a RESP3 client with its first byte changed into a
//! push (`>`). Every subscribe and unsubscribe names one channel, so each command is answered by
//! exactly one frame: a confirmation, or an error (Redis Cluster `-MOVED`, ACL `-NOPERM`) that
//! answers the oldest command still unanswered.
//!
//! A lost connection is not reconnected here: the owner decides where its subscriptions go
//! next (the same host once it is back, or a new owner of a slot) and opens a new one.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use tracing::debug;

use super::PoolSettings;
use super::conn::{make_room, open};
use crate::net::{self, BufResult, Notify, Stream};
use crate::resp::pubsub::{Push, Topic, parse_push};
use crate::resp::{self as reply, ReplyScanner, encode};

/// One frame read from a subscriber connection, as the owner sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A subscription asked for is in place.
    Subscribed { topic: Topic, name: &'a [u8] },
    /// Redis refused a subscribe asked for: `reply` is its error (`-MOVED …`, `-NOPERM …`).
    Refused {
        topic: Topic,
        name: &'a [u8],
        reply: &'a [u8],
    },

    /// An unsubscribe asked for is done.
    Unsubscribed { topic: Topic, name: &'a [u8] },
    /// Redis ended a subscription nobody asked it to end: a shard channel whose slot left the
    /// node (Redis 7.0 sends `sunsubscribe` to its subscribers when the slot moves away).
    Dropped { topic: Topic, name: &'a [u8] },
    /// A message. `frame`: the whole RESP2 array as Redis sent it; `pattern`: the pattern it
    /// matched (`pmessage` only).
    Message {
        topic: Topic,
        frame: &'a [u8],
        pattern: Option<&'a [u8]>,
        channel: &'a [u8],
        payload: &'a [u8],
    },
}

/// The owner of subscriber connections: told of every frame and of the connection's end.
pub trait Subscriber {
    /// A frame read from `conn`.
    fn event(&self, conn: &SubConn, event: Event<'_>);
    /// `conn` is gone (connect failed, I/O error, closed by the host or by [`SubConn::close`]);
    /// nothing more comes from it.
    fn lost(&self, conn: &SubConn);
}

/// A command sent and not yet answered: subscribe (`true`) or unsubscribe, of one name.
struct Asked {
    subscribe: bool,
    topic: Topic,
    name: Vec<u8>,
}

/// One subscriber connection to one host.
pub struct SubConn {
    addr: SocketAddr,
    cluster: Arc<str>,
    /// Encoded commands not yet written.
    out: RefCell<Vec<u8>>,
    /// Commands written or queued, in order, until their frame arrives.
    asked: RefCell<VecDeque<Asked>>,
    write_ready: Notify,
    closed: Cell<bool>,
    stream: RefCell<Option<Rc<Stream>>>,
}

impl SubConn {
    /// Connects to `addr` (handshake as for a shared connection, RESP2) in the background and
    /// reports to `owner` from then on. Commands given before the connection is up are written
    /// once it is.
    pub fn start(
        addr: SocketAddr,
        settings: &PoolSettings,
        cluster: Arc<str>,
        owner: Weak<dyn Subscriber>,
    ) -> Rc<SubConn> {
        let conn = Rc::new(SubConn {
            addr,
            cluster,
            out: RefCell::new(Vec::new()),
            asked: RefCell::new(VecDeque::new()),
            write_ready: Notify::default(),
            closed: Cell::new(false),
            stream: RefCell::new(None),
        });
        let settings = PoolSettings {
            resp3: false,
            ..settings.clone()
        };
        let me = conn.clone();
        net::spawn(async move {
            match open(
                addr,
                &settings,
                false,
                &me.cluster,
                settings.connect_timeout,
                // RESP2 always: no HELLO 3 to fail.
                None,
            )
            .await
            {
                Ok(stream) if !me.closed.get() => {
                    let stream = Rc::new(stream);
                    *me.stream.borrow_mut() = Some(stream.clone());
                    net::spawn(write_loop(me.clone(), stream.clone()));
                    me.read_loop(&stream, &owner).await;
                    net::shutdown(&stream);
                }
                Ok(stream) => net::shutdown(&stream),
                Err(e) => {
                    debug!(cluster = %me.cluster, upstream = %addr, error = %e, "subscriber connect failed");
                }
            }
            me.closed.set(true);
            me.write_ready.notify();
            me.asked.borrow_mut().clear();
            if let Some(owner) = owner.upgrade() {
                owner.lost(&me);
            }
        });
        conn
    }

    /// The host.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The name of the cluster the host belongs to.
    pub fn cluster(&self) -> &Arc<str> {
        &self.cluster
    }

    /// True once the connection is gone (or never came up).
    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Subscribes to `name`; answered by [`Event::Subscribed`] or [`Event::Refused`].
    pub fn subscribe(&self, topic: Topic, name: &[u8]) {
        self.ask(true, topic, name);
    }

    /// Unsubscribes from `name`; answered by [`Event::Unsubscribed`].
    pub fn unsubscribe(&self, topic: Topic, name: &[u8]) {
        self.ask(false, topic, name);
    }

    fn ask(&self, subscribe: bool, topic: Topic, name: &[u8]) {
        if self.closed.get() {
            return;
        }
        let cmd = if subscribe {
            topic.subscribe()
        } else {
            topic.unsubscribe()
        };
        let mut out = self.out.borrow_mut();
        let first = out.is_empty();
        encode::command(&mut out, [cmd, name].into_iter());
        drop(out);
        self.asked.borrow_mut().push_back(Asked {
            subscribe,
            topic,
            name: name.to_vec(),
        });
        if first {
            self.write_ready.notify();
        }
    }

    /// Closes the connection; the owner is told through [`Subscriber::lost`].
    pub fn close(&self) {
        self.closed.set(true);
        self.write_ready.notify();
        if let Some(s) = self.stream.borrow().as_ref() {
            net::shutdown(s);
        }
    }

    async fn read_loop(&self, stream: &Stream, owner: &Weak<dyn Subscriber>) {
        let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
        let mut start = 0usize;
        let mut scanner = ReplyScanner::default();
        loop {
            make_room(&mut buf, &mut start);
            let BufResult(res, b) = net::read_append(stream, buf).await;
            buf = b;
            match res {
                Ok(n) if n > 0 => {}
                _ => return,
            }
            let Some(owner) = owner.upgrade() else {
                return;
            };
            loop {
                let rest = buf.get(start..).unwrap_or_default();
                match scanner.scan(rest) {
                    Ok(Some(len)) => {
                        let frame = rest.get(..len).unwrap_or_default();
                        if !self.on_frame(frame, &*owner) {
                            debug!(upstream = %self.addr, "unexpected frame on a subscriber connection; closing");
                            return;
                        }
                        start += len;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        debug!(upstream = %self.addr, error = %e, "subscriber protocol error; closing");
                        return;
                    }
                }
            }
            if self.closed.get() {
                return;
            }
        }
    }

    /// Handles one frame; false when it makes no sense on this connection.
    fn on_frame(&self, frame: &[u8], owner: &dyn Subscriber) -> bool {
        if reply::is_error(frame) {
            let Some(asked) = self.asked.borrow_mut().pop_front() else {
                return false;
            };
            if asked.subscribe {
                owner.event(
                    self,
                    Event::Refused {
                        topic: asked.topic,
                        name: &asked.name,
                        reply: frame,
                    },
                );
            }
            return true;
        }
        let Some(push) = parse_push(frame) else {
            return false;
        };
        let event = match push {
            Push::Message {
                topic,
                pattern,
                channel,
                payload,
            } => Event::Message {
                topic,
                frame,
                pattern,
                channel,
                payload,
            },
            Push::Confirm {
                subscribe,
                topic,
                name,
            } => {
                let mut asked = self.asked.borrow_mut();
                let ours = asked.front().is_some_and(|a| {
                    a.subscribe == subscribe && a.topic == topic && Some(&a.name[..]) == name
                });
                if ours {
                    asked.pop_front();
                }
                drop(asked);
                match (ours, subscribe, name) {
                    (true, true, Some(name)) => Event::Subscribed { topic, name },
                    (true, false, Some(name)) => Event::Unsubscribed { topic, name },

                    (false, false, Some(name)) => Event::Dropped { topic, name },
                    _ => return true,
                }
            }
        };
        owner.event(self, event);
        true
    }
}

impl Drop for SubConn {
    fn drop(&mut self) {
        self.close();
    }
}

/// Writes queued commands, all that is queued in one write.
async fn write_loop(conn: Rc<SubConn>, stream: Rc<Stream>) {
    let mut spare = Vec::new();
    loop {
        if conn.closed.get() {
            return;
        }
        if conn.out.borrow().is_empty() {
            conn.write_ready.notified().await;
            continue;
        }
        let buf = std::mem::replace(&mut *conn.out.borrow_mut(), spare);
        let BufResult(res, mut buf) = net::write_all(&stream, buf).await;
        if res.is_err() {
            net::shutdown(&stream);
            return;
        }
        buf.clear();
        spare = buf;
    }
}
