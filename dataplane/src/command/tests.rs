use super::split::{Part, merge, split};
use super::*;

#[test]
fn ids_are_row_indexes_and_names_unique() {
    for (i, c) in COMMANDS.iter().enumerate() {
        assert_eq!(usize::from(c.id), i, "{}", c.name);
        assert_eq!(c.name, c.name.to_ascii_lowercase());
        assert!(c.name.len() <= MAX_NAME);
        assert_eq!(lookup_fullname(c.name.as_bytes()), Some(c));
        if !c.name.contains('|') {
            assert_eq!(lookup(c.name.as_bytes()), Some(c));
        }
    }
    let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), COMMANDS.len());
}

#[test]
fn lookup_is_case_insensitive() {
    assert_eq!(lookup(b"GET").map(|c| c.name), Some("get"));
    assert_eq!(lookup(b"gEtDeL").map(|c| c.name), Some("getdel"));
    assert_eq!(
        lookup(b"GEORADIUSBYMEMBER_RO").map(|c| c.name),
        Some("georadiusbymember_ro")
    );
    assert_eq!(lookup(b"nosuch"), None);
    assert_eq!(lookup(b""), None);
    assert_eq!(lookup(&[b'a'; 33]), None);
    assert_eq!(lookup(b"get\0"), None);
    // Subcommand rows are not command names.
    assert_eq!(lookup(b"script|load"), None);
    assert_eq!(
        lookup_fullname(b"SCRIPT|Load").map(|c| c.name),
        Some("script|load")
    );
}

#[test]
fn rows_follow_redis() {
    let c = |n: &str| *lookup(n.as_bytes()).expect("test value");
    let get = c("get");
    assert_eq!(
        (get.arity, get.first_key, get.last_key, get.step, get.write),
        (2, 1, 1, 1, false)
    );
    assert_eq!(get.kind, Kind::Keyed);
    let set = c("set");
    assert_eq!((set.arity, set.write), (-3, true));
    assert_eq!(c("mget").kind, Kind::Split(Merge::Mget));
    assert_eq!((c("mset").arity, c("mset").step), (-3, 2));
    assert_eq!(c("mset").kind, Kind::Split(Merge::Mset));
    for n in ["del", "unlink", "exists", "touch"] {
        assert_eq!(c(n).kind, Kind::Split(Merge::SumIntegers));
        assert_eq!((c(n).arity, c(n).first_key, c(n).last_key), (-2, 1, -1));
    }
    assert_eq!(c("ping").kind, Kind::Local(Local::Ping));
    assert_eq!(c("echo").arity, 2);
    assert_eq!(c("auth").arity, -2);
    assert_eq!(c("xgroup").kind, Kind::Container);
    assert_eq!(
        lookup_fullname(b"xgroup|create")
            .expect("test value")
            .first_key,
        2
    );
    assert_eq!(
        lookup_fullname(b"object|encoding")
            .expect("test value")
            .first_key,
        2
    );
    assert!(c("getex").write && !c("sort_ro").write && c("xadd").write);
    let counts = COMMANDS.iter().fold([0; 3], |mut a, c| {
        a[match c.kind {
            Kind::Keyed => 0,
            Kind::Split(_) => 1,
            Kind::Local(_) => 2,
            _ => return a,
        }] += 1;
        a
    });
    assert_eq!(counts[1], 6);
    assert_eq!(counts[2], 27);
    assert!(counts[0] > 120);
}

#[test]
fn arity_and_keys() {
    let get = lookup(b"get").expect("test value");
    assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
    let mset = lookup(b"mset").expect("test value");
    assert!(mset.arity_ok(3) && mset.arity_ok(5) && !mset.arity_ok(2));
    assert!(keys_complete(mset, 5) && !keys_complete(mset, 4));
    assert_eq!(key_indices(mset, 5).collect::<Vec<_>>(), vec![1, 3]);
    assert_eq!(key_count(lookup(b"mget").expect("test value"), 4), 3);
    assert_eq!(key_count(lookup(b"ping").expect("test value"), 2), 0);
    assert_eq!(key_count(get, 1), 0);
    let args: [&[u8]; 3] = [b"xinfo", b"stream", b"s1"];
    assert_eq!(
        key_of(lookup_fullname(b"xinfo|stream").expect("test value"), &args),
        Some(&b"s1"[..])
    );
    assert_eq!(key_of(get, &[b"get"]), None);
    assert_eq!(
        key_of(lookup(b"ping").expect("test value"), &[b"ping", b"x"]),
        None
    );
}

#[test]
fn error_replies() {
    assert_eq!(
        arity_error(lookup(b"GET").expect("test value")),
        b"-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        unknown_command_error(&[b"FOO", b"a", b"b c"]),
        b"-ERR unknown command 'FOO', with args beginning with: 'a' 'b c' \r\n"
    );
    assert_eq!(
        unknown_command_error(&[b"foo"]),
        b"-ERR unknown command 'foo', with args beginning with: \r\n"
    );
    assert_eq!(
        unknown_command_error(&[b"f\r\no", b"x\ny"]),
        b"-ERR unknown command 'f  o', with args beginning with: 'x y' \r\n"
    );
    // Args stop once the text reaches 128 bytes; each is cut to what is left.
    let long = [b'x'; 200];
    let want = format!(
        "-ERR unknown command 'foo', with args beginning with: '{}' \r\n",
        "x".repeat(128)
    );
    assert_eq!(
        unknown_command_error(&[b"foo", &long, b"b"]),
        want.as_bytes()
    );
    let a100 = [b'a'; 100];
    let want = format!(
        "-ERR unknown command 'foo', with args beginning with: '{}' '{}' \r\n",
        "a".repeat(100),
        "b".repeat(25)
    );
    assert_eq!(
        unknown_command_error(&[b"foo", &a100, &[b'b'; 50], b"c"]),
        want.as_bytes()
    );
    let name = [b'n'; 300];
    let want = format!(
        "-ERR unknown command '{}', with args beginning with: \r\n",
        "n".repeat(128)
    );
    assert_eq!(unknown_command_error(&[&name]), want.as_bytes());
}

fn shard_by_first_byte(k: &[u8]) -> Option<usize> {
    Some(usize::from(k.first().copied().unwrap_or(0) % 2))
}

fn cmd(v: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::resp::encode::command(&mut out, v.iter().copied());
    out
}

#[test]
fn split_mget_groups_by_shard_in_order() {
    let spec = lookup(b"mget").expect("test value");
    let args: [&[u8]; 5] = [b"MGET", b"a", b"b", b"c", b"a"];
    // 'a' = 97 (odd → 1), 'b' = 98 (0), 'c' = 99 (1).
    let parts = split(spec, &args, &mut shard_by_first_byte);
    assert_eq!(
        parts,
        vec![
            Part {
                shard: Some(1),
                request: cmd(&[b"MGET", b"a", b"c", b"a"]),
                keys: vec![0, 2, 3]
            },
            Part {
                shard: Some(0),
                request: cmd(&[b"MGET", b"b"]),
                keys: vec![1]
            },
        ]
    );
    let replies: [&[u8]; 2] = [
        b"*3\r\n$2\r\nva\r\n$-1\r\n$2\r\nva\r\n",
        b"*1\r\n$2\r\nvb\r\n",
    ];
    let mut out = Vec::new();
    merge(Merge::Mget, 4, &parts, &replies, &mut out);
    assert_eq!(out, b"*4\r\n$2\r\nva\r\n$2\r\nvb\r\n$-1\r\n$2\r\nva\r\n");
}

#[test]
fn mget_errors_inline() {
    let spec = lookup(b"mget").expect("test value");
    let args: [&[u8]; 4] = [b"mget", b"a", b"b", b"c"];
    let parts = split(spec, &args, &mut shard_by_first_byte);
    // Part 0 (a, c) failed; part 1 (b) answered.
    let mut out = Vec::new();
    merge(
        Merge::Mget,
        3,
        &parts,
        &[b"-upstream failure\r\n", b"*1\r\n$1\r\nB\r\n"],
        &mut out,
    );
    assert_eq!(
        out,
        b"*3\r\n-upstream failure\r\n$1\r\nB\r\n-upstream failure\r\n"
    );
    // A non-array reply, and an array of the wrong length.
    let mut out = Vec::new();
    merge(
        Merge::Mget,
        3,
        &parts,
        &[b":1\r\n", b"*2\r\n$1\r\nB\r\n$1\r\nC\r\n"],
        &mut out,
    );
    let pe = "-upstream protocol error\r\n";
    assert_eq!(
        String::from_utf8(out).expect("test value"),
        format!("*3\r\n{pe}{pe}{pe}")
    );
    // A missing reply, and non-bulk elements.
    let mut out = Vec::new();
    merge(
        Merge::Mget,
        3,
        &parts,
        &[b"*2\r\n:1\r\n$1\r\nC\r\n"],
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out).expect("test value"),
        format!("*3\r\n{pe}{pe}$1\r\nC\r\n")
    );
}

#[test]
fn mget_duplicates_single_shard() {
    let spec = lookup(b"mget").expect("test value");
    let args: [&[u8]; 3] = [b"MGET", b"a", b"a"];
    let parts = split(spec, &args, |_| Some(7));
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].shard, Some(7));
    assert_eq!(parts[0].request, cmd(&[b"MGET", b"a", b"a"]));
    assert_eq!(parts[0].keys, vec![0, 1]);
    let mut out = Vec::new();
    merge(
        Merge::Mget,
        2,
        &parts,
        &[b"*2\r\n$1\r\n1\r\n$1\r\n1\r\n"],
        &mut out,
    );
    assert_eq!(out, b"*2\r\n$1\r\n1\r\n$1\r\n1\r\n");
}

#[test]
fn mset_split_and_merge() {
    let spec = lookup(b"mset").expect("test value");
    let args: [&[u8]; 7] = [b"MSET", b"a", b"1", b"b", b"2", b"c", b"3"];
    let parts = split(spec, &args, &mut shard_by_first_byte);
    assert_eq!(parts[0].request, cmd(&[b"MSET", b"a", b"1", b"c", b"3"]));
    assert_eq!(parts[0].keys, vec![0, 2]);
    assert_eq!(parts[1].request, cmd(&[b"MSET", b"b", b"2"]));
    assert_eq!(parts[1].keys, vec![1]);
    let mut out = Vec::new();
    merge(Merge::Mset, 3, &parts, &[b"+OK\r\n", b"+OK\r\n"], &mut out);
    assert_eq!(out, b"+OK\r\n");
    let mut out = Vec::new();
    merge(
        Merge::Mset,
        3,
        &parts,
        &[b"-ERR x\r\n", b"+OK\r\n"],
        &mut out,
    );
    assert_eq!(out, b"-finished with 1 error(s)\r\n");
    let mut out = Vec::new();
    merge(
        Merge::Mset,
        3,
        &parts,
        &[b"-ERR x\r\n", b":1\r\n"],
        &mut out,
    );
    assert_eq!(out, b"-finished with 2 error(s)\r\n");
}

#[test]
fn sum_integers() {
    let spec = lookup(b"del").expect("test value");
    let args: [&[u8]; 4] = [b"DEL", b"a", b"b", b"a"];
    let parts = split(spec, &args, &mut shard_by_first_byte);
    assert_eq!(parts[0].request, cmd(&[b"DEL", b"a", b"a"]));
    let mut out = Vec::new();
    merge(
        Merge::SumIntegers,
        3,
        &parts,
        &[b":2\r\n", b":1\r\n"],
        &mut out,
    );
    assert_eq!(out, b":3\r\n");
    let mut out = Vec::new();
    merge(
        Merge::SumIntegers,
        3,
        &parts,
        &[b":2\r\n", b"-ERR no\r\n"],
        &mut out,
    );
    assert_eq!(out, b"-finished with 1 error(s)\r\n");
    let one = split(spec, &[b"exists", b"k"], |_| Some(0));
    let mut out = Vec::new();
    merge(Merge::SumIntegers, 1, &one, &[b":0\r\n"], &mut out);
    assert_eq!(out, b":0\r\n");
}

#[test]
fn arity_ok_rejects_incomplete_key_groups_for_every_grouped_command() {
    // Every row whose keys come in groups to the end (MSET's pairs) must refuse a partial group
    // with the arity error, as Redis does, not just MSET.
    let grouped: Vec<_> = COMMANDS
        .iter()
        .filter(|c| c.step > 1 && c.last_key == -1)
        .collect();
    assert!(grouped.iter().any(|c| c.name == "mset"));
    for c in grouped {
        let whole = c.first_key as usize + c.step as usize;
        assert!(c.arity_ok(whole), "{} with {whole} args", c.name);
        assert!(!c.arity_ok(whole + 1), "{} with {} args", c.name, whole + 1);
    }
}

// ---- The full Redis 7.0 surface ----

fn argv<'a>(v: &'a [&'a [u8]]) -> impl Fn(usize) -> &'a [u8] + 'a {
    move |i| v.get(i).copied().unwrap_or_default()
}

fn res(v: &[&[u8]]) -> Result<&'static CommandSpec, ResolveError> {
    resolve(v.len(), argv(v))
}

fn keys_of(v: &[&[u8]]) -> Result<Vec<usize>, String> {
    let spec = res(v).unwrap_or_else(|e| panic!("{e:?}"));
    let mut out = Vec::new();
    keys(spec, v.len(), argv(v), &mut out)
        .map(|()| out)
        .map_err(|e| String::from_utf8(e).expect("test value"))
}

#[test]
fn every_redis_7_0_15_command_has_a_row_with_its_values() {
    use super::redis70::REDIS_7_0_15;
    assert_eq!(REDIS_7_0_15.len(), 366);
    assert_eq!(COMMANDS.len(), REDIS_7_0_15.len());
    for &(name, arity, first, last, step) in REDIS_7_0_15 {
        let c = lookup_fullname(name.as_bytes()).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(c.arity, arity, "{name}");
        let info = super::table::INFO[usize::from(c.id)];
        assert_eq!(info.range, (first, last, step), "{name}");
        if name != "publish" {
            assert_eq!(
                (c.first_key, c.last_key, c.step),
                (first, last, step),
                "{name}"
            );
        }
        if let Some((container, _)) = name.split_once('|') {
            assert!(
                is_container(lookup(container.as_bytes()).expect("test value")),
                "{name}"
            );
        }
    }
    // PUBLISH is routed by its channel, as Envoy does.
    let p = lookup(b"publish").expect("test value");
    assert_eq!(
        (p.first_key, p.kind),
        (1, Kind::PubSub(PubSub::Publish(Topic::Channel)))
    );
}

#[test]
fn kinds_are_chosen_for_every_row() {
    let kind = |n: &str| lookup_fullname(n.as_bytes()).expect("test value").kind;
    for n in [
        "rename",
        "renamenx",
        "copy",
        "smove",
        "lmove",
        "rpoplpush",
        "sinterstore",
        "sunionstore",
        "sdiffstore",
        "sinter",
        "sunion",
        "sdiff",
        "sintercard",
        "zunionstore",
        "zinterstore",
        "zdiffstore",
        "zunion",
        "zinter",
        "zdiff",
        "zintercard",
        "lmpop",
        "zmpop",
        "pfmerge",
        "pfcount",
        "bitop",
        "msetnx",
        "sort",
        "sort_ro",
        "geosearchstore",
        "georadius",
        "georadiusbymember",
        "xread",
        "xreadgroup",
        "eval",
        "evalsha",
        "eval_ro",
        "evalsha_ro",
        "fcall",
        "fcall_ro",
        "memory|usage",
        "object|encoding",
        "object|freq",
        "xgroup|create",
        "xinfo|stream",
        "lcs",
    ] {
        assert_eq!(kind(n), Kind::Keyed, "{n}");
    }
    for (n, m) in [
        ("flushall", Merge::AllOk),
        ("flushdb", Merge::AllOk),
        ("dbsize", Merge::Sum),
        ("keys", Merge::Concat),
        ("randomkey", Merge::FirstNonNil),
        ("wait", Merge::MinInteger),
        ("lastsave", Merge::MinLastSave),
        ("info", Merge::Info),
        ("script|load", Merge::Same),
        ("script|exists", Merge::AndArrays),
        ("script|flush", Merge::AllOk),
    ] {
        assert_eq!(kind(n), Kind::FanOut(m), "{n}");
    }
    assert_eq!(kind("scan"), Kind::Scan);
    for (n, l) in [
        ("hello", Local::Hello),
        ("client|setname", Local::Client),
        ("client|getname", Local::Client),
        ("client|id", Local::Client),
        ("command", Local::Command),
        ("command|count", Local::Command),
        ("command|info", Local::Command),
        ("command|docs", Local::Command),
        ("command|list", Local::Command),
        ("reset", Local::Reset),
        ("time", Local::Time),
        ("readonly", Local::Ok),
        ("readwrite", Local::Ok),
        ("cluster|info", Local::Cluster),
        ("cluster|slots", Local::Cluster),
        ("cluster|shards", Local::Cluster),
        ("cluster|nodes", Local::Cluster),
        ("cluster|myid", Local::Cluster),
        ("cluster|keyslot", Local::Cluster),
    ] {
        assert_eq!(kind(n), Kind::Local(l), "{n}");
    }
    for (n, t) in [
        ("multi", Transaction::Multi),
        ("exec", Transaction::Exec),
        ("discard", Transaction::Discard),
        ("watch", Transaction::Watch),
        ("unwatch", Transaction::Unwatch),
    ] {
        assert_eq!(kind(n), Kind::Transaction(t), "{n}");
    }
    for (n, k) in [
        ("subscribe", PubSub::Subscribe(Topic::Channel)),
        ("psubscribe", PubSub::Subscribe(Topic::Pattern)),
        ("ssubscribe", PubSub::Subscribe(Topic::Shard)),
        ("unsubscribe", PubSub::Unsubscribe(Topic::Channel)),
        ("punsubscribe", PubSub::Unsubscribe(Topic::Pattern)),
        ("sunsubscribe", PubSub::Unsubscribe(Topic::Shard)),
        ("publish", PubSub::Publish(Topic::Channel)),
        ("spublish", PubSub::Publish(Topic::Shard)),
        ("pubsub|numsub", PubSub::NumSub(Topic::Channel)),
        ("pubsub|shardnumsub", PubSub::NumSub(Topic::Shard)),
    ] {
        assert_eq!(kind(n), Kind::PubSub(k), "{n}");
    }
    for (n, m) in [
        ("pubsub|channels", Merge::Union),
        ("pubsub|shardchannels", Merge::Union),
        ("pubsub|numpat", Merge::MaxInteger),
    ] {
        assert_eq!(kind(n), Kind::FanOut(m), "{n}");
    }
    assert_eq!(kind("client|reply"), Kind::Local(Local::Client));
    for n in [
        "monitor",
        "sync",
        "psync",
        "debug",
        "shutdown",
        "config|get",
        "config|set",
        "save",
        "bgsave",
        "replicaof",
        "slaveof",
        "cluster|setslot",
        "migrate",
        "move",
        "swapdb",
        "acl|whoami",
        "module|list",
        "latency|latest",
        "slowlog|get",
        "client|list",
        "client|kill",
        "script|debug",
    ] {
        let Kind::Refused(_) = kind(n) else {
            panic!("{n} is not refused");
        };
    }
    for n in [
        "blpop",
        "brpop",
        "brpoplpush",
        "blmove",
        "blmpop",
        "bzpopmin",
        "bzpopmax",
        "bzmpop",
    ] {
        assert_eq!(kind(n), Kind::Blocking, "{n}");
    }
    for n in ["script|kill", "function|kill", "function|stats"] {
        assert_eq!(kind(n), Kind::ScriptControl, "{n}");
    }
    assert_eq!(kind("client|unblock"), Kind::ClientUnblock);
    let scripts: Vec<&str> = COMMANDS
        .iter()
        .filter(|c| runs_script(c.id))
        .map(|c| c.name)
        .collect();
    assert_eq!(
        scripts,
        [
            "eval",
            "eval_ro",
            "evalsha",
            "evalsha_ro",
            "fcall",
            "fcall_ro"
        ]
    );
    for n in [
        "script", "client", "object", "memory", "xinfo", "xgroup", "config", "cluster", "function",
        "acl", "latency", "slowlog", "module", "pubsub",
    ] {
        assert_eq!(kind(n), Kind::Container, "{n}");
    }
    // Every refusal is one valid error line naming its command.
    for c in COMMANDS {
        if let Kind::Refused(r) = c.kind {
            let reply = String::from_utf8(refused_reply(c, r)).expect("test value");
            let head = format!("-ERR '{}' is not supported by respite: ", c.name);
            let text = reply.strip_prefix(&head).expect("test value");
            assert_eq!(text, format!("{}\r\n", r.text()), "{}", c.name);
            assert!(!r.text().contains(['\r', '\n']), "{}", c.name);
        }
    }
}

#[test]
fn refused_replies_name_the_command_and_the_shared_reason() {
    let reply = |n: &str| {
        let spec = lookup_fullname(n.as_bytes()).expect("test value");
        let Kind::Refused(reason) = spec.kind else {
            panic!("{n} is not refused");
        };
        String::from_utf8(refused_reply(spec, reason)).expect("test value")
    };
    assert_eq!(
        reply("monitor"),
        "-ERR 'monitor' is not supported by respite: server administration must be sent to each \
         Redis server directly\r\n"
    );
    assert_eq!(
        reply("client|kill"),
        "-ERR 'client|kill' is not supported by respite: upstream client connections are shared \
         and owned by the proxy\r\n"
    );
    assert_eq!(
        reply("cluster|addslots"),
        "-ERR 'cluster|addslots' is not supported by respite: Redis Cluster commands are not \
         exposed by the proxy\r\n"
    );
}

#[test]
fn resolve_containers_and_errors() {
    // Texts observed from redis-server 7.0.15.
    let err = |v: &[&[u8]]| match res(v) {
        Err(ResolveError::Invalid(e)) => String::from_utf8(e).expect("test value"),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        res(&[b"SCRIPT", b"load", b"x"]).expect("test value").name,
        "script|load"
    );
    assert_eq!(
        res(&[b"object", b"ENCODING", b"k"])
            .expect("test value")
            .name,
        "object|encoding"
    );
    assert_eq!(res(&[b"command"]).expect("test value").name, "command");
    assert_eq!(
        res(&[b"COMMAND", b"Count"]).expect("test value").name,
        "command|count"
    );
    assert_eq!(res(&[b"get", b"k"]).expect("test value").name, "get");
    assert_eq!(
        err(&[b"SCRIPT"]),
        "-ERR wrong number of arguments for 'script' command\r\n"
    );
    assert_eq!(
        err(&[b"SCRIPT", b"FOO"]),
        "-ERR unknown subcommand 'FOO'. Try SCRIPT HELP.\r\n"
    );
    assert_eq!(
        err(&[b"script", b"foo|bar"]),
        "-ERR unknown subcommand 'foo|bar'. Try SCRIPT HELP.\r\n"
    );
    assert_eq!(
        err(&[b"SCRIPT", b"LOAD|X"]),
        "-ERR unknown subcommand 'LOAD|X'. Try SCRIPT HELP.\r\n"
    );
    assert_eq!(
        err(&[b"COMMAND", b"FOO"]),
        "-ERR unknown subcommand 'FOO'. Try COMMAND HELP.\r\n"
    );
    // A known subcommand with arguments it does not take (CLIENT UNBLOCK id reason extra).
    assert_eq!(
        String::from_utf8_lossy(&super::subcommand_syntax_error(b"client", b"unBlock")),
        "-ERR unknown subcommand or wrong number of arguments for 'unBlock'. Try CLIENT HELP.\r\n"
    );
    assert_eq!(
        err(&[b"SCRIPT", b"LOAD"]),
        "-ERR wrong number of arguments for 'script|load' command\r\n"
    );
    assert_eq!(
        err(&[b"script", b"Load", b"a", b"b"]),
        "-ERR wrong number of arguments for 'script|load' command\r\n"
    );
    assert_eq!(
        err(&[b"CLIENT", b"SETNAME"]),
        "-ERR wrong number of arguments for 'client|setname' command\r\n"
    );
    assert_eq!(
        err(&[b"COMMAND", b"COUNT", b"x"]),
        "-ERR wrong number of arguments for 'command|count' command\r\n"
    );
    assert_eq!(
        err(&[b"XINFO", b"stream"]),
        "-ERR wrong number of arguments for 'xinfo|stream' command\r\n"
    );
    assert_eq!(
        err(&[b"OBJECT"]),
        "-ERR wrong number of arguments for 'object' command\r\n"
    );
    assert_eq!(
        err(&[b"GET"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        err(&[b"memory", b"usage"]),
        "-ERR wrong number of arguments for 'memory|usage' command\r\n"
    );
    // Subcommand rows are not commands, and a NUL/CRLF in the subcommand is printed as Redis does.
    assert_eq!(
        res(&[b"script|load", b"x"]),
        Err(ResolveError::Unknown(
            b"-ERR unknown command 'script|load', with args beginning with: 'x' \r\n".to_vec()
        ))
    );
    assert_eq!(
        err(&[b"script", b"a\r\nb"]),
        "-ERR unknown subcommand 'a  b'. Try SCRIPT HELP.\r\n"
    );
    assert_eq!(
        err(&[b"script", b"ab\0cd"]),
        "-ERR unknown subcommand 'ab'. Try SCRIPT HELP.\r\n"
    );
    let long = [b'x'; 300];
    assert_eq!(
        err(&[b"script", &long]),
        format!(
            "-ERR unknown subcommand '{}'. Try SCRIPT HELP.\r\n",
            "x".repeat(128)
        )
    );
    assert!(matches!(res(&[b"nosuch"]), Err(ResolveError::Unknown(_))));
}

#[test]
fn keys_of_every_shape() {
    // Range.
    assert_eq!(keys_of(&[b"get", b"k"]), Ok(vec![1]));
    assert_eq!(keys_of(&[b"rename", b"a", b"b"]), Ok(vec![1, 2]));
    assert_eq!(
        keys_of(&[b"bitop", b"and", b"d", b"a", b"b"]),
        Ok(vec![2, 3, 4])
    );
    assert_eq!(
        keys_of(&[b"msetnx", b"a", b"1", b"b", b"2"]),
        Ok(vec![1, 3])
    );
    assert_eq!(keys_of(&[b"object", b"encoding", b"k"]), Ok(vec![2]));
    assert_eq!(
        keys_of(&[b"memory", b"usage", b"k", b"SAMPLES", b"5"]),
        Ok(vec![2])
    );
    assert_eq!(keys_of(&[b"lcs", b"a", b"b", b"LEN"]), Ok(vec![1, 2]));
    assert_eq!(keys_of(&[b"time"]), Ok(vec![]));
    // NumKeys: EVAL family.
    assert_eq!(
        keys_of(&[b"eval", b"s", b"2", b"a", b"b", b"x"]),
        Ok(vec![3, 4])
    );
    assert_eq!(keys_of(&[b"EVAL_RO", b"s", b"0"]), Ok(vec![]));
    assert_eq!(keys_of(&[b"eval", b"s", b"0", b"argv1"]), Ok(vec![]));
    let e = |m: &str| Err(format!("-ERR {m}\r\n"));
    assert_eq!(
        keys_of(&[b"EVAL", b"x", b"5", b"a"]),
        e("Number of keys can't be greater than number of args")
    );
    assert_eq!(
        keys_of(&[b"EVAL", b"x", b"-1"]),
        e("Number of keys can't be negative")
    );
    assert_eq!(
        keys_of(&[b"EVAL", b"x", b"abc"]),
        e("value is not an integer or out of range")
    );
    assert_eq!(
        keys_of(&[b"EVAL", b"x", b"01"]),
        e("value is not an integer or out of range")
    );
    let sha = [b'a'; 40];
    assert_eq!(
        keys_of(&[b"evalsha", &sha, b"5", b"a"]),
        e("Number of keys can't be greater than number of args")
    );
    assert_eq!(keys_of(&[b"evalsha", &sha, b"1", b"a"]), Ok(vec![3]));
    // A short sha: Redis answers NOSCRIPT before looking at numkeys; a shard answers.
    assert_eq!(keys_of(&[b"EVALSHA", b"aaa", b"5", b"a"]), Ok(vec![]));
    assert_eq!(keys_of(&[b"EVALSHA", b"aaa", b"1", b"a"]), Ok(vec![3]));
    // FCALL: "Function not found" comes first; a shard answers.
    assert_eq!(keys_of(&[b"FCALL", b"f", b"5", b"a"]), Ok(vec![]));
    assert_eq!(keys_of(&[b"FCALL", b"f", b"abc"]), Ok(vec![]));
    assert_eq!(keys_of(&[b"fcall_ro", b"f", b"1", b"k", b"v"]), Ok(vec![3]));
    // NumKeys with a destination.
    assert_eq!(
        keys_of(&[
            b"zunionstore",
            b"d",
            b"2",
            b"a",
            b"b",
            b"WEIGHTS",
            b"1",
            b"2"
        ]),
        Ok(vec![1, 3, 4])
    );
    assert_eq!(keys_of(&[b"zdiffstore", b"d", b"1", b"a"]), Ok(vec![1, 3]));
    assert_eq!(
        keys_of(&[b"ZUNIONSTORE", b"d", b"0", b"a"]),
        e("at least 1 input key is needed for 'zunionstore' command")
    );
    assert_eq!(
        keys_of(&[b"ZUNIONSTORE", b"d", b"-1", b"a"]),
        e("at least 1 input key is needed for 'zunionstore' command")
    );
    assert_eq!(
        keys_of(&[b"ZUNIONSTORE", b"d", b"3", b"a"]),
        e("syntax error")
    );
    assert_eq!(
        keys_of(&[b"ZUNIONSTORE", b"d", b"x", b"a"]),
        e("value is not an integer or out of range")
    );
    assert_eq!(
        keys_of(&[b"ZINTERSTORE", b"d", b"2", b"a"]),
        e("syntax error")
    );
    // NumKeys at 1.
    assert_eq!(
        keys_of(&[b"zunion", b"2", b"a", b"b", b"WITHSCORES"]),
        Ok(vec![2, 3])
    );
    assert_eq!(
        keys_of(&[b"ZUNION", b"0", b"a"]),
        e("at least 1 input key is needed for 'zunion' command")
    );
    assert_eq!(
        keys_of(&[b"ZINTER", b"0", b"a"]),
        e("at least 1 input key is needed for 'zinter' command")
    );
    assert_eq!(
        keys_of(&[b"ZDIFF", b"0", b"a"]),
        e("at least 1 input key is needed for 'zdiff' command")
    );
    assert_eq!(keys_of(&[b"ZDIFF", b"3", b"a"]), e("syntax error"));
    assert_eq!(
        keys_of(&[b"ZUNION", b"2147483648", b"a"]),
        e("syntax error")
    );
    assert_eq!(
        keys_of(&[b"ZUNION", b"99999999999999999999", b"a"]),
        e("value is not an integer or out of range")
    );
    assert_eq!(
        keys_of(&[b"ZINTERCARD", b"0", b"a"]),
        e("at least 1 input key is needed for 'zintercard' command")
    );
    assert_eq!(keys_of(&[b"ZINTERCARD", b"3", b"a"]), e("syntax error"));
    assert_eq!(
        keys_of(&[b"zintercard", b"2", b"a", b"b", b"LIMIT", b"1"]),
        Ok(vec![2, 3])
    );
    assert_eq!(keys_of(&[b"sintercard", b"2", b"a", b"b"]), Ok(vec![2, 3]));
    for n in [&b"0"[..], b"x", b"-1", b"99999999999999999999"] {
        assert_eq!(
            keys_of(&[b"SINTERCARD", n, b"a"]),
            e("numkeys should be greater than 0")
        );
        assert_eq!(
            keys_of(&[b"LMPOP", n, b"a", b"LEFT"]),
            e("numkeys should be greater than 0")
        );
        assert_eq!(
            keys_of(&[b"ZMPOP", n, b"a", b"MIN"]),
            e("numkeys should be greater than 0")
        );
    }
    assert_eq!(
        keys_of(&[b"SINTERCARD", b"3", b"a"]),
        e("Number of keys can't be greater than number of args")
    );
    assert_eq!(
        keys_of(&[b"SINTERCARD", b"2147483648", b"a"]),
        e("Number of keys can't be greater than number of args")
    );
    assert_eq!(keys_of(&[b"LMPOP", b"3", b"a", b"LEFT"]), e("syntax error"));
    assert_eq!(keys_of(&[b"LMPOP", b"2", b"a", b"LEFT"]), e("syntax error"));
    assert_eq!(keys_of(&[b"ZMPOP", b"2", b"a", b"MIN"]), e("syntax error"));
    assert_eq!(
        keys_of(&[b"lmpop", b"2", b"a", b"b", b"LEFT"]),
        Ok(vec![2, 3])
    );
    assert_eq!(
        keys_of(&[b"zmpop", b"1", b"a", b"MAX", b"COUNT", b"2"]),
        Ok(vec![2])
    );
    // Streams.
    assert_eq!(
        keys_of(&[b"xread", b"COUNT", b"2", b"STREAMS", b"a", b"b", b"0", b"0"]),
        Ok(vec![4, 5])
    );
    assert_eq!(
        keys_of(&[
            b"XREADGROUP",
            b"GROUP",
            b"streams",
            b"c",
            b"NOACK",
            b"STREAMS",
            b"s",
            b">"
        ]),
        Ok(vec![6])
    );
    // Malformed: no key, a shard answers with Redis's own syntax error.
    assert_eq!(
        keys_of(&[b"XREAD", b"STREAMS", b"a", b"b", b"c"]),
        Ok(vec![])
    );
    assert_eq!(keys_of(&[b"XREAD", b"COUNT", b"1", b"a"]), Ok(vec![]));
    let xread = lookup(b"xread").expect("test value");
    let blocking: [&[u8]; 6] = [b"XREAD", b"BLOCK", b"0", b"STREAMS", b"a", b"$"];
    assert!(is_blocking(xread, 6, argv(&blocking)));
    let plain: [&[u8]; 4] = [b"XREAD", b"STREAMS", b"block", b"$"];
    assert!(!is_blocking(xread, 4, argv(&plain)));
    let get: [&[u8]; 2] = [b"get", b"block"];
    assert!(!is_blocking(
        lookup(b"get").expect("test value"),
        2,
        argv(&get)
    ));
    // Sort.
    assert_eq!(keys_of(&[b"sort", b"k"]), Ok(vec![1]));
    assert_eq!(
        keys_of(&[
            b"SORT", b"k", b"BY", b"store", b"LIMIT", b"0", b"1", b"STORE", b"d"
        ]),
        Ok(vec![1, 8])
    );
    assert_eq!(
        keys_of(&[
            b"sort", b"k", b"store", b"d1", b"GET", b"#", b"store", b"d2"
        ]),
        Ok(vec![1, 7])
    );
    assert_eq!(keys_of(&[b"sort", b"k", b"STORE"]), Ok(vec![1]));
    assert_eq!(keys_of(&[b"sort_ro", b"k", b"STORE", b"d"]), Ok(vec![1]));
    assert_eq!(
        keys_of(&[
            b"georadius",
            b"k",
            b"0",
            b"0",
            b"1",
            b"km",
            b"STOREDIST",
            b"d"
        ]),
        Ok(vec![1, 7])
    );
    assert_eq!(
        keys_of(&[
            b"GEORADIUSBYMEMBER",
            b"k",
            b"m",
            b"1",
            b"km",
            b"STORE",
            b"d"
        ]),
        Ok(vec![1, 6])
    );
    assert_eq!(
        keys_of(&[b"georadius", b"k", b"0", b"0", b"1", b"km", b"ASC"]),
        Ok(vec![1])
    );
}

#[test]
fn fanout_merges() {
    let m = |merge: Merge, replies: &[&[u8]]| {
        let mut out = Vec::new();
        fanout::merge(merge, replies, &mut out);
        String::from_utf8(out).expect("test value")
    };
    assert_eq!(m(Merge::AllOk, &[b"+OK\r\n", b"+OK\r\n"]), "+OK\r\n");
    assert_eq!(
        m(Merge::AllOk, &[b"+OK\r\n", b"-ERR a\r\n", b"-ERR b\r\n"]),
        "-ERR a\r\n"
    );
    assert_eq!(m(Merge::Sum, &[b":1\r\n", b":2\r\n", b":0\r\n"]), ":3\r\n");
    assert_eq!(m(Merge::Sum, &[b":1\r\n", b"-ERR x\r\n"]), "-ERR x\r\n");
    assert_eq!(
        m(Merge::Sum, &[b":1\r\n", b"+OK\r\n"]),
        "-upstream protocol error\r\n"
    );
    assert_eq!(
        m(
            Merge::Concat,
            &[
                b"*1\r\n$1\r\na\r\n",
                b"*0\r\n",
                b"*2\r\n$1\r\nb\r\n$1\r\nc\r\n"
            ]
        ),
        "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(m(Merge::Concat, &[b"*0\r\n", b"-ERR x\r\n"]), "-ERR x\r\n");
    assert_eq!(
        m(
            Merge::FirstNonNil,
            &[b"$-1\r\n", b"-ERR down\r\n", b"$1\r\nk\r\n"]
        ),
        "$1\r\nk\r\n"
    );
    assert_eq!(
        m(Merge::FirstNonNil, &[b"$-1\r\n", b"-ERR down\r\n"]),
        "$-1\r\n"
    );
    assert_eq!(
        m(Merge::FirstNonNil, &[b"-ERR a\r\n", b"-ERR b\r\n"]),
        "-ERR a\r\n"
    );
    assert_eq!(
        m(Merge::MinInteger, &[b":3\r\n", b":1\r\n", b":2\r\n"]),
        ":1\r\n"
    );
    assert_eq!(
        m(
            Merge::MinLastSave,
            &[b":1700000000\r\n", b":1600000000\r\n"]
        ),
        ":1600000000\r\n"
    );
    assert_eq!(
        m(Merge::MinInteger, &[b":3\r\n", b"-ERR x\r\n"]),
        "-ERR x\r\n"
    );
    assert_eq!(
        m(
            Merge::AndArrays,
            &[b"*3\r\n:1\r\n:1\r\n:0\r\n", b"*3\r\n:1\r\n:0\r\n:0\r\n"]
        ),
        "*3\r\n:1\r\n:0\r\n:0\r\n"
    );
    assert_eq!(
        m(Merge::AndArrays, &[b"*1\r\n:1\r\n", b"*2\r\n:1\r\n:1\r\n"]),
        "-upstream protocol error\r\n"
    );
    assert_eq!(
        m(Merge::AndArrays, &[b"*1\r\n:1\r\n", b"-NOSCRIPT x\r\n"]),
        "-NOSCRIPT x\r\n"
    );
    let sha = b"$40\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    assert_eq!(
        m(Merge::Same, &[sha, sha]),
        String::from_utf8(sha.to_vec()).expect("test value")
    );
    assert_eq!(m(Merge::Same, &[sha, b"-ERR x\r\n"]), "-ERR x\r\n");
    assert_eq!(
        m(Merge::Same, &[sha, b"$1\r\nb\r\n"]),
        "-ERR shards gave different replies\r\n"
    );
    assert_eq!(m(Merge::Same, &[]), "-ERR no reply\r\n");
}

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

#[test]
fn info_merge_sums_keyspace_stats_and_clients() {
    let a = "# Server\r\nredis_version:7.0.15\r\ntcp_port:7001\r\n\r\n# Clients\r\nconnected_clients:2\r\nmaxclients:10000\r\n\r\n# Stats\r\ntotal_commands_processed:10\r\nkeyspace_hits:3\r\ninstantaneous_input_kbps:0.50\r\nlatest_fork_usec:7\r\n\r\n# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=1000\r\n";
    let b = "# Server\r\nredis_version:7.0.15\r\ntcp_port:7002\r\n\r\n# Clients\r\nconnected_clients:3\r\nmaxclients:10000\r\n\r\n# Stats\r\ntotal_commands_processed:5\r\nkeyspace_hits:4\r\ninstantaneous_input_kbps:1.50\r\nlatest_fork_usec:9\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=3,avg_ttl=3000\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n";
    let (ra, rb) = (bulk(a), bulk(b));
    let mut out = Vec::new();
    fanout::merge(Merge::Info, &[&ra, &rb], &mut out);
    let want = format!(
        "# Server\r\nredis_version:7.0.15\r\ntcp_port:7001\r\n\r\n# Clients\r\nconnected_clients:5\r\nmaxclients:10000\r\n\r\n# Stats\r\ntotal_commands_processed:15\r\nkeyspace_hits:7\r\ninstantaneous_input_kbps:0.50\r\nlatest_fork_usec:7\r\n\r\n# Keyspace\r\ndb0:keys=5,expires=4,avg_ttl=2500\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n\r\n# Proxy\r\nproxy:respite\r\nproxy_version:{}\r\nshards:2\r\n",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        String::from_utf8(out).expect("test value"),
        String::from_utf8(bulk(&want)).expect("test value")
    );
    // An empty keyspace on the first shard still lists the others' databases.
    let (ra, rb) = (
        bulk("# Keyspace\r\n"),
        bulk("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"),
    );
    let mut out = Vec::new();
    fanout::merge(Merge::Info, &[&ra, &rb], &mut out);
    let text = String::from_utf8(out).expect("test value");
    assert!(
        text.contains("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n\r\n# Proxy\r\n"),
        "{text}"
    );
    // Error codes and command counts of every shard, summed: an error met on the second shard
    // only still shows; usec_per_call from the sums.
    let (ra, rb) = (
        bulk(
            "# Commandstats\r\ncmdstat_get:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n\r\n# Errorstats\r\nerrorstat_WRONGTYPE:count=1\r\n",
        ),
        bulk(
            "# Commandstats\r\ncmdstat_eval:calls=1,usec=7,usec_per_call=7.00,rejected_calls=0,failed_calls=1\r\ncmdstat_get:calls=1,usec=5,usec_per_call=5.00,rejected_calls=2,failed_calls=0\r\n\r\n# Errorstats\r\nerrorstat_MY_ERR:count=1\r\nerrorstat_WRONGTYPE:count=2\r\n",
        ),
    );
    let mut out = Vec::new();
    fanout::merge(Merge::Info, &[&ra, &rb], &mut out);
    let text = String::from_utf8(out).expect("test value");
    assert!(
        text.contains("# Commandstats\r\ncmdstat_get:calls=4,usec=35,usec_per_call=8.75,rejected_calls=2,failed_calls=1\r\ncmdstat_eval:calls=1,usec=7,usec_per_call=7.00,rejected_calls=0,failed_calls=1\r\n\r\n# Errorstats\r\nerrorstat_MY_ERR:count=1\r\nerrorstat_WRONGTYPE:count=3\r\n\r\n# Proxy\r\n"),
        "{text}"
    );
    // Errors pass through.
    let mut out = Vec::new();
    fanout::merge(Merge::Info, &[&ra, b"-ERR down\r\n"], &mut out);
    assert_eq!(out, b"-ERR down\r\n");
}

#[test]
fn scan_cursor_round_trip_and_full_iteration() {
    for (shard, c) in [(0, 0), (0, 17), (2, 12345), (255, (1 << 56) - 1)] {
        let e = scan::encode(shard, c);
        assert_eq!(
            scan::decode(e.to_string().as_bytes(), 256),
            Some((shard, c))
        );
    }
    assert_eq!(scan::encode(0, 5), 5);
    assert_eq!(scan::decode(b"abc", 3), None);
    assert_eq!(
        scan::decode(scan::encode(3, 0).to_string().as_bytes(), 3),
        None
    );

    // Three fake shards, each with keys served two per SCAN page.
    let data: [&[&str]; 3] = [&["a1", "a2", "a3"], &["b1"], &["c1", "c2"]];
    let page = |shard: usize, cursor: u64| -> Vec<u8> {
        let keys = data[shard];
        let start = cursor as usize;
        let end = (start + 2).min(keys.len());
        let next = if end == keys.len() { 0 } else { end as u64 };
        let mut r = Vec::new();
        crate::resp::encode::array_header(&mut r, 2);
        crate::resp::encode::bulk(&mut r, next.to_string().as_bytes());
        crate::resp::encode::array_header(&mut r, end - start);
        for k in &keys[start..end] {
            crate::resp::encode::bulk(&mut r, k.as_bytes());
        }
        r
    };
    let mut seen = Vec::new();
    let mut cursor = b"0".to_vec();
    for _ in 0..10 {
        let (shard, c) = scan::decode(&cursor, 3).expect("test value");
        let mut out = Vec::new();
        fanout::merge(
            Merge::ScanCursor {
                shard: shard as u32,
                shards: 3,
            },
            &[&page(shard, c)],
            &mut out,
        );
        let elems = crate::resp::array_elements(&out).expect("test value");
        let cur = &out[elems[0].clone()];
        let text = std::str::from_utf8(cur).expect("test value");
        cursor = text
            .split("\r\n")
            .nth(1)
            .expect("test value")
            .as_bytes()
            .to_vec();
        for k in crate::resp::array_elements(&out[elems[1].clone()]).expect("test value") {
            let kb = &out[elems[1].start + k.start..elems[1].start + k.end];
            seen.push(
                std::str::from_utf8(kb)
                    .expect("test value")
                    .split("\r\n")
                    .nth(1)
                    .expect("test value")
                    .to_string(),
            );
        }
        if cursor == b"0" {
            break;
        }
    }
    assert_eq!(cursor, b"0");
    assert_eq!(seen, ["a1", "a2", "a3", "b1", "c1", "c2"]);
    // Errors pass through; junk is a protocol error.
    let mut out = Vec::new();
    fanout::merge(
        Merge::ScanCursor {
            shard: 0,
            shards: 2,
        },
        &[b"-ERR x\r\n"],
        &mut out,
    );
    assert_eq!(out, b"-ERR x\r\n");
    let mut out = Vec::new();
    fanout::merge(
        Merge::ScanCursor {
            shard: 0,
            shards: 2,
        },
        &[b":1\r\n"],
        &mut out,
    );
    assert_eq!(out, b"-upstream protocol error\r\n");
    // The last shard's 0 ends the iteration; a non-zero cursor keeps its shard.
    let mut out = Vec::new();
    fanout::merge(
        Merge::ScanCursor {
            shard: 1,
            shards: 2,
        },
        &[b"*2\r\n$2\r\n12\r\n*0\r\n"],
        &mut out,
    );
    let want = format!(
        "*2\r\n${}\r\n{}\r\n*0\r\n",
        ((1u64 << 56) | 12).to_string().len(),
        (1u64 << 56) | 12
    );
    assert_eq!(String::from_utf8(out).expect("test value"), want);
}

fn command(v: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    command_reply(v.len(), argv(v), &mut out);
    out
}

#[test]
fn command_replies() {
    // COMMAND COUNT: top-level commands, as Redis counts them (240 in 7.0.15).
    let top = COMMANDS.iter().filter(|c| !c.name.contains('|')).count();
    assert_eq!(top, 240);
    assert_eq!(
        command(&[b"COMMAND", b"COUNT"]),
        format!(":{top}\r\n").as_bytes()
    );
    // COMMAND INFO get: Redis 7.0.15's bytes.
    let get = command(&[b"command", b"info", b"get", b"nosuch"]);
    assert_eq!(
        String::from_utf8(get).expect("test value"),
        "*2\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n*1\r\n*6\r\n$5\r\nflags\r\n*2\r\n+RO\r\n+access\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n*0\r\n$-1\r\n"
    );
    // A container lists its subcommands; tips are kept.
    let script = command(&[b"COMMAND", b"INFO", b"script"]);
    let s = String::from_utf8(script).expect("test value");
    assert!(s.starts_with("*1\r\n*10\r\n$6\r\nscript\r\n:-2\r\n*0\r\n:0\r\n:0\r\n:0\r\n*1\r\n+@slow\r\n*0\r\n*0\r\n*6\r\n"), "{s}");
    assert!(s.contains("$11\r\nscript|load\r\n:3\r\n*2\r\n+noscript\r\n+stale\r\n:0\r\n:0\r\n:0\r\n*2\r\n+@slow\r\n+@scripting\r\n*2\r\n$24\r\nrequest_policy:all_nodes\r\n$29\r\nresponse_policy:all_succeeded\r\n*0\r\n*0\r\n"));
    let oe = command(&[b"COMMAND", b"INFO", b"OBJECT|encoding"]);
    assert!(String::from_utf8(oe).expect("test value").starts_with(
        "*1\r\n*10\r\n$15\r\nobject|encoding\r\n:3\r\n*1\r\n+readonly\r\n:2\r\n:2\r\n:1\r\n"
    ));
    // COMMAND: every top-level command, each with 10 elements.
    let all = command(&[b"COMMAND"]);
    let elems = crate::resp::array_elements(&all).expect("test value");
    assert_eq!(elems.len(), top);
    for e in &elems {
        assert_eq!(crate::resp::array_len(&all[e.clone()]), Some(10));
    }
    assert_eq!(command(&[b"COMMAND", b"INFO"]), all);
    // COMMAND LIST: every row, subcommands included.
    let list = command(&[b"COMMAND", b"LIST"]);
    assert_eq!(crate::resp::array_len(&list), Some(COMMANDS.len()));
    let mut names: Vec<String> = crate::resp::array_elements(&list)
        .expect("test value")
        .into_iter()
        .map(|r| {
            String::from_utf8(list[r].to_vec())
                .expect("test value")
                .split("\r\n")
                .nth(1)
                .expect("test value")
                .to_string()
        })
        .collect();
    names.sort();
    let mut want: Vec<String> = super::redis70::REDIS_7_0_15
        .iter()
        .map(|r| r.0.to_string())
        .collect();
    want.sort();
    assert_eq!(names, want);
    let hll = command(&[b"COMMAND", b"LIST", b"FILTERBY", b"ACLCAT", b"hyperloglog"]);
    assert_eq!(crate::resp::array_len(&hll), Some(5));
    let pat = command(&[b"COMMAND", b"LIST", b"FILTERBY", b"PATTERN", b"x*d"]);
    assert_eq!(crate::resp::array_len(&pat), Some(4));
    assert_eq!(
        command(&[b"COMMAND", b"LIST", b"FILTERBY", b"MODULE", b"x"]),
        b"*0\r\n"
    );
    assert_eq!(
        command(&[b"COMMAND", b"LIST", b"FILTERBY"]),
        b"-ERR syntax error\r\n"
    );
    assert_eq!(
        command(&[b"COMMAND", b"LIST", b"FOO", b"PATTERN", b"x"]),
        b"-ERR syntax error\r\n"
    );
    // COMMAND DOCS.
    let docs = command(&[b"COMMAND", b"DOCS", b"get", b"nosuch"]);
    assert_eq!(
        String::from_utf8(docs).expect("test value"),
        "*2\r\n$3\r\nget\r\n*10\r\n$7\r\nsummary\r\n$22\r\nGet the value of a key\r\n$5\r\nsince\r\n$5\r\n1.0.0\r\n$5\r\ngroup\r\n$6\r\nstring\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n$9\r\narguments\r\n*1\r\n*6\r\n$4\r\nname\r\n$3\r\nkey\r\n$4\r\ntype\r\n$3\r\nkey\r\n$14\r\nkey_spec_index\r\n:0\r\n"
    );
    assert_eq!(command(&[b"COMMAND", b"DOCS", b"nosuch"]), b"*0\r\n");
    let all_docs = command(&[b"COMMAND", b"DOCS"]);
    assert_eq!(crate::resp::array_len(&all_docs), Some(top * 2));
    // COMMAND GETKEYS (texts observed from redis-server 7.0.15).
    let gk = |v: &[&[u8]]| String::from_utf8(command(v)).expect("test value");
    assert_eq!(
        gk(&[b"command", b"getkeys", b"eval", b"x", b"2", b"a", b"b"]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(gk(&[b"command", b"getkeys", b"eval", b"x", b"0"]), "*0\r\n");
    assert_eq!(
        gk(&[b"command", b"getkeys", b"eval", b"x", b"5", b"a"]),
        "*0\r\n"
    );
    assert_eq!(
        gk(&[b"command", b"getkeys", b"publish", b"x", b"0"]),
        "-ERR The command has no key arguments\r\n"
    );
    assert_eq!(
        gk(&[b"command", b"getkeys", b"object", b"encoding", b"k"]),
        "*1\r\n$1\r\nk\r\n"
    );
    assert_eq!(
        gk(&[b"command", b"getkeys", b"object", b"foo", b"k"]),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        gk(&[b"command", b"getkeys", b"foo", b"a"]),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        gk(&[b"command", b"getkeys", b"zunion", b"5", b"a"]),
        "-ERR Invalid arguments specified for command\r\n"
    );
    assert_eq!(
        gk(&[b"command", b"getkeys", b"get", b"a", b"b"]),
        "-ERR Invalid number of arguments specified for command\r\n"
    );
    assert_eq!(
        gk(&[b"command", b"getkeys", b"mset", b"a", b"1", b"b", b"2"]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
}

#[test]
fn glob_matches_like_redis() {
    use super::introspect::glob;
    assert!(glob(b"x*d", b"xgroup|setid", true));
    assert!(glob(b"X*D", b"xread", true));
    assert!(!glob(b"x*d", b"xadd1", true));
    assert!(glob(b"h?et", b"hget", false));
    assert!(glob(b"[a-c]*", b"bitop", false));
    assert!(!glob(b"[^a-c]*", b"bitop", false));
    assert!(glob(b"a\\*", b"a*", false));
    assert!(glob(b"*", b"", false));
}

#[test]
fn name_index_stays_at_most_half_full() {
    // Linear probing ends at an empty slot; the load factor keeps probes short.
    assert!(COMMANDS.len() * 2 <= NAME_SLOTS);
}

#[test]
fn breaker_name_index_matches_linear_reference() {
    fn reference(name: &[u8]) -> Option<u16> {
        COMMANDS
            .iter()
            .find(|c| c.name.as_bytes().eq_ignore_ascii_case(name))
            .map(|c| c.id)
    }
    let mut rng = fastrand::Rng::with_seed(7);
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    for c in COMMANDS {
        let n = c.name.as_bytes();
        inputs.push(n.to_vec());
        // random case
        inputs.push(
            n.iter()
                .map(|b| {
                    if rng.bool() {
                        b.to_ascii_uppercase()
                    } else {
                        *b
                    }
                })
                .collect(),
        );
        let mut v = n.to_vec();
        v.push(0);
        inputs.push(v);
        let mut v = vec![0u8];
        v.extend_from_slice(n);
        inputs.push(v);
        let mut v = n.to_vec();
        v.truncate(n.len().saturating_sub(1));
        inputs.push(v);
        // non-ASCII that lowercases weirdly: replace one char with its Latin-1 upper / 0xC0.. etc.
        let mut v = n.to_vec();
        if let Some(x) = v.first_mut() {
            *x |= 0x80;
        }
        inputs.push(v);
        // pad to >32
        let mut v = n.to_vec();
        v.resize(33, b'x');
        inputs.push(v);
        let mut v = n.to_vec();
        v.resize(64, 0);
        inputs.push(v);
    }
    inputs.push(vec![]);
    inputs.push(vec![0]);
    inputs.push(vec![0; 32]);
    inputs.push(vec![b'a'; 32]);
    inputs.push(vec![0xff; 33]);
    for len in 0..=40 {
        for _ in 0..2000 {
            inputs.push((0..len).map(|_| rng.u8(..)).collect());
            inputs.push((0..len).map(|_| rng.u8(b'a'..=b'z')).collect());
        }
    }
    for inp in inputs {
        let want = if inp.len() > 32 {
            None
        } else {
            reference(&inp)
        };
        assert_eq!(lookup_fullname(&inp).map(|s| s.id), want, "{inp:?}");
        let want_l = if inp.contains(&b'|') { None } else { want };
        assert_eq!(lookup(&inp).map(|s| s.id), want_l, "{inp:?}");
    }
}

/// The timeout argument of each blocking command, in Redis's units (seconds as a double, XREAD's
/// BLOCK in integer milliseconds), and BLMPOP/BZMPOP keys by their numkeys.
#[test]
fn blocking_timeouts_and_keys() {
    use std::time::Duration;
    let t = |v: &[&[u8]]| {
        let spec = lookup(v[0]).expect("test value");
        block_timeout(spec, v.len(), argv(v))
    };
    let secs = |s: f64, at: usize| BlockTimeout::For {
        wait: Duration::from_secs_f64(s),
        at,
        millis: false,
    };
    assert_eq!(t(&[b"BLPOP", b"a", b"b", b"1.5"]), secs(1.5, 3));
    assert_eq!(t(&[b"BRPOP", b"a", b"0"]), BlockTimeout::Forever);
    assert_eq!(t(&[b"BRPOPLPUSH", b"a", b"b", b"2"]), secs(2.0, 3));
    assert_eq!(
        t(&[b"BLMOVE", b"a", b"b", b"LEFT", b"RIGHT", b"0.25"]),
        secs(0.25, 5)
    );
    assert_eq!(t(&[b"BZMPOP", b"3", b"1", b"z", b"MIN"]), secs(3.0, 1));
    assert_eq!(
        t(&[
            b"XREAD", b"COUNT", b"2", b"BLOCK", b"150", b"STREAMS", b"s", b"$"
        ]),
        BlockTimeout::For {
            wait: Duration::from_millis(150),
            at: 4,
            millis: true
        }
    );
    // A group named "block" is not the BLOCK option.
    assert_eq!(
        t(&[
            b"XREADGROUP",
            b"GROUP",
            b"block",
            b"c",
            b"STREAMS",
            b"s",
            b">"
        ]),
        BlockTimeout::Invalid
    );
    // Past Redis's range: the backend answers the error; over a century: until served.
    assert_eq!(t(&[b"BLPOP", b"a", b"1e19"]), BlockTimeout::Invalid);
    assert_eq!(t(&[b"BLPOP", b"a", b"1e12"]), BlockTimeout::Forever);
    for bad in [&b"-1"[..], b"x", b"nan", b"inf"] {
        assert_eq!(t(&[b"BLPOP", b"a", bad]), BlockTimeout::Invalid);
    }
    assert_eq!(
        t(&[b"XREAD", b"BLOCK", b"1.5", b"STREAMS", b"s", b"$"]),
        BlockTimeout::Invalid
    );
    assert_eq!(
        keys_of(&[b"BLMPOP", b"0", b"2", b"a", b"b", b"LEFT"]),
        Ok(vec![3, 4])
    );
    // A bad numkeys finds no key: a backend answers it after checking the timeout, as Redis.
    assert_eq!(keys_of(&[b"BLMPOP", b"0", b"0", b"a", b"LEFT"]), Ok(vec![]));
    assert_eq!(keys_of(&[b"BZMPOP", b"0", b"2", b"a", b"MIN"]), Ok(vec![]));
    let blpop = lookup(b"blpop").expect("test value");
    assert!(is_blocking(blpop, 3, argv(&[b"BLPOP", b"a", b"0"])));
}
