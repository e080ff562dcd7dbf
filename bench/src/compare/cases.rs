//! The case list of a comparison: main cases, open-loop, the scaling sweeps, and the stateful
//! cases (transactions, blocking commands) and pub/sub fan-out cases that run only when
//! `--cases` names them.

/// Which table a case belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Group {
    /// Closed-loop main cases (50 connections).
    Main,
    /// Open-loop GET at half of Redis direct's GET P1 throughput.
    OpenLoop,
    /// GET P1 at different connection counts.
    Connections,
    /// GET at 50 connections with different pipeline depths.
    Pipeline,
    /// Transactions and blocking commands (closed loop, one unit = one transaction or one
    /// BLPOP); run only when `--cases` names them (or is `all`).
    Stateful,
    /// Pub/sub fan-out: one publisher, N subscribers on one channel (one unit = one message
    /// delivered to one subscriber); run only when `--cases` names them (or is `all`).
    PubSub,
}

/// What one unit of load is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Requests of the case's `mix`, `pipeline` in flight per connection; a unit is a request.
    Mix,
    /// Each connection loops `MULTI`, `SET {cN}k v`, `INCR {cN}n`, `EXEC` (written at once, the
    /// four replies read); a unit is a transaction.
    Tx,
    /// Pairs of connections (`connections` counts both): one sends `BLPOP {pN}l 0`, the other
    /// `LPUSH {pN}l x`, and the next round starts when both replied (one element in flight per
    /// pair); a unit is a completed BLPOP.
    PingPong,
    /// One connection PUBLISHes `value_size`-byte payloads to one channel (`pipeline` in
    /// flight), the other `connections - 1` are subscribed to it; a unit is one message read by
    /// one subscriber (see `pubsub.rs`).
    PubSub,
}

/// One load shape, run against every target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Case {
    /// Stable id used by `--cases` / `--scaling`, e.g. `get-p16`.
    pub id: &'static str,
    /// Label in tables, e.g. `GET P16`.
    pub label: &'static str,
    pub group: Group,
    /// `--mix` expression; for a stateful workload, the commands of one unit (not parsed).
    pub mix: &'static str,
    pub connections: usize,
    pub pipeline: usize,
    /// SET/MSET value size in bytes.
    pub value_size: usize,
    /// Keys are `key:<key_offset + n>` (the 1 KiB keyspace lives at 1 000 000+).
    pub key_offset: u64,
    /// Load generator threads.
    pub threads: usize,
    /// What a unit of load is.
    pub workload: Workload,
    /// Targets that cannot run the case (twemproxy refuses MULTI and blocking commands and
    /// closes the connection, and has no pub/sub): not run, shown as `n/a`.
    pub not_on: &'static [&'static str],
}

/// Keys per keyspace.
pub const KEYSPACE: u64 = 100_000;
/// Where the 1 KiB-value keyspace starts.
pub const KEY_OFFSET_1K: u64 = 1_000_000;

const fn case(
    id: &'static str,
    label: &'static str,
    group: Group,
    mix: &'static str,
    connections: usize,
    pipeline: usize,
) -> Case {
    Case {
        id,
        label,
        group,
        mix,
        connections,
        pipeline,
        value_size: 3,
        key_offset: 0,
        threads: 1,
        workload: Workload::Mix,
        not_on: &[],
    }
}

/// Every case, in run order within its group.
pub fn all_cases() -> Vec<Case> {
    use Group::*;
    vec![
        case("get-p1", "GET P1", Main, "get", 50, 1),
        case("set-p1", "SET P1", Main, "set", 50, 1),
        case("get-p16", "GET P16", Main, "get", 50, 16),
        case("set-p16", "SET P16", Main, "set", 50, 16),
        case("mget10-p1", "MGET10 P1", Main, "mget:10", 50, 1),
        case("mset10-p1", "MSET10 P1", Main, "mset:10", 50, 1),
        case("mget10-p16", "MGET10 P16", Main, "mget:10", 50, 16),
        case("mset10-p16", "MSET10 P16", Main, "mset:10", 50, 16),
        Case {
            value_size: 1024,
            key_offset: KEY_OFFSET_1K,
            ..case(
                "mix1k-p1",
                "1KiB get:80,set:20 P1",
                Main,
                "get:80,set:20",
                50,
                1,
            )
        },
        case("open-loop", "GET open-loop", OpenLoop, "get", 50, 1),
        case("conns-10", "GET P1 c=10", Connections, "get", 10, 1),
        case("conns-100", "GET P1 c=100", Connections, "get", 100, 1),
        case("conns-1000", "GET P1 c=1000", Connections, "get", 1000, 1),
        // One client thread cannot drive 10 000 connections fast enough; two can.
        Case {
            threads: 2,
            ..case(
                "conns-10000",
                "GET P1 c=10000",
                Connections,
                "get",
                10_000,
                1,
            )
        },
        case("pipe-4", "GET P4", Pipeline, "get", 50, 4),
        case("pipe-64", "GET P64", Pipeline, "get", 50, 64),
        Case {
            workload: Workload::Tx,
            not_on: &["twemproxy"],
            ..case(
                "tx-c50",
                "MULTI+SET+INCR+EXEC c=50",
                Stateful,
                "MULTI; SET {cN}k v; INCR {cN}n; EXEC",
                50,
                1,
            )
        },
        Case {
            workload: Workload::PingPong,
            not_on: &["twemproxy"],
            ..case(
                "blpop-pingpong",
                "BLPOP/LPUSH ping-pong, 25 pairs",
                Stateful,
                "BLPOP {pN}l 0 | LPUSH {pN}l x",
                50,
                1,
            )
        },
        pubsub("pubsub-1", "PUBLISH → 1 subscriber", 1),
        pubsub("pubsub-100", "PUBLISH → 100 subscribers", 100),
        pubsub("pubsub-1000", "PUBLISH → 1 000 subscribers", 1000),
    ]
}

/// A pub/sub fan-out case: one publisher (16 PUBLISH in flight) and `subscribers` subscribers
/// of one channel, [`super::pubsub::PAYLOAD`]-byte payloads; twemproxy has no
/// pub/sub.
const fn pubsub(id: &'static str, label: &'static str, subscribers: usize) -> Case {
    Case {
        workload: Workload::PubSub,
        value_size: super::pubsub::PAYLOAD,
        not_on: &["twemproxy"],
        ..case(
            id,
            label,
            Group::PubSub,
            "PUBLISH ch <seq+time> | SUBSCRIBE ch",
            subscribers + 1,
            16,
        )
    }
}

/// Cases of `--quick`.
pub const QUICK: &[&str] = &[
    "get-p1",
    "set-p1",
    "get-p16",
    "set-p16",
    "mget10-p1",
    "open-loop",
    "conns-10",
    "conns-1000",
];

/// Selects cases: `main` is `all` or a comma list of main/open-loop/stateful/pub/sub ids,
/// `scaling` is `all`, `none` or a comma list of scaling ids. Without `main` the stateful and
/// pub/sub cases are left out and `quick` starts from [`QUICK`] instead of everything else.
pub fn select(quick: bool, main: Option<&str>, scaling: Option<&str>) -> Result<Vec<Case>, String> {
    let all = all_cases();
    for list in [main, scaling].into_iter().flatten() {
        for id in list.split(',').map(str::trim) {
            if !matches!(id, "all" | "none" | "") && !all.iter().any(|c| c.id == id) {
                let ids: Vec<&str> = all.iter().map(|c| c.id).collect();
                return Err(format!("unknown case `{id}`; known: {}", ids.join(", ")));
            }
        }
    }
    let wanted = |c: &Case| {
        let named_only = matches!(c.group, Group::Stateful | Group::PubSub);
        let is_main = named_only || matches!(c.group, Group::Main | Group::OpenLoop);
        let list = if is_main { main } else { scaling };
        match list {
            Some("all") => true,
            Some(l) => l.split(',').any(|id| id.trim() == c.id),
            None => !named_only && (!quick || QUICK.contains(&c.id)),
        }
    };
    Ok(all.into_iter().filter(|c| wanted(c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        let stateful = all_cases()
            .iter()
            .filter(|c| c.group == Group::Stateful)
            .count();
        assert_eq!(stateful, 2);
        let pubsub = all_cases()
            .iter()
            .filter(|c| c.group == Group::PubSub)
            .count();
        assert_eq!(pubsub, 3);
        assert_eq!(
            select(false, None, None).unwrap().len(),
            all_cases().len() - stateful - pubsub
        );
        assert_eq!(
            select(false, Some("all"), Some("all")).unwrap().len(),
            all_cases().len()
        );
        let s = select(false, Some("tx-c50,blpop-pingpong"), Some("none")).unwrap();
        assert!(
            s.iter()
                .all(|c| c.group == Group::Stateful && c.not_on == ["twemproxy"])
        );
        let s = select(true, Some("pubsub-1,pubsub-100,pubsub-1000"), Some("none")).unwrap();
        let shape: Vec<_> = s
            .iter()
            .map(|c| (c.id, c.group, c.workload, c.connections, c.pipeline))
            .collect();
        assert_eq!(
            shape,
            [
                ("pubsub-1", Group::PubSub, Workload::PubSub, 2, 16),
                ("pubsub-100", Group::PubSub, Workload::PubSub, 101, 16),
                ("pubsub-1000", Group::PubSub, Workload::PubSub, 1001, 16),
            ]
        );
        assert!(s.iter().all(|c| c.not_on == ["twemproxy"]));
        // Named alone, without the scaling list: only the pub/sub case.
        let ids: Vec<_> = select(false, Some("pubsub-100"), Some("none"))
            .unwrap()
            .iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ids, ["pubsub-100"]);
        assert!(
            select(true, None, None)
                .unwrap()
                .iter()
                .all(|c| c.group != Group::PubSub)
        );
        let q = select(true, None, None).unwrap();
        assert_eq!(q.len(), QUICK.len());
        let s = select(true, Some("get-p1,open-loop"), Some("none")).unwrap();
        let ids: Vec<_> = s.iter().map(|c| c.id).collect();
        assert_eq!(ids, ["get-p1", "open-loop"]);
        assert!(select(false, Some("bogus"), None).is_err());
        let s = select(false, Some("none"), Some("pipe-64")).unwrap();
        assert_eq!(s.len(), 1);
    }
}
