//! Pub/sub of one client (Redis `pubsub.c` semantics, byte for byte): SUBSCRIBE, PSUBSCRIBE,
//! SSUBSCRIBE and their unsubscribes, the counts of PUBLISH and PUBSUB NUMSUB, and RESP2's
//! subscribed state.
//!
//! - A subscription is the client's own (its counts, its confirmation frames, its order); the
//!   worker's [`Hub`] holds each name upstream once for all its clients and fans messages out.
//!   A name is routed like a key (prefix routes, `remove_prefix`, `key_formatter`); the client
//!   sees it as it named it.
//! - The confirmation of a subscribe is written once Redis confirmed the subscription
//!   upstream (at once when the worker already held it), within `op_timeout`.
//! - RESP2: while the client has any subscription, only (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE,
//!   PING, QUIT and RESET run, with Redis's error otherwise, and PING answers `[pong, arg]`.
//!   RESP3 clients run anything; messages are push frames between replies.
//! - Messages wait behind the replies of requests before them, never inside a reply; a client
//!   whose unwritten output passes its pub/sub output-buffer limit is disconnected.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use super::Session;
use crate::command::{CommandSpec, PubSub, Request, Topic};
use crate::engine::pubsub::{Confirm, Member, Reach, Renamed, place};
use crate::engine::worker::ListenerRuntime;
use crate::resp::encode;
use crate::resp::pubsub::{Correction, confirmation};
use crate::router::dispatch::Upstream;

/// One subscription of the client.
struct Sub {
    /// Subscription order (unsubscribing from all goes in this order).
    order: u64,
    /// Where it is held: the cluster and the name as forwarded (`None`: no route took it, so
    /// nothing can be published to it either).
    held: Option<(Arc<str>, Box<[u8]>)>,
}

/// The client's subscriptions, by topic, under the names the client gave.
pub(super) struct Subscriptions {
    member: Rc<Member>,
    next: u64,
    names: [HashMap<Box<[u8]>, Sub>; 3],
}

impl Subscriptions {
    fn of(&self, topic: Topic) -> &HashMap<Box<[u8]>, Sub> {
        let names = &self.names;
        match topic {
            Topic::Channel => &names[0],
            Topic::Pattern => &names[1],
            Topic::Shard => &names[2],
        }
    }

    fn of_mut(&mut self, topic: Topic) -> &mut HashMap<Box<[u8]>, Sub> {
        let names = &mut self.names;
        match topic {
            Topic::Channel => &mut names[0],
            Topic::Pattern => &mut names[1],
            Topic::Shard => &mut names[2],
        }
    }

    /// The count Redis reports in a confirmation of `topic`: channels and patterns together,
    /// shard channels on their own (Redis 7.0 `clientSubscriptionsCount`,
    /// `clientShardSubscriptionsCount`).
    fn count(&self, topic: Topic) -> usize {
        match topic {
            Topic::Shard => self.of(Topic::Shard).len(),
            _ => self.of(Topic::Channel).len() + self.of(Topic::Pattern).len(),
        }
    }

    fn total(&self) -> usize {
        self.names.iter().map(HashMap::len).sum()
    }

    /// The names of `topic` in subscription order.
    fn in_order(&self, topic: Topic) -> Vec<Box<[u8]>> {
        let mut v: Vec<(&Box<[u8]>, u64)> =
            self.of(topic).iter().map(|(n, s)| (n, s.order)).collect();
        v.sort_unstable_by_key(|(_, o)| *o);
        v.into_iter().map(|(n, _)| n.clone()).collect()
    }
}

impl Session {
    /// True while the client has a subscription: in RESP2, Redis's subscribed mode.
    pub(super) fn subscribed(&self) -> bool {
        self.subs.as_ref().is_some_and(|s| s.total() > 0)
    }

    /// The reply Redis gives a RESP2 client in subscribed mode for a command other than
    /// (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET (Redis 7.0 `processCommand`);
    /// `None` when the command may run.
    pub(super) fn refused_while_subscribed(&self, spec: &CommandSpec) -> Option<Vec<u8>> {
        if self.conn.resp3 || !self.subscribed() {
            return None;
        }
        use crate::command::{Kind, Local};
        let allowed = matches!(
            spec.kind,
            Kind::PubSub(PubSub::Subscribe(_) | PubSub::Unsubscribe(_))
                | Kind::Local(Local::Ping | Local::Quit | Local::Reset)
        );
        if allowed {
            return None;
        }
        let mut reply = Vec::new();
        encode::error_fmt(
            &mut reply,
            b"ERR Can't execute '",
            format!(
                "{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed \
                 in this context",
                spec.name
            )
            .as_bytes(),
        );
        Some(reply)
    }

    /// A pub/sub command (resolved, counted, past the auth gate).
    pub(super) fn pubsub(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
        which: PubSub,
    ) {
        match which {
            PubSub::Subscribe(topic) => self.subscribe(rt, req, spec, topic),
            PubSub::Unsubscribe(topic) => self.unsubscribe(rt, req, spec, topic),
            PubSub::Publish(topic) => {
                if self.fault(rt, spec.id) {
                    return;
                }
                self.correct_publish(rt, req, topic);
                self.dispatch(rt)
                    .publish(req, spec, topic == Topic::Channel);
            }
            PubSub::NumSub(topic) => {
                if self.fault(rt, spec.id) {
                    return;
                }
                self.correct_numsub(rt, req, topic);
                self.dispatch(rt)
                    .run(req, spec, Upstream::FanOut(crate::command::Merge::SumPairs));
            }
        }
    }

    fn subscribe(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
        topic: Topic,
    ) {
        let resp3 = self.conn.resp3;
        let seq = self.sink.push(spec.id);
        let confirm = Confirm::new(self.sink.clone(), seq);
        let hub = self.hub.clone();
        let (session, sink) = (self.id, self.sink.clone());
        let subs = self.subs.get_or_insert_with(|| {
            Box::new(Subscriptions {
                member: Rc::new(Member {
                    session,
                    sink,
                    resp3: std::cell::Cell::new(resp3),
                }),
                next: 0,
                names: Default::default(),
            })
        });
        let mut reply = Vec::new();
        let mut forwarded = Vec::new();
        for name in req.args().skip(1) {
            if !subs.of(topic).contains_key(name) {
                let held = rt.router.route(name).map(|(_, route)| {
                    forwarded.clear();
                    route.rewrite(name, &mut forwarded);
                    let renamed = (forwarded.as_slice() != name).then(|| {
                        let prefix = name.strip_suffix(forwarded.as_slice()).unwrap_or_default();
                        Box::new(Renamed {
                            name: name.into(),
                            prefix: prefix.into(),
                        })
                    });
                    hub.join(
                        topic,
                        &forwarded,
                        renamed,
                        &route.pool,
                        rt.config.hash_tag,
                        &subs.member,
                        &confirm,
                    );
                    (
                        Arc::<str>::from(route.pool.name.as_str()),
                        Box::<[u8]>::from(forwarded.as_slice()),
                    )
                });
                let order = subs.next;
                subs.next += 1;
                subs.of_mut(topic).insert(name.into(), Sub { order, held });
                rt.stats.pubsub_subscriptions.inc();
            }
            confirmation(
                &mut reply,
                resp3,
                topic.subscribed_word(),
                Some(name),
                subs.count(topic),
            );
        }
        self.conn.subscribed = true;
        self.sink
            .set_pubsub_limit(Some(rt.config.client_output_buffer_limit_pubsub));
        confirm.arm(reply, rt.config.op_timeout);
    }

    fn unsubscribe(
        &mut self,
        rt: &Rc<ListenerRuntime>,
        req: &Request<'_>,
        spec: &'static CommandSpec,
        topic: Topic,
    ) {
        let resp3 = self.conn.resp3;
        let seq = self.sink.push(spec.id);
        let confirm = Confirm::new(self.sink.clone(), seq);
        let mut reply = Vec::new();
        let names: Vec<Box<[u8]>> = match (&self.subs, req.argc()) {
            (Some(subs), 1) => subs.in_order(topic),
            (None, 1) => Vec::new(),
            _ => req.args().skip(1).map(Box::from).collect(),
        };
        if names.is_empty() {
            let count = self.subs.as_ref().map_or(0, |s| s.count(topic));
            confirmation(&mut reply, resp3, topic.unsubscribed_word(), None, count);
        }
        for name in &names {
            self.leave(rt, topic, name, Some(&confirm));
            let count = self.subs.as_ref().map_or(0, |s| s.count(topic));
            confirmation(
                &mut reply,
                resp3,
                topic.unsubscribed_word(),
                Some(name),
                count,
            );
        }
        if !self.subscribed() {
            self.conn.subscribed = false;
            self.sink.set_pubsub_limit(None);
        }
        confirm.arm(reply, rt.config.op_timeout);
    }

    /// Ends the client's subscription to `name` of `topic`, if it has one; `confirm`, the
    /// client's confirmation, waits for the upstream unsubscribe this may cause.
    fn leave(
        &mut self,
        rt: &ListenerRuntime,
        topic: Topic,
        name: &[u8],
        confirm: Option<&Rc<Confirm>>,
    ) {
        let Some(subs) = self.subs.as_mut() else {
            return;
        };
        let Some(sub) = subs.of_mut(topic).remove(name) else {
            return;
        };
        rt.stats.pubsub_subscriptions.dec();
        if let Some((cluster, upstream)) = sub.held {
            self.hub.leave(&cluster, topic, &upstream, self.id, confirm);
        }
    }

    /// Ends every subscription without a word to the client (RESET, the connection's end).
    pub(super) fn unsubscribe_all(&mut self, rt: &ListenerRuntime) {
        if self.subs.is_none() {
            return;
        }
        for topic in [Topic::Channel, Topic::Pattern, Topic::Shard] {
            let names = self.subs.as_ref().map(|s| s.in_order(topic));
            for name in names.into_iter().flatten() {
                self.leave(rt, topic, &name, None);
            }
        }
        self.subs = None;
        self.conn.subscribed = false;
        self.sink.set_pubsub_limit(None);
    }

    /// The client changed protocol (HELLO, RESET): its frames follow.
    pub(super) fn protocol_changed(&self) {
        if let Some(subs) = &self.subs {
            subs.member.resp3.set(self.conn.resp3);
        }
    }

    /// PUBLISH / SPUBLISH of `req`'s channel: Redis will count the proxy's upstream
    /// subscriptions as one receiver each; the reply gets the local subscribers instead.
    fn correct_publish(&self, rt: &ListenerRuntime, req: &Request<'_>, topic: Topic) {
        let counts = self.hub.counts();
        if counts.is_empty() {
            return;
        }
        let Some(channel) = req.arg(1) else {
            return;
        };
        let Some((_, route)) = rt.router.route(channel) else {
            return;
        };
        let mut forwarded = Vec::new();
        route.rewrite(channel, &mut forwarded);
        let Some(&host) =
            place(&route.pool, Topic::Channel, &forwarded, rt.config.hash_tag).first()
        else {
            return;
        };
        // Redis Cluster delivers classic messages to every node but counts only its own
        // subscribers.
        let reach = if topic == Topic::Channel && route.pool.is_redis_cluster() {
            Reach::Everywhere(host)
        } else {
            Reach::Host(host)
        };
        let correction = counts.publish_correction(&route.pool.name, topic, &forwarded, reach);
        if !correction.is_none() {
            self.sink.adjust_next(Box::new([correction]));
        }
    }

    /// PUBSUB NUMSUB / SHARDNUMSUB: every node's counts are summed, and each channel's count
    /// corrected as for PUBLISH.
    fn correct_numsub(&self, rt: &ListenerRuntime, req: &Request<'_>, topic: Topic) {
        let counts = self.hub.counts();
        if counts.is_empty() {
            return;
        }
        let mut forwarded = Vec::new();
        let corrections: Box<[Correction]> = req
            .args()
            .skip(2)
            .map(|channel| {
                let Some((_, route)) = rt.router.route(channel) else {
                    return Correction::default();
                };
                forwarded.clear();
                route.rewrite(channel, &mut forwarded);
                counts.numsub_correction(&route.pool.name, topic, &forwarded)
            })
            .collect();
        if corrections.iter().any(|c| !c.is_none()) {
            self.sink.adjust_next(corrections);
        }
    }
}
