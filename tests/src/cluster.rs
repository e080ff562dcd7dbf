//! A real Redis Cluster for integration tests: six `redis-server`s with `cluster-enabled yes`
//! (three primaries, three replicas) joined with `redis-cli --cluster create`, plus the
//! operations tests need on it (resharding, failover, SIGKILL/SIGSTOP, per-node command
//! counters) and [`cluster_config`], a Respite config over it.
//!
//! Every node is a [`RedisServer`] in its own temp dir; `nodes.conf` is written there (the
//! server's working directory), so a restarted node rejoins with its old identity. Dropping the
//! [`RedisCluster`] kills every node (SIGKILL works on stopped processes too).
//!
//! Admin queries made here use short timeouts and skip nodes the harness killed or stopped, so
//! they never hang on a node a test took down.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{RawClient, RedisServer};

/// Number of hash slots.
pub const SLOTS: u16 = 16384;

/// `cluster-node-timeout` of the nodes, in milliseconds.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// Read timeout of the harness's own admin queries.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(3);

/// The Redis Cluster slot of `key` (`crc16(hashtag(key)) % 16384`), as Respite computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    respite::cluster::key_slot(key)
}

// ---- RESP values -------------------------------------------------------------------------

/// A parsed RESP2 reply (what the harness and the tests need to look into replies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+...`
    Simple(String),
    /// `-...` (the text after `-`).
    Error(String),
    /// `:n`
    Int(i64),
    /// `$n ...` or `$-1` (`None`).
    Bulk(Option<Vec<u8>>),
    /// `*n ...` or `*-1` (`None`).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// Parses one complete RESP2 reply (as returned by [`RawClient`]); panics on anything else.
    pub fn parse(bytes: &[u8]) -> Reply {
        let mut pos = 0;
        let r = parse_at(bytes, &mut pos)
            .unwrap_or_else(|| panic!("bad RESP reply {:?}", String::from_utf8_lossy(bytes)));
        assert_eq!(pos, bytes.len(), "trailing bytes after reply");
        r
    }

    /// True for an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The bytes of a bulk string or simple string (`None` for nil and other types).
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(Some(b)) => Some(b),
            Reply::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// A bulk or simple string as text; panics on other types.
    pub fn text(&self) -> String {
        match self.bytes() {
            Some(b) => String::from_utf8_lossy(b).into_owned(),
            None => panic!("not a string reply: {self:?}"),
        }
    }

    /// An integer reply's value; panics on other types.
    pub fn int(&self) -> i64 {
        match self {
            Reply::Int(n) => *n,
            other => panic!("not an integer reply: {other:?}"),
        }
    }

    /// The elements of an array reply; panics on other types (nil array → empty).
    pub fn array(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(v)) => v,
            Reply::Array(None) => &[],
            other => panic!("not an array reply: {other:?}"),
        }
    }
}

/// Finds the next `\r\n` at or after `*pos`; returns the line and moves past it.
fn line_at<'a>(b: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let start = *pos;
    let end = start + b.get(start..)?.windows(2).position(|w| w == b"\r\n")?;
    *pos = end + 2;
    Some(&b[start..end])
}

/// Parses the RESP2 value at `*pos`, advancing `pos` past it.
fn parse_at(b: &[u8], pos: &mut usize) -> Option<Reply> {
    let line = line_at(b, pos)?;
    let (&t, rest) = line.split_first()?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    let num = || -> Option<i64> { std::str::from_utf8(rest).ok()?.parse().ok() };
    Some(match t {
        b'+' => Reply::Simple(text()),
        b'-' => Reply::Error(text()),
        b':' => Reply::Int(num()?),
        b'$' => {
            let n = num()?;
            if n < 0 {
                return Some(Reply::Bulk(None));
            }
            let n = n as usize;
            let data = b.get(*pos..*pos + n)?.to_vec();
            if b.get(*pos + n..*pos + n + 2)? != b"\r\n" {
                return None;
            }
            *pos += n + 2;
            Reply::Bulk(Some(data))
        }
        b'*' => {
            let n = num()?;
            if n < 0 {
                return Some(Reply::Array(None));
            }
            let mut v = Vec::with_capacity(n as usize);
            for _ in 0..n {
                v.push(parse_at(b, pos)?);
            }
            Reply::Array(Some(v))
        }
        _ => return None,
    })
}

/// Sends one command to `addr` on a fresh connection with a short read timeout and parses the
/// reply. Errors: connect/read failures (an error *reply* is `Ok(Reply::Error)`).
pub fn try_query(addr: &str, args: &[&str]) -> io::Result<Reply> {
    let mut c = RawClient::try_connect(addr)?;
    c.stream().set_read_timeout(Some(ADMIN_TIMEOUT))?;
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let raw = c.try_cmd(&args)?;
    Ok(Reply::parse(&raw))
}

/// [`try_query`] that panics on I/O errors (not on error replies).
pub fn query(addr: &str, args: &[&str]) -> Reply {
    try_query(addr, args).unwrap_or_else(|e| panic!("{args:?} to {addr}: {e}"))
}

// ---- topology ----------------------------------------------------------------------------

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The 40-character node id.
    pub id: String,
    /// `ip:port` (without `@cport`).
    pub addr: String,
    /// Flags: `myself`, `master`, `slave`, `fail?`, `fail`, `handshake`, `noaddr`, ...
    pub flags: Vec<String>,
    /// Id of its primary (`None` for a primary).
    pub primary_id: Option<String>,
    /// `connected` or `disconnected`.
    pub link: String,
    /// Owned slots, expanded (migrating/importing markers `[...]` are in `open_slots`).
    pub slots: Vec<u16>,
    /// `[slot->-id]` / `[slot-<-id]` entries: slots this node is migrating or importing.
    pub open_slots: Vec<String>,
}

impl NodeInfo {
    /// Whether the `master` flag is set.
    pub fn is_primary(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// Whether the `slave` flag is set.
    pub fn is_replica(&self) -> bool {
        self.flags.iter().any(|f| f == "slave")
    }

    /// Whether the `fail` or `fail?` flag is set.
    pub fn is_failing(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "fail?")
    }
}

/// Parses a `CLUSTER NODES` reply body.
pub fn parse_cluster_nodes(text: &str) -> Vec<NodeInfo> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!(f.len() >= 8, "short CLUSTER NODES line {line:?}");
        let addr = f[1].split('@').next().unwrap_or_default().to_string();
        let mut slots = Vec::new();
        let mut open_slots = Vec::new();
        for s in &f[8..] {
            if s.starts_with('[') {
                open_slots.push(s.to_string());
            } else if let Some((a, b)) = s.split_once('-') {
                let (a, b): (u16, u16) = (a.parse().expect("slot"), b.parse().expect("slot"));
                slots.extend(a..=b);
            } else {
                slots.push(s.parse().expect("slot"));
            }
        }
        out.push(NodeInfo {
            id: f[0].to_string(),
            addr,
            flags: f[2].split(',').map(str::to_string).collect(),
            primary_id: (f[3] != "-").then(|| f[3].to_string()),
            link: f[7].to_string(),
            slots,
            open_slots,
        });
    }
    out
}

/// A `CLUSTER SLOTS` reply in canonical form: `(first, last) → (primary, sorted replicas)`.
pub type SlotRanges = BTreeMap<(u16, u16), (String, Vec<String>)>;

/// Parses a `CLUSTER SLOTS` reply into [`SlotRanges`] (an empty IP means `queried`'s IP).
pub fn parse_cluster_slots(reply: &Reply, queried: &str) -> SlotRanges {
    let queried_ip = queried.rsplit_once(':').map(|(ip, _)| ip).unwrap_or("");
    let node = |r: &Reply| -> String {
        let f = r.array();
        let mut ip = f[0].text();
        if ip.is_empty() || ip == "?" {
            ip = queried_ip.to_string();
        }
        format!("{ip}:{}", f[1].int())
    };
    let mut out = SlotRanges::new();
    for range in reply.array() {
        let f = range.array();
        let (a, b) = (f[0].int() as u16, f[1].int() as u16);
        let primary = node(&f[2]);
        let mut replicas: Vec<String> = f[3..].iter().map(node).collect();
        replicas.sort();
        out.insert((a, b), (primary, replicas));
    }
    out
}

/// Parses `INFO commandstats` into command → counters (`cmdstat_get:calls=3,...` → `"get"`;
/// subcommands as Redis names them, e.g. `"cluster|slots"`).
pub fn parse_commandstats(info: &str) -> BTreeMap<String, CmdStat> {
    let mut out = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let mut s = CmdStat::default();
        for kv in fields.split(',') {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let v: u64 = v.parse().unwrap_or(0);
            match k {
                "calls" => s.calls = v,
                "rejected_calls" => s.rejected_calls = v,
                "failed_calls" => s.failed_calls = v,
                _ => {}
            }
        }
        out.insert(name.to_string(), s);
    }
    out
}

/// One command's counters from `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmdStat {
    /// Executed calls (on a replica this includes commands replicated from its primary).
    pub calls: u64,
    /// Calls refused before execution (for example `MOVED`, or a write sent to a replica).
    pub rejected_calls: u64,
    /// Calls that ran and returned an error.
    pub failed_calls: u64,
}

// ---- the cluster -------------------------------------------------------------------------

/// Six clustered `redis-server`s (three primaries with one replica each). See the module docs.
pub struct RedisCluster {
    servers: Vec<RedisServer>,
    stopped: HashSet<String>,
    /// The `redis-server` arguments every node was started with (for `add_node`).
    node_args: Vec<String>,
    /// The server binary every node runs (`redis-server` or `valkey-server`).
    program: String,
}

impl RedisCluster {
    /// Starts six cluster-enabled nodes, joins them with `redis-cli --cluster create
    /// --cluster-replicas 1 --cluster-yes` and waits until [`RedisCluster::wait_stable`].
    /// Panics (with `redis-cli`'s output) if the cluster does not form within 30 s.
    pub fn start() -> RedisCluster {
        Self::start_with(&[])
    }

    /// [`RedisCluster::start`] with extra `redis-server` arguments for every node (for
    /// example `&["--cluster-require-full-coverage", "no"]`).
    pub fn start_with(extra_args: &[&str]) -> RedisCluster {
        Self::start_program("redis-server", extra_args)
    }

    /// [`RedisCluster::start_with`] with every node running `program` (e.g. `valkey-server`).
    pub fn start_program(program: &str, extra_args: &[&str]) -> RedisCluster {
        let timeout = NODE_TIMEOUT_MS.to_string();
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            // Relative: in the server's own temp dir (its working directory).
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &timeout,
            "--appendonly",
            "no",
            "--save",
            "",
        ];
        args.extend_from_slice(extra_args);
        let servers: Vec<RedisServer> = (0..6).map(|_| start_node(program, &args)).collect();
        let cluster = RedisCluster {
            program: program.to_string(),
            servers,
            stopped: HashSet::new(),
            node_args: args.iter().map(|a| a.to_string()).collect(),
        };
        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        args.extend(cluster.nodes());
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        redis_cli(&args);
        cluster.wait_stable(Duration::from_secs(30));
        cluster
    }

    /// Seed addresses for Respite's `hosts`: every node's `127.0.0.1:port` (primaries and
    /// replicas, as started).
    pub fn seeds(&self) -> Vec<String> {
        self.nodes()
    }

    /// Every node's address in start order, including killed ones.
    pub fn nodes(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.addr()).collect()
    }

    /// Nodes that are running and not stopped (the ones admin queries go to).
    pub fn live_nodes(&self) -> Vec<String> {
        self.servers
            .iter()
            .filter(|s| s.is_running() && !self.stopped.contains(&s.addr()))
            .map(|s| s.addr())
            .collect()
    }

    /// The node listening on `addr`; panics if it is not one of ours.
    fn server(&self, addr: &str) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.addr() == addr)
            .unwrap_or_else(|| panic!("{addr} is not a node of this cluster"))
    }

    /// [`RedisCluster::server`], mutable.
    fn server_mut(&mut self, addr: &str) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.addr() == addr)
            .unwrap_or_else(|| panic!("{addr} is not a node of this cluster"))
    }

    /// `CLUSTER NODES` as seen by the first live node that answers, restricted to nodes the
    /// harness has not killed (a killed node stays in the table flagged `fail`).
    pub fn topology(&self) -> Vec<NodeInfo> {
        for addr in self.live_nodes() {
            if let Ok(Reply::Bulk(Some(text))) = try_query(&addr, &["CLUSTER", "NODES"]) {
                let running: HashSet<String> = self
                    .servers
                    .iter()
                    .filter(|s| s.is_running())
                    .map(|s| s.addr())
                    .collect();
                return parse_cluster_nodes(&String::from_utf8_lossy(&text))
                    .into_iter()
                    .filter(|n| running.contains(&n.addr))
                    .collect();
            }
        }
        panic!("no live node answered CLUSTER NODES");
    }

    /// Current primaries (running nodes with the `master` flag), sorted by address.
    pub fn primaries(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .topology()
            .into_iter()
            .filter(|n| n.is_primary())
            .map(|n| n.addr)
            .collect();
        v.sort();
        v
    }

    /// Current replicas (running nodes with the `slave` flag), sorted by address.
    pub fn replicas(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .topology()
            .into_iter()
            .filter(|n| n.is_replica())
            .map(|n| n.addr)
            .collect();
        v.sort();
        v
    }

    /// The running replicas of `primary`, sorted.
    pub fn replicas_of(&self, primary: &str) -> Vec<String> {
        let topo = self.topology();
        let id = topo
            .iter()
            .find(|n| n.addr == primary)
            .unwrap_or_else(|| panic!("{primary} not in CLUSTER NODES"))
            .id
            .clone();
        let mut v: Vec<String> = topo
            .into_iter()
            .filter(|n| n.primary_id.as_deref() == Some(id.as_str()))
            .map(|n| n.addr)
            .collect();
        v.sort();
        v
    }

    /// The primary a replica replicates from (per `CLUSTER NODES`).
    pub fn primary_of(&self, replica: &str) -> String {
        let topo = self.topology();
        let pid = topo
            .iter()
            .find(|n| n.addr == replica)
            .and_then(|n| n.primary_id.clone())
            .unwrap_or_else(|| panic!("{replica} is not a replica"));
        topo.into_iter()
            .find(|n| n.id == pid)
            .map(|n| n.addr)
            .unwrap_or_else(|| panic!("primary {pid} of {replica} not found"))
    }

    /// The node id of `addr` (`CLUSTER MYID`).
    pub fn node_id(&self, addr: &str) -> String {
        query(addr, &["CLUSTER", "MYID"]).text()
    }

    /// `CLUSTER SLOTS` of the first live node, canonical.
    pub fn slot_ranges(&self) -> SlotRanges {
        for addr in self.live_nodes() {
            if let Ok(r @ Reply::Array(_)) = try_query(&addr, &["CLUSTER", "SLOTS"]) {
                return parse_cluster_slots(&r, &addr);
            }
        }
        panic!("no live node answered CLUSTER SLOTS");
    }

    /// The primary serving `slot` according to `CLUSTER SLOTS` of a live node (call
    /// [`RedisCluster::wait_stable`] first when the topology just changed).
    pub fn slot_owner(&self, slot: u16) -> String {
        self.slot_ranges()
            .into_iter()
            .find(|((a, b), _)| (*a..=*b).contains(&slot))
            .map(|(_, (primary, _))| primary)
            .unwrap_or_else(|| panic!("slot {slot} is not served"))
    }

    /// slot → primary for all 16384 slots (one `CLUSTER SLOTS`); panics on an unserved slot.
    pub fn slot_owners(&self) -> Vec<String> {
        let mut owners = vec![String::new(); SLOTS as usize];
        for ((a, b), (primary, _)) in self.slot_ranges() {
            for s in a..=b {
                owners[s as usize] = primary.clone();
            }
        }
        if let Some(s) = owners.iter().position(String::is_empty) {
            panic!("slot {s} is not served");
        }
        owners
    }

    /// [`key_slot`], for convenience.
    pub fn key_slot(&self, key: &[u8]) -> u16 {
        key_slot(key)
    }

    /// The primary currently serving `key`.
    pub fn key_owner(&self, key: &[u8]) -> String {
        self.slot_owner(key_slot(key))
    }

    /// A fresh [`RawClient`] to node `addr`.
    pub fn raw(&self, addr: &str) -> RawClient {
        self.server(addr).raw()
    }

    /// `GET key` straight from the primary serving it (raw reply bytes).
    pub fn direct_get(&self, key: &[u8]) -> Vec<u8> {
        RawClient::connect(&self.key_owner(key)).cmd(&[b"GET", key])
    }

    /// Moves `nslots` slots from primary `from` to primary `to` with `redis-cli --cluster
    /// reshard` (default `--cluster-pipeline`, 10 keys per MIGRATE), then waits until stable.
    pub fn reshard(&self, from: &str, to: &str, nslots: u32) {
        self.reshard_with(from, to, nslots, 10);
    }

    /// [`RedisCluster::reshard`] with `--cluster-pipeline pipeline` (keys per `MIGRATE`).
    ///
    /// redis-cli takes the *lowest* `nslots` slots of `from`; for each slot it sets IMPORTING
    /// on `to` and MIGRATING on `from`, moves the keys with `MIGRATE` in batches of `pipeline`,
    /// then `CLUSTER SETSLOT <slot> NODE <to>` on every primary. It refuses to start while the
    /// cluster has open slots or disagreeing nodes, so this waits for stability first. Panics
    /// with redis-cli's output on failure.
    pub fn reshard_with(&self, from: &str, to: &str, nslots: u32, pipeline: u32) {
        self.wait_stable(Duration::from_secs(30));
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let args: Vec<String> = [
            "--cluster",
            "reshard",
            from,
            "--cluster-from",
            &from_id,
            "--cluster-to",
            &to_id,
            "--cluster-slots",
            &nslots.to_string(),
            "--cluster-pipeline",
            &pipeline.to_string(),
            "--cluster-yes",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        redis_cli(&args);
        self.wait_stable(Duration::from_secs(30));
    }

    /// `CLUSTER FAILOVER` on `replica` (a manual, coordinated failover); waits until `replica`
    /// is a primary and its old primary a replica, then until stable. Panics after 30 s.
    pub fn failover(&self, replica: &str) {
        let old_primary = self.primary_of(replica);
        let r = query(replica, &["CLUSTER", "FAILOVER"]);
        assert_eq!(
            r,
            Reply::Simple("OK".into()),
            "CLUSTER FAILOVER on {replica}"
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let topo = self.topology();
            let is = |addr: &str, primary: bool| {
                topo.iter().any(|n| {
                    n.addr == addr
                        && (if primary {
                            n.is_primary()
                        } else {
                            n.is_replica()
                        })
                })
            };
            let own_view = try_query(replica, &["ROLE"])
                .ok()
                .and_then(|r| r.array().first().map(Reply::text));
            if is(replica, true) && is(&old_primary, false) && own_view.as_deref() == Some("master")
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "failover of {replica} did not complete: {topo:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_stable(Duration::from_secs(30));
    }

    /// Starts a seventh (eighth, ...) cluster-enabled node, adds it to the cluster as an empty
    /// primary with `redis-cli --cluster add-node`, waits until stable and returns its address.
    pub fn add_node(&mut self) -> String {
        let args: Vec<&str> = self.node_args.iter().map(String::as_str).collect();
        let server = start_node(&self.program, &args);
        let addr = server.addr();
        let existing = self.live_nodes()[0].clone();
        self.servers.push(server);
        redis_cli(&[
            "--cluster".into(),
            "add-node".into(),
            addr.clone(),
            existing,
        ]);
        // add-node returns once MEET is sent: wait until every node knows the new one.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.live_nodes().iter().all(|n| {
            try_query(n, &["CLUSTER", "NODES"])
                .ok()
                .and_then(|r| {
                    r.bytes()
                        .map(|b| String::from_utf8_lossy(b).contains(&addr))
                })
                .unwrap_or(false)
        }) {
            assert!(Instant::now() < deadline, "{addr} did not join");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_stable(Duration::from_secs(30));
        addr
    }

    /// SIGKILLs node `addr` (and reaps it). Its replica takes over after the node timeout.
    pub fn kill(&mut self, addr: &str) {
        self.stopped.remove(addr);
        self.server_mut(addr).kill();
    }

    /// Restarts a killed node on the same port with its `nodes.conf` (it rejoins, typically
    /// as a replica once its slots were taken over).
    pub fn restart(&mut self, addr: &str) {
        self.stopped.remove(addr);
        self.server_mut(addr).restart();
    }

    /// SIGSTOPs node `addr` (it stops answering; the harness skips it in admin queries).
    pub fn sigstop(&mut self, addr: &str) {
        signal(self.server(addr).pid(), "STOP");
        self.stopped.insert(addr.to_string());
    }

    /// SIGCONTs a node stopped with [`RedisCluster::sigstop`].
    pub fn sigcont(&mut self, addr: &str) {
        signal(self.server(addr).pid(), "CONT");
        self.stopped.remove(addr);
    }

    /// `INFO commandstats` of `addr`: command → executed calls.
    pub fn commandstats(&self, addr: &str) -> BTreeMap<String, u64> {
        self.commandstats_full(addr)
            .into_iter()
            .map(|(k, v)| (k, v.calls))
            .collect()
    }

    /// `INFO commandstats` of `addr` with rejected and failed calls.
    pub fn commandstats_full(&self, addr: &str) -> BTreeMap<String, CmdStat> {
        parse_commandstats(&query(addr, &["INFO", "commandstats"]).text())
    }

    /// `CONFIG RESETSTAT` on every live node (zeroes `INFO commandstats`).
    pub fn reset_stats(&self) {
        for addr in self.live_nodes() {
            assert_eq!(
                query(&addr, &["CONFIG", "RESETSTAT"]),
                Reply::Simple("OK".into()),
                "CONFIG RESETSTAT on {addr}"
            );
        }
    }

    /// Waits until every live node reports `cluster_state:ok`, all live nodes return the same
    /// `CLUSTER SLOTS` covering all 16384 slots with only live nodes as primaries, no node has
    /// migrating/importing slots, and every running replica's link to its primary is up.
    /// Panics with the last disagreement after `timeout`.
    pub fn wait_stable(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let why = match self.unstable_reason() {
                None => return,
                Some(why) => why,
            };
            assert!(
                Instant::now() < deadline,
                "cluster not stable after {timeout:?}: {why}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Why the cluster is not stable right now, or `None` if it is (see `wait_stable`).
    fn unstable_reason(&self) -> Option<String> {
        let live = self.live_nodes();
        let mut first: Option<(String, SlotRanges)> = None;
        for addr in &live {
            let info = match try_query(addr, &["CLUSTER", "INFO"]) {
                Ok(r @ Reply::Bulk(Some(_))) => r.text(),
                other => return Some(format!("{addr}: CLUSTER INFO → {other:?}")),
            };
            if !info.contains("cluster_state:ok") {
                return Some(format!("{addr}: not cluster_state:ok"));
            }
            let nodes = match try_query(addr, &["CLUSTER", "NODES"]) {
                Ok(r @ Reply::Bulk(Some(_))) => parse_cluster_nodes(&r.text()),
                other => return Some(format!("{addr}: CLUSTER NODES → {other:?}")),
            };
            if let Some(n) = nodes.iter().find(|n| !n.open_slots.is_empty()) {
                return Some(format!(
                    "{addr} sees open slots on {}: {:?}",
                    n.addr, n.open_slots
                ));
            }
            if let Some(n) = nodes
                .iter()
                .find(|n| live.contains(&n.addr) && (n.is_failing() || n.link != "connected"))
            {
                return Some(format!(
                    "{addr} sees live {} as {:?}/{}",
                    n.addr, n.flags, n.link
                ));
            }
            let me = nodes.iter().find(|n| n.flags.iter().any(|f| f == "myself"));
            if me.is_some_and(|m| m.is_replica()) {
                let repl = match try_query(addr, &["INFO", "replication"]) {
                    Ok(r @ Reply::Bulk(Some(_))) => r.text(),
                    other => return Some(format!("{addr}: INFO replication → {other:?}")),
                };
                if !repl.contains("master_link_status:up") {
                    return Some(format!("{addr}: replica link to its primary not up"));
                }
            }
            let slots = match try_query(addr, &["CLUSTER", "SLOTS"]) {
                Ok(r @ Reply::Array(Some(_))) => parse_cluster_slots(&r, addr),
                other => return Some(format!("{addr}: CLUSTER SLOTS → {other:?}")),
            };
            let covered: u32 = slots.keys().map(|(a, b)| u32::from(b - a) + 1).sum();
            if covered != u32::from(SLOTS) {
                return Some(format!("{addr}: CLUSTER SLOTS covers {covered} slots"));
            }
            if let Some((_, (p, _))) = slots.iter().find(|(_, (p, _))| !live.contains(p)) {
                return Some(format!("{addr}: CLUSTER SLOTS names {p}, not live"));
            }
            // Redis 7 leaves a replica out of CLUSTER SLOTS while its replication offset is 0
            // (`isReplicaAvailable`), as in a fresh cluster before the first write: wait until
            // every live replica is listed, so Respite's first map has the replicas.
            let live_replicas = |primary: &str| {
                let id = nodes
                    .iter()
                    .find(|n| n.addr == primary)
                    .map(|n| n.id.clone());
                nodes
                    .iter()
                    .filter(|n| {
                        live.contains(&n.addr) && n.primary_id.is_some() && n.primary_id == id
                    })
                    .count()
            };
            if let Some(((a, b), (p, r))) =
                slots.iter().find(|(_, (p, r))| r.len() < live_replicas(p))
            {
                // A write moves the offsets on; the next check sees the replica listed.
                if let Some(key) = (0..1_000_000)
                    .map(|i| format!("harness:{i}"))
                    .find(|k| (*a..=*b).contains(&key_slot(k.as_bytes())))
                {
                    // Set and delete: replicated writes that leave no key behind.
                    let _ = try_query(p, &["SET", &key, "1"]);
                    let _ = try_query(p, &["DEL", &key]);
                }
                return Some(format!(
                    "{addr}: CLUSTER SLOTS lists {} replica(s) of {p}",
                    r.len()
                ));
            }
            match &first {
                None => first = Some((addr.clone(), slots)),
                Some((a0, s0)) if *s0 != slots => {
                    return Some(format!("{a0} and {addr} disagree on CLUSTER SLOTS"));
                }
                Some(_) => {}
            }
        }
        None
    }

    /// Slots owned per primary (from `CLUSTER SLOTS`), for reports and assertions.
    pub fn slot_counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for owner in self.slot_owners() {
            *out.entry(owner).or_default() += 1;
        }
        out
    }

    /// Sum of `DBSIZE` over the current primaries.
    pub fn dbsize(&self) -> i64 {
        self.primaries()
            .iter()
            .map(|p| query(p, &["DBSIZE"]).int())
            .sum()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // RedisServer's own drop SIGKILLs; a stopped process dies from SIGKILL too.
        for s in &mut self.servers {
            s.kill();
        }
    }
}

/// Starts one cluster node with `args` and its own free cluster bus port (`--cluster-port`):
/// the default, port + 10000, does not exist for ports above 55535, which the kernel hands out
/// (ephemeral range up to 60999), and may be taken.
fn start_node(program: &str, args: &[&str]) -> RedisServer {
    let bus = crate::free_port().to_string();
    let mut args = args.to_vec();
    args.extend(["--cluster-port", &bus]);
    RedisServer::start_program(program, &args)
}

/// Runs `redis-cli <args>` (with a 120 s timeout); panics with its output unless it exits 0
/// and prints no `[ERR]` line.
pub fn redis_cli(args: &[String]) -> String {
    let out = Command::new("timeout")
        .arg("120")
        .arg("redis-cli")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run redis-cli (package redis-tools): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !text.contains("[ERR]"),
        "redis-cli {} failed ({}):\n{text}",
        args.join(" "),
        out.status
    );
    text
}

/// Sends signal `sig` (`"STOP"`, `"CONT"`, ...) to `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid} failed");
}

// ---- Respite config ----------------------------------------------------------------------

/// Cluster-table defaults of [`cluster_config`] (fast refreshes for tests); a key given in
/// `extra` replaces its default.
const CLUSTER_DEFAULTS: &[(&str, &str)] = &[
    ("cluster_refresh_rate", "\"1s\""),
    ("cluster_refresh_timeout", "\"1s\""),
    ("redirect_refresh_interval", "\"200ms\""),
    ("redirect_refresh_threshold", "5"),
    ("failure_refresh_threshold", "1"),
];

/// Listener defaults of [`cluster_config`]; a key given in `extra` replaces its default.
const LISTENER_DEFAULTS: &[(&str, &str)] = &[("op_timeout", "\"1s\"")];

/// Listener keys that [`cluster_config`] routes from `extra` into the `[[listeners]]` table.
const LISTENER_KEYS: &[&str] = &[
    "op_timeout",
    "max_upstream_unknown_connections",
    "stat_prefix",
    "max_buffer_size_before_flush",
    "buffer_flush_timeout",
    "local_zone",
];

/// A Respite config with 2 workers, listener `main` on `127.0.0.1:port` with `read_policy`
/// (`"primary"`, `"replica"`, ...), admin on `admin_port`, and cluster `rc` of `type =
/// "redis_cluster"` over `seeds`.
///
/// `extra` holds `key = value` lines: listener keys (`op_timeout`,
/// `max_upstream_unknown_connections`, ...) go into the listener table, all others into the
/// cluster table; each replaces the default of the same key (`op_timeout = "1s"`,
/// `cluster_refresh_rate = "1s"`, `cluster_refresh_timeout = "1s"`,
/// `redirect_refresh_interval = "200ms"`, `redirect_refresh_threshold = 5`,
/// `failure_refresh_threshold = 1`).
pub fn cluster_config(
    port: u16,
    admin_port: u16,
    seeds: &[String],
    read_policy: &str,
    extra: &str,
) -> String {
    let extra: Vec<(String, String)> = extra
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("extra line {l:?} is not `key = value`"));
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let given: BTreeSet<&str> = extra.iter().map(|(k, _)| k.as_str()).collect();
    let lines = |defaults: &[(&str, &str)], listener: bool| -> String {
        let mut s = String::new();
        for (k, v) in defaults.iter().filter(|(k, _)| !given.contains(k)) {
            s.push_str(&format!("{k} = {v}\n"));
        }
        for (k, v) in extra
            .iter()
            .filter(|(k, _)| LISTENER_KEYS.contains(&k.as_str()) == listener)
        {
            s.push_str(&format!("{k} = {v}\n"));
        }
        s
    };
    let hosts: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        r#"[admin]
address = "127.0.0.1:{admin_port}"
[runtime]
workers = 2
drain_timeout = "5s"
[[listeners]]
name = "main"
address = "127.0.0.1:{port}"
read_policy = "{read_policy}"
{listener}[listeners.prefix_routes.catch_all_route]
cluster = "rc"
[[clusters]]
name = "rc"
type = "redis_cluster"
hosts = [{hosts}]
{cluster}"#,
        listener = lines(LISTENER_DEFAULTS, true),
        cluster = lines(CLUSTER_DEFAULTS, false),
        hosts = hosts.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_overrides() {
        let seeds = vec!["127.0.0.1:7000".to_string()];
        let c = cluster_config(
            1,
            2,
            &seeds,
            "replica",
            "cluster_refresh_rate = \"60s\"\nmax_upstream_unknown_connections = 0",
        );
        let parsed = respite::config::parse(&c, "cluster_config");
        assert!(parsed.is_ok(), "{c}\n{parsed:?}");
        assert_eq!(c.matches("cluster_refresh_rate").count(), 1, "{c}");
        assert!(c.contains("cluster_refresh_rate = \"60s\""), "{c}");
        let (listener, cluster) = c.split_once("[[clusters]]").unwrap();
        assert!(
            listener.contains("max_upstream_unknown_connections = 0"),
            "{c}"
        );
        assert!(listener.contains("op_timeout = \"1s\""), "{c}");
        assert!(cluster.contains("failure_refresh_threshold = 1"), "{c}");
    }

    #[test]
    fn parses_replies_and_tables() {
        let r = Reply::parse(b"*2\r\n$3\r\nfoo\r\n*2\r\n:1\r\n$-1\r\n");
        assert_eq!(
            r,
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"foo".to_vec())),
                Reply::Array(Some(vec![Reply::Int(1), Reply::Bulk(None)])),
            ]))
        );
        let nodes = parse_cluster_nodes(
            "a 127.0.0.1:1@11 myself,master - 0 0 1 connected 0-2 5 [6->-b]\n\
             b 127.0.0.1:2@12 slave a 0 0 1 connected\n",
        );
        assert_eq!(nodes[0].slots, vec![0, 1, 2, 5]);
        assert_eq!(nodes[0].open_slots, vec!["[6->-b]".to_string()]);
        assert!(nodes[1].is_replica());
        assert_eq!(nodes[1].primary_id.as_deref(), Some("a"));
        let stats = parse_commandstats(
            "# Commandstats\r\ncmdstat_get:calls=3,usec=1,usec_per_call=0.33,rejected_calls=2,failed_calls=1\r\n",
        );
        assert_eq!(
            stats["get"],
            CmdStat {
                calls: 3,
                rejected_calls: 2,
                failed_calls: 1
            }
        );
    }
}
