//! Pub/sub of one worker: shared upstream subscriptions fanned out to local subscribers.
//!
//! Per worker, every channel, pattern and shard channel that any local client subscribed to is
//! subscribed once upstream, on one subscriber connection per host
//! ([`crate::upstream::SubConn`]); a message is read once and written to every local subscriber.
//! Unsubscribing the last local subscriber unsubscribes upstream; that client's confirmation
//! waits for Redis's, so once a client read it, Redis counts the subscription no more.
//!
//! Where a subscription lives ([`place`]): a channel or shard channel on the host its name
//! hashes to (the placement of a key, so `PUBLISH` and `SUBSCRIBE` meet); a pattern on every
//! host of a hashed cluster. On a Redis Cluster, everything goes to the primary of the name's
//! slot: classic messages reach every node, and sharded ones the slot's owner.
//!
//! A subscribe is confirmed to its client once Redis confirmed it upstream (or at once when the
//! worker already holds it), so a message published after the client read its confirmation
//! reaches it; a host that does not confirm within `op_timeout` (down) is confirmed anyway and
//! keeps being retried: the subscription is in place from the proxy's side, and nobody can
//! publish to a host that is down. A lost subscriber connection, a shard channel Redis dropped
//! because its slot moved, or a `-MOVED` answer re-subscribes at the name's current home, with
//! backoff, unseen by the clients; the time without a subscription is counted.

mod counts;
mod place;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

pub use counts::{Counts, Reach};
pub use place::place;

use super::sink::Sink;
use crate::cluster::ClusterPool;
use crate::net;
use crate::resp::pubsub::Topic;
use crate::stats::log_limit::log_limited;
use crate::stats::{Counter, Gauge, Store};
use crate::upstream::{Event, SubConn, Subscriber};

/// First delay before subscriptions that lost their home are placed again; doubled per failed
/// round up to [`REPAIR_MAX`].
const REPAIR_FIRST: Duration = Duration::from_millis(50);
const REPAIR_MAX: Duration = Duration::from_secs(2);

/// A local subscriber: one client session.
pub struct Member {
    /// The session's id (unique in the worker).
    pub session: u64,
    /// Where its frames go.
    pub sink: Rc<Sink>,
    /// The client speaks RESP3 now (frames become pushes).
    pub resp3: Cell<bool>,
}

/// A client's subscribe request waiting for its upstream confirmations: its reply (the
/// confirmation frames, counts included) is written once every one came, or at `op_timeout`.
pub struct Confirm {
    sink: Rc<Sink>,
    seq: u64,
    /// Set by [`Confirm::arm`]; taken when written.
    reply: RefCell<Option<Vec<u8>>>,
    left: Cell<usize>,
}

impl Confirm {
    /// The confirmation of the request in slot `seq` of `sink`, waiting for nothing yet.
    pub fn new(sink: Rc<Sink>, seq: u64) -> Rc<Confirm> {
        Rc::new(Confirm {
            sink,
            seq,
            reply: RefCell::new(None),
            left: Cell::new(0),
        })
    }

    /// Waits for one more upstream confirmation.
    fn wait_one(&self) {
        self.left.set(self.left.get() + 1);
    }

    /// One upstream confirmation came (or will not come).
    fn one_done(&self) {
        let left = self.left.get().saturating_sub(1);
        self.left.set(left);
        if left == 0 {
            self.finish();
        }
    }

    /// Writes the reply, once, if it is known.
    fn finish(&self) {
        if let Some(reply) = self.reply.borrow_mut().take() {
            use crate::upstream::Deliver;
            self.sink.deliver(self.seq, 0, &reply);
        }
    }

    /// The reply is `reply`: written now if nothing is awaited, else when the last
    /// confirmation comes or `within` has passed, whichever is first.
    pub fn arm(self: Rc<Self>, reply: Vec<u8>, within: Duration) {
        *self.reply.borrow_mut() = Some(reply);
        if self.left.get() == 0 {
            return self.finish();
        }
        net::spawn(async move {
            net::sleep(within).await;
            self.finish();
        });
    }
}

/// One upstream subscription of an entry: the host, and whether Redis confirmed it.
struct Home {
    addr: SocketAddr,
    confirmed: bool,
}

/// A local subscriber of an entry, and how it named it when a route rewrote the name.
type Subscribed = (Rc<Member>, Option<Box<Renamed>>);

/// A name as the client gave it, where a route forwards it otherwise (`remove_prefix`,
/// `key_formatter`): its frames carry the client's names.
pub struct Renamed {
    /// The channel or pattern as the client named it.
    pub name: Box<[u8]>,
    /// What `remove_prefix` took off the front: a pattern's messages name their channel with
    /// it put back (empty under a `key_formatter`, whose channels are shown as forwarded).
    pub prefix: Box<[u8]>,
}

/// An upstream subscription being unsubscribed, by host: Redis counts it until it confirms
/// (a `PUBLISH` may reach Redis before the `UNSUBSCRIBE`), and the client whose unsubscribe
/// ended it waits for that confirmation.
#[derive(Default)]
struct Departure {
    hosts: Vec<SocketAddr>,
    waiters: Vec<Rc<Confirm>>,
}

/// Names being unsubscribed upstream.
type Leaving = HashMap<Box<[u8]>, Departure>;

/// Subscriber connections by host.
type Hosts = HashMap<SocketAddr, Rc<SubConn>>;

/// One channel, pattern or shard channel of one cluster, as this worker holds it.
struct Entry {
    pool: Rc<ClusterPool>,
    hash_tag: Option<[u8; 2]>,
    /// Where it is subscribed (empty while it waits to be placed again).
    homes: Vec<Home>,
    /// Local subscribers, with the name they subscribed under when a route rewrote it.
    members: Vec<Subscribed>,
    /// Subscribe requests waiting for this entry's confirmation.
    waiters: Vec<Rc<Confirm>>,
    /// Since when it has been without an upstream subscription (lost, dropped, moved).
    homeless_since: Option<Instant>,
}

impl Entry {
    fn confirmed(&self) -> bool {
        !self.homes.is_empty() && self.homes.iter().all(|h| h.confirmed)
    }
}

type Names = HashMap<Box<[u8]>, Entry>;

/// What becomes of a subscription Redis refused.
enum Redo {
    /// Subscribe at this node now (`MOVED`).
    At(SocketAddr, Rc<ClusterPool>),
    /// Place it again after the repair backoff (`ASK`: the slot is migrating).
    Later,
    /// Not again: the refusal is final (ACL, an unknown command).
    Never,
}

/// A worker's pub/sub stats (`pubsub.` in the stats, summed over workers).
struct HubStats {
    channels: Arc<Gauge>,
    patterns: Arc<Gauge>,
    shard_channels: Arc<Gauge>,
    upstream_cx: Arc<Gauge>,
    messages_in: Arc<Counter>,
    messages_out: Arc<Counter>,
    resubscribes: Arc<Counter>,
    homeless_ms: Arc<Counter>,
    refused: Arc<Counter>,
}

impl HubStats {
    fn gauge(&self, topic: Topic) -> &Gauge {
        match topic {
            Topic::Channel => &self.channels,
            Topic::Pattern => &self.patterns,
            Topic::Shard => &self.shard_channels,
        }
    }
}

/// The pub/sub of one worker.
pub struct Hub {
    me: Weak<Hub>,
    worker: usize,
    /// Subscriber connections per cluster and host.
    conns: RefCell<HashMap<Arc<str>, Hosts>>,

    /// Per cluster, per topic: the names held upstream (as forwarded).
    entries: RefCell<HashMap<Arc<str>, [Names; 3]>>,
    counts: Arc<Counts>,
    stats: HubStats,
    repair_due: Cell<bool>,
    repair_delay: Cell<Duration>,
    /// Per cluster, per topic: names being unsubscribed upstream.
    leaving: RefCell<HashMap<Arc<str>, [Leaving; 3]>>,
}

/// The topics in [`index`] order.
const TOPICS: [Topic; 3] = [Topic::Channel, Topic::Pattern, Topic::Shard];

fn index(topic: Topic) -> usize {
    match topic {
        Topic::Channel => 0,
        Topic::Pattern => 1,
        Topic::Shard => 2,
    }
}

impl Hub {
    /// The hub of worker `worker`, reporting into `counts` (process-wide) and `store`.
    pub fn new(worker: usize, store: &Store, counts: Arc<Counts>) -> Rc<Hub> {
        let g = |n: &str| store.gauge(&format!("pubsub.{n}"), worker);
        let c = |n: &str| store.counter(&format!("pubsub.{n}"), worker);
        Rc::new_cyclic(|me| Hub {
            me: me.clone(),
            worker,
            conns: RefCell::default(),
            leaving: RefCell::default(),
            entries: RefCell::default(),
            counts,
            stats: HubStats {
                channels: g("upstream_channels"),
                patterns: g("upstream_patterns"),
                shard_channels: g("upstream_shard_channels"),
                upstream_cx: g("upstream_cx_active"),
                messages_in: c("messages_in"),
                messages_out: c("messages_out"),
                resubscribes: c("upstream_resubscribe"),
                homeless_ms: c("upstream_resubscribe_gap_ms"),
                refused: c("upstream_subscribe_refused"),
            },
            repair_due: Cell::new(false),
            repair_delay: Cell::new(REPAIR_FIRST),
        })
    }

    /// The process-wide subscription counts.
    pub fn counts(&self) -> &Arc<Counts> {
        &self.counts
    }

    /// Adds `member` as a subscriber of `name` (as forwarded; `client_name` when the client
    /// named it otherwise) on `pool`, subscribing upstream when the worker does not hold it
    /// yet. `confirm` waits for the upstream confirmation if there is one to wait for.
    #[allow(clippy::too_many_arguments)]
    pub fn join(
        &self,
        topic: Topic,
        name: &[u8],
        client_name: Option<Box<Renamed>>,
        pool: &Rc<ClusterPool>,
        hash_tag: Option<[u8; 2]>,
        member: &Rc<Member>,
        confirm: &Rc<Confirm>,
    ) {
        let cluster: Arc<str> = pool.name.as_str().into();
        let mut entries = self.entries.borrow_mut();
        let names = entries.entry(cluster.clone()).or_default();
        let Some(names) = names.get_mut(index(topic)) else {
            return;
        };
        let fresh = !names.contains_key(name);
        let entry = names.entry(name.into()).or_insert_with(|| Entry {
            pool: pool.clone(),
            hash_tag,
            homes: Vec::new(),
            members: Vec::new(),
            waiters: Vec::new(),
            homeless_since: None,
        });
        entry.members.push((member.clone(), client_name));

        if fresh {
            self.stats.gauge(topic).inc();
            let homes = place(pool, topic, name, hash_tag);
            if homes.is_empty() {
                entry.homeless_since = Some(Instant::now());
                self.schedule_repair();
            }
            for addr in homes {
                entry.homes.push(Home {
                    addr,
                    confirmed: false,
                });
                self.conn(&cluster, addr, pool).subscribe(topic, name);
            }
        }
        if !entry.confirmed() {
            confirm.wait_one();
            entry.waiters.push(confirm.clone());
        }
        self.report(&cluster, topic, name, Some(entry));
    }

    /// Tells the process-wide counts how this worker holds `name` now: where Redis counts its
    /// subscription (confirmed, or not yet confirmed gone) and its local subscribers.
    fn report(&self, cluster: &str, topic: Topic, name: &[u8], entry: Option<&Entry>) {
        let mut homes: Vec<SocketAddr> = entry
            .map(|e| {
                e.homes
                    .iter()
                    .filter(|h| h.confirmed)
                    .map(|h| h.addr)
                    .collect()
            })
            .unwrap_or_default();
        let leaving = self.leaving.borrow();
        let departing = leaving
            .get(cluster)
            .and_then(|t| t.get(index(topic)))
            .and_then(|n| n.get(name));
        for &addr in departing.iter().flat_map(|d| &d.hosts) {
            if !homes.contains(&addr) {
                homes.push(addr);
            }
        }
        let members = entry.map_or(0, |e| e.members.len());
        self.counts
            .set(cluster, topic, name, self.worker, homes, members);
    }

    /// Removes session `session` as a subscriber of `name` on cluster `cluster`. The last one
    /// out unsubscribes upstream, and `confirm` (that client's confirmation) waits for Redis's:
    /// until then Redis may count the subscription (see [`Departure`]).
    pub fn leave(
        &self,
        cluster: &str,
        topic: Topic,
        name: &[u8],
        session: u64,
        confirm: Option<&Rc<Confirm>>,
    ) {
        let mut entries = self.entries.borrow_mut();
        let Some(names) = entries
            .get_mut(cluster)
            .and_then(|n| n.get_mut(index(topic)))
        else {
            return;
        };
        let Some(entry) = names.get_mut(name) else {
            return;
        };
        let before = entry.members.len();
        entry.members.retain(|(m, _)| m.session != session);
        if entry.members.len() == before {
            return;
        }
        if !entry.members.is_empty() {
            return self.report(cluster, topic, name, Some(entry));
        }
        let Some(entry) = names.remove(name) else {
            return;
        };
        drop(entries);
        self.stats.gauge(topic).dec();
        for w in entry.waiters {
            w.one_done();
        }
        let conns = self.conns.borrow();
        let mut leaving = self.leaving.borrow_mut();
        if !leaving.contains_key(cluster) {
            leaving.insert(cluster.into(), Default::default());
        }
        for home in &entry.homes {
            let Some(c) = conns
                .get(cluster)
                .and_then(|c| c.get(&home.addr))
                .filter(|c| !c.is_closed())
            else {
                continue;
            };
            c.unsubscribe(topic, name);
            if let Some(names) = leaving
                .get_mut(cluster)
                .and_then(|t| t.get_mut(index(topic)))
            {
                let d = names.entry(name.into()).or_default();
                d.hosts.push(home.addr);
                if let Some(confirm) = confirm {
                    confirm.wait_one();
                    d.waiters.push(confirm.clone());
                }
            }
        }
        drop((conns, leaving));
        self.report(cluster, topic, name, None);
    }

    /// Redis confirmed (or, its connection lost, forgot) the unsubscribe of `name` at `addr`:
    /// once no host is left, the clients waiting for it get their confirmations.
    fn departed(&self, cluster: &str, topic: Topic, name: &[u8], addr: SocketAddr) {
        let done = {
            let mut leaving = self.leaving.borrow_mut();
            let Some(names) = leaving
                .get_mut(cluster)
                .and_then(|t| t.get_mut(index(topic)))
            else {
                return;
            };
            let Some(d) = names.get_mut(name) else {
                return;
            };
            let Some(i) = d.hosts.iter().position(|a| *a == addr) else {
                return;
            };
            d.hosts.swap_remove(i);
            if d.hosts.is_empty() {
                names.remove(name)
            } else {
                None
            }
        };
        let entries = self.entries.borrow();
        let entry = entries
            .get(cluster)
            .and_then(|t| t.get(index(topic)))
            .and_then(|n| n.get(name));
        self.report(cluster, topic, name, entry);
        drop(entries);
        for w in done.into_iter().flat_map(|d| d.waiters) {
            w.one_done();
        }
    }

    /// The subscriber connection to `addr` of `cluster`, opened when there is none.
    fn conn(&self, cluster: &Arc<str>, addr: SocketAddr, pool: &ClusterPool) -> Rc<SubConn> {
        let mut conns = self.conns.borrow_mut();
        let hosts = conns.entry(cluster.clone()).or_default();
        if let Some(c) = hosts.get(&addr).filter(|c| !c.is_closed()) {
            return c.clone();
        }
        let owner: Weak<dyn Subscriber> = self.me.clone();
        let c = SubConn::start(addr, &pool.settings, cluster.clone(), owner);
        self.stats.upstream_cx.inc();
        hosts.insert(addr, c.clone());
        c
    }

    /// Runs [`Hub::repair`] after the current backoff, once.
    fn schedule_repair(&self) {
        if self.repair_due.replace(true) {
            return;
        }
        let delay = self.repair_delay.get();
        self.repair_delay.set((delay * 2).min(REPAIR_MAX));
        let me = self.me.clone();
        net::spawn(async move {
            net::sleep(delay).await;
            if let Some(hub) = me.upgrade() {
                hub.repair_due.set(false);
                hub.repair();
            }
        });
    }

    /// Places every entry without a home again and subscribes there.
    fn repair(&self) {
        let mut again = false;
        let mut entries = self.entries.borrow_mut();
        for (cluster, topics) in entries.iter_mut() {
            for (topic, names) in TOPICS.into_iter().zip(topics.iter_mut()) {
                for (name, entry) in names.iter_mut() {
                    if entry.homeless_since.is_none() {
                        continue;
                    }
                    let homes = place(&entry.pool, topic, name, entry.hash_tag);
                    if homes.is_empty() {
                        again = true;
                        continue;
                    }
                    for addr in homes {
                        if entry.homes.iter().any(|h| h.addr == addr) {
                            continue;
                        }
                        entry.homes.push(Home {
                            addr,
                            confirmed: false,
                        });
                        self.conn(cluster, addr, &entry.pool).subscribe(topic, name);
                    }
                }
            }
        }
        drop(entries);
        if again {
            self.schedule_repair();
        }
    }

    /// The entry `name` of `topic` on `conn`'s cluster, if held.
    fn with_entry<R>(
        &self,
        conn: &SubConn,
        topic: Topic,
        name: &[u8],
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Option<R> {
        let mut entries = self.entries.borrow_mut();
        let entry = entries
            .get_mut(conn.cluster())?
            .get_mut(index(topic))?
            .get_mut(name)?;
        Some(f(entry))
    }

    /// Writes a message frame to every local subscriber of its entry.
    fn fan_out(
        &self,
        conn: &SubConn,
        topic: Topic,
        frame: &[u8],
        pattern: Option<&[u8]>,
        channel: &[u8],
        payload: &[u8],
    ) {
        self.stats.messages_in.inc();
        let key = pattern.unwrap_or(channel);
        let entries = self.entries.borrow();
        let Some(entry) = entries
            .get(conn.cluster())
            .and_then(|t| t.get(index(topic)))
            .and_then(|n| n.get(key))
        else {
            return;
        };
        let (mut renamed, mut full_channel) = (Vec::new(), Vec::new());
        let mut written = 0u64;
        for (m, client_name) in &entry.members {
            let resp3 = m.resp3.get();
            let ok = match client_name {
                None => m.sink.push_message(frame, resp3),
                Some(as_named) => {
                    renamed.clear();
                    match pattern {
                        Some(_) => {
                            full_channel.clear();
                            full_channel.extend_from_slice(&as_named.prefix);
                            full_channel.extend_from_slice(channel);
                            crate::resp::pubsub::message(
                                &mut renamed,
                                false,
                                topic,
                                Some(&as_named.name),
                                &full_channel,
                                payload,
                            );
                        }
                        None => crate::resp::pubsub::message(
                            &mut renamed,
                            false,
                            topic,
                            None,
                            &as_named.name,
                            payload,
                        ),
                    }
                    m.sink.push_message(&renamed, resp3)
                }
            };
            written += u64::from(ok);
        }
        self.stats.messages_out.add(written);
    }
}

impl Subscriber for Hub {
    fn event(&self, conn: &SubConn, event: Event<'_>) {
        match event {
            Event::Message {
                topic,
                frame,
                pattern,
                channel,
                payload,
            } => self.fan_out(conn, topic, frame, pattern, channel, payload),
            Event::Subscribed { topic, name } => {
                let stats = &self.stats;
                self.with_entry(conn, topic, name, |e| {
                    let Some(home) = e
                        .homes
                        .iter_mut()
                        .find(|h| h.addr == conn.addr() && !h.confirmed)
                    else {
                        return;
                    };
                    home.confirmed = true;
                    self.report(conn.cluster(), topic, name, Some(e));
                    if e.confirmed() {
                        if let Some(since) = e.homeless_since.take() {
                            stats.resubscribes.inc();
                            stats.homeless_ms.add(since.elapsed().as_millis() as u64);
                        }
                        for w in e.waiters.drain(..) {
                            w.one_done();
                        }
                    }
                });
                self.repair_delay.set(REPAIR_FIRST);
            }
            Event::Refused { topic, name, reply } => {
                self.stats.refused.inc();
                // A Redis Cluster node that does not own the name's slot: `MOVED` names the
                // owner (and re-points the slot in the pool's map); during a migration (`ASK`)
                // it is placed again later, once the slot has settled.
                let next = self.with_entry(conn, topic, name, |e| {
                    e.homes.retain(|h| h.addr != conn.addr());
                    self.report(conn.cluster(), topic, name, Some(e));
                    match e.pool.lease_redirect(conn.addr(), reply) {
                        Some((to, false)) => {
                            e.homes.push(Home {
                                addr: to,
                                confirmed: false,
                            });
                            Redo::At(to, e.pool.clone())
                        }
                        Some((_, true)) => {
                            e.homeless_since.get_or_insert_with(Instant::now);
                            Redo::Later
                        }
                        None => {
                            log_limited!(WARN, "upstream refused a subscription";
                                cluster = %conn.cluster(),
                                upstream = %conn.addr(),
                                reply = %String::from_utf8_lossy(reply).trim_end());
                            for w in e.waiters.drain(..) {
                                w.one_done();
                            }
                            Redo::Never
                        }
                    }
                });
                match next {
                    Some(Redo::At(to, pool)) => {
                        self.conn(conn.cluster(), to, &pool).subscribe(topic, name)
                    }
                    Some(Redo::Later) => self.schedule_repair(),
                    _ => {}
                }
            }
            Event::Unsubscribed { topic, name } => {
                self.departed(conn.cluster(), topic, name, conn.addr())
            }
            Event::Dropped { topic, name } => {
                let dropped = self.with_entry(conn, topic, name, |e| {
                    let before = e.homes.len();
                    e.homes.retain(|h| h.addr != conn.addr());
                    if e.homes.len() == before {
                        return false;
                    }
                    self.report(conn.cluster(), topic, name, Some(e));
                    e.homeless_since.get_or_insert_with(Instant::now);
                    true
                });
                if dropped == Some(true) {
                    debug!(cluster = %conn.cluster(), upstream = %conn.addr(), "shard channel dropped by its node; placing it again");
                    self.schedule_repair();
                }
            }
        }
    }

    fn lost(&self, conn: &SubConn) {
        if let Some(hosts) = self.conns.borrow_mut().get_mut(&**conn.cluster())
            && hosts
                .get(&conn.addr())
                .is_some_and(|c| std::ptr::eq(&**c, conn))
        {
            hosts.remove(&conn.addr());
        }
        self.stats.upstream_cx.dec();
        // Unsubscribes on their way there are done: Redis dropped the connection's
        // subscriptions with it.
        let departing: Vec<(Topic, Box<[u8]>)> = self
            .leaving
            .borrow()
            .get(&**conn.cluster())
            .map(|topics| {
                TOPICS
                    .into_iter()
                    .zip(topics.iter())
                    .flat_map(|(topic, names)| {
                        names
                            .iter()
                            .filter(|(_, d)| d.hosts.contains(&conn.addr()))
                            .map(move |(name, _)| (topic, name.clone()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        for (topic, name) in departing {
            while self
                .leaving
                .borrow()
                .get(&**conn.cluster())
                .and_then(|t| t.get(index(topic)))
                .and_then(|n| n.get(&name))
                .is_some_and(|d| d.hosts.contains(&conn.addr()))
            {
                self.departed(conn.cluster(), topic, &name, conn.addr());
            }
        }
        let mut any = false;

        let mut entries = self.entries.borrow_mut();
        if let Some(topics) = entries.get_mut(conn.cluster()) {
            for (topic, names) in TOPICS.into_iter().zip(topics.iter_mut()) {
                for (name, e) in names.iter_mut() {
                    let before = e.homes.len();
                    e.homes.retain(|h| h.addr != conn.addr());
                    if e.homes.len() != before {
                        self.report(conn.cluster(), topic, name, Some(e));
                        e.homeless_since.get_or_insert_with(Instant::now);
                        any = true;
                    }
                }
            }
        }
        drop(entries);
        if any {
            debug!(cluster = %conn.cluster(), upstream = %conn.addr(), "subscriber connection lost; subscribing again");
            self.schedule_repair();
        }
    }
}
