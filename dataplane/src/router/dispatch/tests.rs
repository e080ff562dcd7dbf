//! Dispatch against a fake pool (records what was sent where; a key goes to the shard its last
//! digit names, modulo the pool's `modulus`; a key with a `!` has no host; shard 9's host is
//! full) and fake reply slots (record pushes,
//! splits, holds and deliveries).

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::command::lookup;
use crate::config::MirrorPolicy;
use crate::router::fault::{FAULT_ERROR_REPLY, Fault};
use crate::router::{Mirror, MirrorStats, RouteRuntime};
use crate::stats::Store;
use crate::upstream::NO_UPSTREAM_HOST;

/// What the fake slots saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Push(u16),
    /// A split slot: its merge, key count and each part's key ordinals.
    Split(u64, Merge, usize, Vec<Vec<u32>>),
    Deliver(u64, u32, Vec<u8>),
    Hold(Duration),
}

#[derive(Default)]
struct FakeSlots {
    next: Cell<u64>,
    log: RefCell<Vec<Ev>>,
}

impl Deliver for FakeSlots {
    fn deliver(&self, seq: u64, part: u32, reply: &[u8]) {
        self.log
            .borrow_mut()
            .push(Ev::Deliver(seq, part, reply.to_vec()));
    }
}

impl Slots for FakeSlots {
    fn push(&self, cmd: u16) -> u64 {
        let seq = self.next.get();
        self.next.set(seq + 1);
        self.log.borrow_mut().push(Ev::Push(cmd));
        seq
    }
    fn split(&self, seq: u64, merge: Merge, nkeys: usize, parts: Vec<Part>) {
        let keys = parts.into_iter().map(|p| p.keys).collect();
        self.log
            .borrow_mut()
            .push(Ev::Split(seq, merge, nkeys, keys));
    }
    fn hold_next(&self, delay: Duration) {
        self.log.borrow_mut().push(Ev::Hold(delay));
    }
}

/// One request a fake pool was handed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sent {
    pool: &'static str,
    dest: Dest,
    read: bool,
    request: String,
    seq: u64,
    part: u32,
    cmd: u16,
}

/// Every fake pool of a test writes to one log, so the order across pools shows.
type Log = Rc<RefCell<Vec<Sent>>>;

struct FakePool {
    name: &'static str,
    nodes: usize,
    modulus: usize,
    log: Log,
}

impl Pool for FakePool {
    fn place(&self, key: &[u8]) -> Option<usize> {
        if key.contains(&b'!') {
            return None;
        }
        match key.last() {
            Some(d @ b'0'..=b'9') => Some(usize::from(d - b'0') % self.modulus),
            _ => Some(0),
        }
    }
    fn nodes(&self) -> usize {
        self.nodes
    }
    fn send(
        &self,
        dest: Dest,
        _client: Client,
        read: bool,
        request: &[u8],
        target: Target,
    ) -> Result<(), SendError> {
        // Shard 9 stands for a host whose connection is full.
        if dest == Dest::Key(9) {
            return Err(SendError::Overflow);
        }
        self.log.borrow_mut().push(Sent {
            pool: self.name,
            dest,
            read,
            request: String::from_utf8_lossy(request).into_owned(),
            seq: target.seq,
            part: target.part,
            cmd: target.cmd,
        });
        Ok(())
    }
}

fn pool(name: &'static str, nodes: usize, log: &Log) -> Rc<FakePool> {
    pool_mod(name, nodes, 10, log)
}

fn pool_mod(name: &'static str, nodes: usize, modulus: usize, log: &Log) -> Rc<FakePool> {
    Rc::new(FakePool {
        name,
        nodes,
        modulus,
        log: log.clone(),
    })
}

fn route(p: &Rc<FakePool>) -> RouteRuntime<FakePool> {
    RouteRuntime::new(p.clone(), None, Vec::new(), 0, None)
}

fn mirror(store: &Arc<Store>, p: &Rc<FakePool>, reads: bool, pct: f64) -> Mirror<FakePool> {
    let policy = MirrorPolicy {
        cluster: p.name.to_owned(),
        exclude_read_commands: !reads,
        runtime_fraction: pct,
    };
    Mirror::new(&policy, p.clone(), MirrorStats::new(store, 0, p.name, 100))
}

/// The RESP encoding of `args`, as text (what the pool log holds).
fn resp(args: &[&str]) -> String {
    let mut out = Vec::new();
    crate::resp::encode::command(&mut out, args.iter().map(|a| a.as_bytes()));
    String::from_utf8(out).expect("test value")
}

/// A RESP request of `args` as the parser leaves it: argument bytes, their ranges, the frame.
fn parts(args: &[&str]) -> (Vec<u8>, Vec<Range<usize>>, String) {
    let mut bytes = Vec::new();
    let mut ranges: Vec<Range<usize>> = Vec::new();
    for a in args {
        let at = bytes.len();
        bytes.extend_from_slice(a.as_bytes());
        ranges.push(at..bytes.len());
    }
    (bytes, ranges, resp(args))
}

/// A test's router, slots and scratch; `run` dispatches one request as the session does.
struct Bench {
    router: Router<FakePool>,
    slots: Rc<FakeSlots>,
    scratch: Scratch,
    hash_tag: Option<[u8; 2]>,
}

impl Bench {
    fn new(router: Router<FakePool>) -> Bench {
        Bench {
            router,
            slots: Rc::new(FakeSlots::default()),
            scratch: Scratch::default(),
            hash_tag: None,
        }
    }

    fn dispatch(&mut self) -> Dispatch<'_, FakeSlots, FakePool> {
        Dispatch {
            router: &self.router,
            hash_tag: self.hash_tag,
            client: Client {
                session: 7,
                resp3: false,
            },
            slots: &self.slots,
            scratch: &mut self.scratch,
        }
    }

    /// Dispatches `args` as a RESP request of a table command (or of a custom command with
    /// table id `custom`).
    fn run(&mut self, args: &[&str]) {
        let (bytes, ranges, frame) = parts(args);
        let req = Request::new(&bytes, &ranges, Some(frame.as_bytes()));
        let spec = crate::command::resolve(req.argc(), req.argv()).expect("a table command");
        let how = Upstream::of(spec.kind).expect("an upstream command");
        let req = req.with_spec(spec);
        self.dispatch().run(&req, spec, how);
    }

    fn events(&self) -> Vec<Ev> {
        self.slots.log.borrow().clone()
    }
}

fn id(name: &str) -> u16 {
    lookup(name.as_bytes()).expect("test value").id
}

fn sent(pool: &'static str, dest: Dest, read: bool, args: &[&str], seq: u64, part: u32) -> Sent {
    Sent {
        pool,
        dest,
        read,
        request: resp(args),
        seq,
        part,
        cmd: id(args.first().copied().unwrap_or_default()),
    }
}

fn catch_all(p: &Rc<FakePool>) -> Router<FakePool> {
    Router::new(Vec::new(), Some(route(p)), false)
}

#[test]
fn keyed_one_key_goes_whole_to_its_shard() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    b.run(&["SET", "user3", "v"]);
    b.run(&["GET", "user1"]);
    assert_eq!(
        *log.borrow(),
        [
            sent("main", Dest::Key(3), false, &["SET", "user3", "v"], 0, 0),
            sent("main", Dest::Key(1), true, &["GET", "user1"], 1, 0),
        ]
    );
    assert_eq!(b.events(), [Ev::Push(id("set")), Ev::Push(id("get"))]);
}

#[test]
fn keyed_inline_request_is_re_encoded() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    let bytes = b"GETk2";
    let ranges = [0..3, 3..5];
    let req = Request::new(bytes, &ranges, None);
    let spec = lookup(b"get").expect("test value");
    b.dispatch().keyed(&req, spec);
    assert_eq!(
        *log.borrow(),
        [sent("main", Dest::Key(2), true, &["GET", "k2"], 0, 0)]
    );
}

#[test]
fn keyed_multi_key_same_shard_or_crossslot() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    b.run(&["RENAME", "a2", "b2"]);
    b.run(&["RENAME", "a1", "b2"]);
    assert_eq!(
        *log.borrow(),
        [sent(
            "main",
            Dest::Key(2),
            false,
            &["RENAME", "a2", "b2"],
            0,
            0
        )]
    );
    let rename = id("rename");
    assert_eq!(
        b.events(),
        [
            Ev::Push(rename),
            Ev::Push(rename),
            Ev::Deliver(1, 0, CROSSSLOT.to_vec()),
        ]
    );
}

#[test]
fn keyed_hash_tags_place_by_the_tag() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    b.hash_tag = Some(*b"{}");
    b.run(&["RENAME", "{u3}.a1", "{u3}.b2"]);
    assert_eq!(log.borrow().len(), 1);
    assert_eq!(log.borrow()[0].dest, Dest::Key(3));
}

#[test]
fn keyed_without_route_or_host() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let only_prefix = Router::new(vec![(b"a:".to_vec(), route(&p))], None, false);
    let mut b = Bench::new(only_prefix);
    b.run(&["GET", "b:1"]);
    b.run(&["GET", "a:!"]);
    b.run(&["GET", "a:9"]);
    assert!(log.borrow().is_empty());
    let get = id("get");
    assert_eq!(
        b.events(),
        [
            Ev::Push(get),
            Ev::Deliver(0, 0, NO_UPSTREAM_HOST.to_vec()),
            Ev::Push(get),
            Ev::Deliver(1, 0, NO_UPSTREAM_HOST.to_vec()),
            Ev::Push(get),
            Ev::Deliver(2, 0, SendError::Overflow.reply().to_vec()),
        ]
    );
}

#[test]
fn keyed_prefix_routes_rewrite_and_reads_go_to_read_pool() {
    let log = Log::default();
    let main = pool("main", 4, &log);
    let users = pool("users", 4, &log);
    let replicas = pool("replicas", 4, &log);
    let strip = RouteRuntime::new(users.clone(), Some(replicas.clone()), Vec::new(), 5, None);
    let fmt = RouteRuntime::new(users.clone(), None, Vec::new(), 0, Some("{%KEY%}-x1"));
    let router = Router::new(
        vec![(b"user:".to_vec(), strip), (b"fmt:".to_vec(), fmt)],
        Some(route(&main)),
        false,
    );
    let mut b = Bench::new(router);
    b.run(&["SET", "user:k2", "v"]);
    b.run(&["GET", "user:k3"]);
    b.run(&["SET", "fmt:7", "v"]);
    b.run(&["GET", "other1"]);
    // Keys of different routes never go together.
    b.run(&["RENAME", "user:k2", "other2"]);
    assert_eq!(
        *log.borrow(),
        [
            sent("users", Dest::Key(2), false, &["SET", "k2", "v"], 0, 0),
            sent("replicas", Dest::Key(3), true, &["GET", "k3"], 1, 0),
            // "{fmt:7}-x1" is placed by its last digit, the formatter's.
            sent(
                "users",
                Dest::Key(1),
                false,
                &["SET", "{fmt:7}-x1", "v"],
                2,
                0
            ),
            sent("main", Dest::Key(1), true, &["GET", "other1"], 3, 0),
        ]
    );
    assert_eq!(
        b.events().last(),
        Some(&Ev::Deliver(4, 0, CROSSSLOT.to_vec()))
    );
}

#[test]
fn keyed_bad_numkeys_are_answered_here() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    b.run(&["EVAL", "return 1", "2", "k1"]);
    b.run(&["EVAL", "return 1", "0"]);
    assert_eq!(
        *log.borrow(),
        [sent(
            "main",
            Dest::Key(0),
            false,
            &["EVAL", "return 1", "0"],
            1,
            0
        )]
    );
    let ev = b.events();
    assert_eq!(
        ev.get(1),
        Some(&Ev::Deliver(
            0,
            0,
            b"-ERR Number of keys can't be greater than number of args\r\n".to_vec()
        ))
    );
}

/// Blocking requests run alone on a leased connection: placed like a WATCH, keys on one backend.
#[test]
fn blocking_requests_are_placed_together() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    let (q, bytes) = b.together(&["BLMPOP", "0", "2", "a1", "b1", "LEFT"]);
    assert_eq!(placed(&q), Ok(Some(1)));
    assert_eq!(bytes, resp(&["BLMPOP", "0", "2", "a1", "b1", "LEFT"]));
    let cross = String::from_utf8_lossy(CROSSSLOT).into_owned();
    assert_eq!(
        placed(&b.together(&["BRPOPLPUSH", "a1", "b2", "0"]).0),
        Err(cross)
    );
    // A bad numkeys finds no key: the backend answers it (after its timeout check, as Redis).
    assert_eq!(
        placed(&b.together(&["BLMPOP", "0", "0", "a1", "LEFT"]).0),
        Ok(None)
    );
    assert!(log.borrow().is_empty());
}

#[test]
fn custom_command_routes_by_its_first_argument() {
    let log = Log::default();
    let main = pool("main", 4, &log);
    let users = pool("users", 4, &log);
    let strip = RouteRuntime::new(users.clone(), None, Vec::new(), 5, None);
    let router = Router::new(vec![(b"user:".to_vec(), strip)], Some(route(&main)), false);
    let mut b = Bench::new(router);
    let bytes = b"MYCMDuser:k2arg";
    let ranges = [0..5, 5..12, 12..15];
    let req = Request::new(bytes, &ranges, None);
    b.dispatch().custom(&req, b"user:k2", 4000);
    assert_eq!(
        *log.borrow(),
        [Sent {
            pool: "users",
            dest: Dest::Key(2),
            read: false,
            request: resp(&["MYCMD", "k2", "arg"]),
            seq: 0,
            part: 0,
            cmd: 4000,
        }]
    );
}

#[test]
fn split_groups_keys_per_shard_in_order() {
    for (name, merge, step) in [
        ("MGET", Merge::Mget, 1),
        ("MSET", Merge::Mset, 2),
        ("DEL", Merge::SumIntegers, 1),
        ("EXISTS", Merge::SumIntegers, 1),
        ("TOUCH", Merge::SumIntegers, 1),
        ("UNLINK", Merge::SumIntegers, 1),
    ] {
        let log = Log::default();
        let p = pool("main", 4, &log);
        let mut b = Bench::new(catch_all(&p));
        let keys = ["a1", "b2", "c1", "d3", "e2"];
        let mut args = vec![name];
        for k in keys {
            args.push(k);
            if step == 2 {
                args.push("v");
            }
        }
        b.run(&args);
        let with = |ks: &[&'static str]| -> Vec<&'static str> {
            let mut v = vec![name];
            for k in ks {
                v.push(k);
                if step == 2 {
                    v.push("v");
                }
            }
            v
        };
        let read = crate::command::is_read(lookup(name.as_bytes()).expect("test value"));
        assert_eq!(read, matches!(name, "MGET" | "EXISTS" | "TOUCH"), "{name}");
        assert_eq!(
            *log.borrow(),
            [
                sent("main", Dest::Key(1), read, &with(&["a1", "c1"]), 0, 0),
                sent("main", Dest::Key(2), read, &with(&["b2", "e2"]), 0, 1),
                sent("main", Dest::Key(3), read, &with(&["d3"]), 0, 2),
            ],
            "{name}"
        );
        assert_eq!(
            b.events(),
            [
                Ev::Push(id(name)),
                Ev::Split(0, merge, 5, vec![vec![0, 2], vec![1, 4], vec![3]]),
            ],
            "{name}"
        );
    }
}

#[test]
fn split_parts_without_host_fail_alone() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    b.run(&["MGET", "a1", "x!", "b9", "c1"]);
    assert_eq!(
        *log.borrow(),
        [sent(
            "main",
            Dest::Key(1),
            true,
            &["MGET", "a1", "c1"],
            0,
            0
        )]
    );
    assert_eq!(
        b.events(),
        [
            Ev::Push(id("mget")),
            Ev::Split(0, Merge::Mget, 4, vec![vec![0, 3], vec![1], vec![2]]),
            Ev::Deliver(0, 1, NO_UPSTREAM_HOST.to_vec()),
            Ev::Deliver(0, 2, SendError::Overflow.reply().to_vec()),
        ]
    );
}

#[test]
fn split_across_prefix_routes_rewrites_each_key() {
    let log = Log::default();
    let main = pool("main", 4, &log);
    let users = pool("users", 4, &log);
    let strip = RouteRuntime::new(users.clone(), None, Vec::new(), 5, None);
    let router = Router::new(vec![(b"user:".to_vec(), strip)], Some(route(&main)), false);
    let mut b = Bench::new(router);
    b.run(&[
        "MSET", "user:a1", "1", "x1", "2", "user:b1", "3", "user:c2", "4",
    ]);
    assert_eq!(
        *log.borrow(),
        [
            sent(
                "users",
                Dest::Key(1),
                false,
                &["MSET", "a1", "1", "b1", "3"],
                0,
                0
            ),
            sent("main", Dest::Key(1), false, &["MSET", "x1", "2"], 0, 1),
            sent("users", Dest::Key(2), false, &["MSET", "c2", "4"], 0, 2),
        ]
    );
    assert_eq!(
        b.events(),
        [
            Ev::Push(id("mset")),
            Ev::Split(0, Merge::Mset, 4, vec![vec![0, 2], vec![1], vec![3]]),
        ]
    );
    // A key with no route fails the whole request.
    let only = Router::new(vec![(b"user:".to_vec(), route(&users))], None, false);
    let mut b = Bench::new(only);
    b.run(&["DEL", "user:a1", "zzz"]);
    assert_eq!(
        b.events(),
        [
            Ev::Push(id("del")),
            Ev::Deliver(0, 0, NO_UPSTREAM_HOST.to_vec())
        ]
    );
}

#[test]
fn fan_out_goes_to_every_node_with_its_merge() {
    for (args, merge) in [
        (&["DBSIZE"][..], Merge::Sum),
        (&["FLUSHALL"][..], Merge::AllOk),
        (&["KEYS", "*"][..], Merge::Concat),
        (&["RANDOMKEY"][..], Merge::FirstNonNil),
        (&["WAIT", "1", "0"][..], Merge::MinInteger),
        (&["LASTSAVE"][..], Merge::MinLastSave),
        (&["INFO"][..], Merge::Info),
        (&["SCRIPT", "EXISTS", "abc"][..], Merge::AndArrays),
        (&["SCRIPT", "LOAD", "return 1"][..], Merge::Same),
    ] {
        let log = Log::default();
        let p = pool("main", 3, &log);
        let mut b = Bench::new(catch_all(&p));
        b.run(args);
        let spec = crate::command::resolve(args.len(), |i| {
            args.get(i).map(|a| a.as_bytes()).unwrap_or_default()
        })
        .expect("test value");
        assert_eq!(spec.kind, Kind::FanOut(merge), "{args:?}");
        let want: Vec<Sent> = (0..3)
            .map(|n| Sent {
                cmd: spec.id,
                ..sent("main", Dest::Node(n), false, args, 0, n as u32)
            })
            .collect();
        assert_eq!(*log.borrow(), want, "{args:?}");
        assert_eq!(
            b.events(),
            [
                Ev::Push(spec.id),
                Ev::Split(0, merge, 0, vec![vec![], vec![], vec![]])
            ],
            "{args:?}"
        );
    }
}

#[test]
fn fan_out_without_nodes_or_catch_all() {
    let log = Log::default();
    let empty = pool("empty", 0, &log);
    let mut b = Bench::new(catch_all(&empty));
    b.run(&["DBSIZE"]);
    let mut c = Bench::new(Router::new(
        vec![(b"a".to_vec(), route(&empty))],
        None,
        false,
    ));
    c.run(&["DBSIZE"]);
    for bench in [b, c] {
        assert_eq!(
            bench.events(),
            [
                Ev::Push(id("dbsize")),
                Ev::Deliver(0, 0, NO_UPSTREAM_HOST.to_vec())
            ]
        );
    }
    assert!(log.borrow().is_empty());
}

#[test]
fn scan_cursor_names_the_node() {
    let log = Log::default();
    let p = pool("main", 3, &log);
    let mut b = Bench::new(catch_all(&p));
    b.run(&["SCAN", "0", "MATCH", "u*"]);
    let c = crate::command::scan::encode(2, 17).to_string();
    b.run(&["SCAN", &c, "COUNT", "5"]);
    let beyond = crate::command::scan::encode(3, 0).to_string();
    b.run(&["SCAN", &beyond]);
    b.run(&["SCAN", "x"]);
    assert_eq!(
        *log.borrow(),
        [
            sent(
                "main",
                Dest::Node(0),
                false,
                &["SCAN", "0", "MATCH", "u*"],
                0,
                0
            ),
            sent(
                "main",
                Dest::Node(2),
                false,
                &["SCAN", "17", "COUNT", "5"],
                1,
                0
            ),
        ]
    );
    let scan = id("scan");
    assert_eq!(
        b.events(),
        [
            Ev::Push(scan),
            Ev::Split(
                0,
                Merge::ScanCursor {
                    shard: 0,
                    shards: 3
                },
                0,
                vec![vec![]]
            ),
            Ev::Push(scan),
            Ev::Split(
                1,
                Merge::ScanCursor {
                    shard: 2,
                    shards: 3
                },
                0,
                vec![vec![]]
            ),
            Ev::Push(scan),
            Ev::Deliver(2, 0, scan::INVALID_CURSOR.to_vec()),
            Ev::Push(scan),
            Ev::Deliver(3, 0, scan::INVALID_CURSOR.to_vec()),
        ]
    );
}

fn counter(store: &Store, cluster: &str, name: &str) -> u64 {
    store
        .counter_value(&format!("cluster.{cluster}.{name}"))
        .unwrap_or(0)
}

#[test]
fn mirrors_get_copies_of_what_they_admit() {
    let store = Store::new();
    let log = Log::default();
    let main = pool("main", 4, &log);
    let all = pool("all", 2, &log);
    let writes = pool("writes", 4, &log);
    let off = pool("off", 4, &log);
    let mirrors = vec![
        mirror(&store, &all, true, 100.0),
        mirror(&store, &writes, false, 100.0),
        mirror(&store, &off, true, 0.0),
    ];
    let r = RouteRuntime::new(main.clone(), None, mirrors, 0, None);
    let mut b = Bench::new(Router::new(Vec::new(), Some(r), false));
    b.run(&["SET", "k3", "v"]);
    b.run(&["GET", "k1"]);
    b.run(&["FLUSHALL"]);
    b.run(&["RENAME", "k1", "j1"]);
    let log = log.borrow();
    let set = |p, s| sent(p, Dest::Key(s), false, &["SET", "k3", "v"], 0, 0);
    let pools: Vec<(&str, Dest)> = log.iter().map(|s| (s.pool, s.dest)).collect();
    assert_eq!(
        pools,
        [
            ("main", Dest::Key(3)),
            ("all", Dest::Key(3)),
            ("writes", Dest::Key(3)),
            ("main", Dest::Key(1)),
            ("all", Dest::Key(1)),
            ("main", Dest::Node(0)),
            ("main", Dest::Node(1)),
            ("main", Dest::Node(2)),
            ("main", Dest::Node(3)),
            ("all", Dest::Node(0)),
            ("all", Dest::Node(1)),
            ("writes", Dest::Node(0)),
            ("writes", Dest::Node(1)),
            ("writes", Dest::Node(2)),
            ("writes", Dest::Node(3)),
            ("main", Dest::Key(1)),
            ("all", Dest::Key(1)),
            ("writes", Dest::Key(1)),
        ]
    );
    assert_eq!(log.first(), Some(&set("main", 3)));
    // Copies carry no slot of the session: their replies are counted and dropped.
    assert_eq!(log.get(1).map(|s| (s.seq, s.cmd)), Some((0, id("set"))));
    assert_eq!(counter(&store, "all", "mirror_rq_total"), 5);
    assert_eq!(counter(&store, "writes", "mirror_rq_total"), 6);
    assert_eq!(counter(&store, "off", "mirror_rq_total"), 0);
}

#[test]
fn mirror_that_cannot_take_keys_whole_counts_an_error() {
    let store = Store::new();
    let log = Log::default();
    let main = pool_mod("main", 5, 5, &log);
    let narrow = pool_mod("narrow", 3, 3, &log);
    let r = RouteRuntime::new(
        main.clone(),
        None,
        vec![mirror(&store, &narrow, true, 100.0)],
        0,
        None,
    );
    let mut b = Bench::new(Router::new(Vec::new(), Some(r), false));
    // Shard 1 of the primary for both keys, shards 1 and 0 of the mirror: no copy.
    b.run(&["RENAME", "k1", "j6"]);
    b.run(&["RENAME", "k2", "j2"]);
    // No host on either: the client is answered, the copy fails.
    b.run(&["RENAME", "a!", "b!"]);
    assert_eq!(counter(&store, "narrow", "mirror_rq_total"), 3);
    assert_eq!(counter(&store, "narrow", "mirror_rq_error"), 2);
    let got: Vec<(&str, Dest)> = log.borrow().iter().map(|s| (s.pool, s.dest)).collect();
    assert_eq!(
        got,
        [
            ("main", Dest::Key(1)),
            ("main", Dest::Key(2)),
            ("narrow", Dest::Key(2))
        ]
    );
    assert_eq!(
        b.events().last(),
        Some(&Ev::Deliver(2, 0, NO_UPSTREAM_HOST.to_vec()))
    );
}

#[test]
fn split_mirrors_copy_the_keys_each_admits() {
    let store = Store::new();
    let log = Log::default();
    let main = pool("main", 4, &log);
    let m = pool("m", 4, &log);
    let r = RouteRuntime::new(
        main.clone(),
        None,
        vec![mirror(&store, &m, false, 100.0)],
        0,
        None,
    );
    let mut b = Bench::new(Router::new(Vec::new(), Some(r), false));
    b.run(&["DEL", "a1", "b2", "c!", "d1"]);
    // Reads are excluded by this mirror.
    b.run(&["MGET", "a1", "b2"]);
    let got: Vec<(&str, Dest, String)> = log
        .borrow()
        .iter()
        .map(|s| (s.pool, s.dest, s.request.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("main", Dest::Key(1), resp(&["DEL", "a1", "d1"])),
            ("main", Dest::Key(2), resp(&["DEL", "b2"])),
            ("m", Dest::Key(1), resp(&["DEL", "a1", "d1"])),
            ("m", Dest::Key(2), resp(&["DEL", "b2"])),
            ("main", Dest::Key(1), resp(&["MGET", "a1"])),
            ("main", Dest::Key(2), resp(&["MGET", "b2"])),
        ]
    );
    // The key without a mirror host is left out of the copies, uncounted.
    assert_eq!(counter(&store, "m", "mirror_rq_total"), 2);
}

#[test]
fn faults_answer_or_hold() {
    let slots = FakeSlots::default();
    assert!(apply_fault(Fault::Error { delay: None }, 5, &slots));
    assert!(!apply_fault(
        Fault::Delay(Duration::from_millis(20)),
        6,
        &slots
    ));
    assert!(apply_fault(
        Fault::Error {
            delay: Some(Duration::from_millis(3))
        },
        7,
        &slots
    ));
    assert_eq!(
        *slots.log.borrow(),
        [
            Ev::Push(5),
            Ev::Deliver(0, 0, FAULT_ERROR_REPLY.to_vec()),
            Ev::Hold(Duration::from_millis(20)),
            Ev::Hold(Duration::from_millis(3)),
            Ev::Push(7),
            Ev::Deliver(1, 0, FAULT_ERROR_REPLY.to_vec()),
        ]
    );
}

// ---- transactions ---------------------------------------------------------------------------

impl Bench {
    /// Queues `args` as a command inside MULTI behind a transaction bound to `so_far`: what
    /// dispatch answers and the bytes it appended.
    fn queue(
        &mut self,
        args: &[&str],
        so_far: Option<&TxDest<FakePool>>,
    ) -> (Queued<FakePool>, String) {
        let (bytes, ranges, frame) = parts(args);
        let req = Request::new(&bytes, &ranges, Some(frame.as_bytes()));
        let spec = crate::command::resolve(req.argc(), req.argv()).expect("a table command");
        let mut out = Vec::new();
        let q = if spec.name == "watch" {
            self.dispatch().together(&req, spec, so_far, &mut out)
        } else {
            self.dispatch().queue(
                &req,
                Some(spec),
                so_far,
                Some(&mut out),
                &mut TxMirrors::default(),
            )
        };
        (q, String::from_utf8_lossy(&out).into_owned())
    }
}

impl Bench {
    /// Places `args`, a request that runs alone on a leased connection (WATCH, blocking).
    fn together(&mut self, args: &[&str]) -> (Queued<FakePool>, String) {
        let (bytes, ranges, frame) = parts(args);
        let req = Request::new(&bytes, &ranges, Some(frame.as_bytes()));
        let spec = crate::command::resolve(req.argc(), req.argv()).expect("a table command");
        let mut out = Vec::new();
        let q = self.dispatch().together(&req, spec, None, &mut out);
        (q, String::from_utf8_lossy(&out).into_owned())
    }
}

/// The shard a queued command was placed on (`None`: keyless), or its refusal.
fn placed(q: &Queued<FakePool>) -> Result<Option<usize>, String> {
    match q {
        Queued::Yes { dest } => Ok(dest.as_ref().map(|d| d.shard)),
        Queued::No(reply) => Err(String::from_utf8_lossy(reply).into_owned()),
    }
}

#[test]
fn transaction_commands_are_placed_not_sent() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    let (q, bytes) = b.queue(&["SET", "k3", "v"], None);
    assert_eq!(placed(&q), Ok(Some(3)));
    assert_eq!(bytes, resp(&["SET", "k3", "v"]));
    let Queued::Yes { dest: Some(dest) } = q else {
        panic!("queued")
    };
    // Same shard: queued; another shard, in one command or across commands: CROSSSLOT.
    assert_eq!(
        placed(&b.queue(&["MGET", "a3", "b3"], Some(&dest)).0),
        Ok(Some(3))
    );
    let cross = String::from_utf8_lossy(CROSSSLOT).into_owned();
    assert_eq!(
        placed(&b.queue(&["GET", "k4"], Some(&dest)).0),
        Err(cross.clone())
    );
    assert_eq!(
        placed(&b.queue(&["MSET", "a1", "x", "a2", "y"], None).0),
        Err(cross)
    );
    // Keyless commands the backend answers are queued without a backend of their own.
    assert_eq!(placed(&b.queue(&["PING"], Some(&dest)).0), Ok(None));
    // A key no host takes.
    let nohost = String::from_utf8_lossy(NO_UPSTREAM_HOST).into_owned();
    assert_eq!(placed(&b.queue(&["GET", "k!"], None).0), Err(nohost));
    // Nothing reached the pool and no reply slot was taken: EXEC sends, later.
    assert!(log.borrow().is_empty());
    assert!(b.events().is_empty());
}

#[test]
fn transaction_refuses_what_cannot_run_on_one_backend() {
    let log = Log::default();
    let p = pool("main", 4, &log);
    let mut b = Bench::new(catch_all(&p));
    let refusal = |b: &mut Bench, args: &[&str]| placed(&b.queue(args, None).0).unwrap_err();
    assert!(refusal(&mut b, &["FLUSHALL"]).starts_with("-ERR 'flushall' inside MULTI is not"));
    assert!(refusal(&mut b, &["SELECT", "0"]).starts_with("-ERR 'select' inside MULTI is not"));
    assert!(
        refusal(&mut b, &["SUBSCRIBE", "ch"]).starts_with("-ERR 'subscribe' inside MULTI is not")
    );
    assert_eq!(
        refusal(&mut b, &["SAVE"]),
        "-ERR Command not allowed inside a transaction\r\n"
    );
    // Blocking commands do not block inside MULTI: queued; so is TIME, keyless.
    assert_eq!(placed(&b.queue(&["BLPOP", "l2", "0"], None).0), Ok(Some(2)));
    assert_eq!(placed(&b.queue(&["TIME"], None).0), Ok(None));
    assert_eq!(
        placed(&b.queue(&["BLMPOP", "0", "1", "l2", "LEFT"], None).0),
        Ok(Some(2))
    );
    assert!(log.borrow().is_empty());
}

#[test]
fn transaction_keys_take_their_route_and_its_rewrite() {
    let log = Log::default();
    let main = pool("main", 4, &log);
    let users = pool("users", 4, &log);
    let strip = RouteRuntime::new(users.clone(), None, Vec::new(), 5, None);
    let router = Router::new(vec![(b"user:".to_vec(), strip)], Some(route(&main)), false);
    let mut b = Bench::new(router);
    let (q, bytes) = b.queue(&["SET", "user:k1", "v"], None);
    assert_eq!(bytes, resp(&["SET", "k1", "v"]));
    let Queued::Yes { dest: Some(dest) } = q else {
        panic!("queued")
    };
    assert!(Rc::ptr_eq(&dest.pool, &users));
    // The same shard number of another route's pool is another backend.
    let cross = String::from_utf8_lossy(CROSSSLOT).into_owned();
    assert_eq!(placed(&b.queue(&["GET", "k1"], Some(&dest)).0), Err(cross));
    // WATCH binds like a queued command; a keyless transaction runs on the catch-all's shard 0.
    assert_eq!(
        placed(&b.queue(&["WATCH", "user:a1", "user:b1"], None).0),
        Ok(Some(1))
    );
    let keyless = b.dispatch().keyless_dest().expect("a catch-all route");
    assert!(Rc::ptr_eq(&keyless.pool, &main) && keyless.shard == 0);
}
