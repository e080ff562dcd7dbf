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
    let c = |n: &str| *lookup(n.as_bytes()).unwrap();
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
    assert_eq!(lookup_fullname(b"xgroup|create").unwrap().first_key, 2);
    assert_eq!(lookup_fullname(b"object|encoding").unwrap().first_key, 2);
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
    assert_eq!(counts[2], 20);
    assert!(counts[0] > 120);
}

#[test]
fn arity_and_keys() {
    let get = lookup(b"get").unwrap();
    assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
    let mset = lookup(b"mset").unwrap();
    assert!(mset.arity_ok(3) && mset.arity_ok(5) && !mset.arity_ok(2));
    assert!(keys_complete(mset, 5) && !keys_complete(mset, 4));
    assert_eq!(key_indices(mset, 5).collect::<Vec<_>>(), vec![1, 3]);
    assert_eq!(key_count(lookup(b"mget").unwrap(), 4), 3);
    assert_eq!(key_count(lookup(b"ping").unwrap(), 2), 0);
    assert_eq!(key_count(get, 1), 0);
    let args: [&[u8]; 3] = [b"xinfo", b"stream", b"s1"];
    assert_eq!(
        key_of(lookup_fullname(b"xinfo|stream").unwrap(), &args),
        Some(&b"s1"[..])
    );
    assert_eq!(key_of(get, &[b"get"]), None);
    assert_eq!(key_of(lookup(b"ping").unwrap(), &[b"ping", b"x"]), None);
}

#[test]
fn error_replies() {
    assert_eq!(
        arity_error(lookup(b"GET").unwrap()),
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

fn shard_by_first_byte(k: &[u8]) -> usize {
    usize::from(k.first().copied().unwrap_or(0) % 2)
}

fn cmd(v: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::resp::encode::command(&mut out, v.iter().copied());
    out
}

#[test]
fn split_mget_groups_by_shard_in_order() {
    let spec = lookup(b"mget").unwrap();
    let args: [&[u8]; 5] = [b"MGET", b"a", b"b", b"c", b"a"];
    // 'a' = 97 (odd → 1), 'b' = 98 (0), 'c' = 99 (1).
    let parts = split(spec, &args, &mut shard_by_first_byte);
    assert_eq!(
        parts,
        vec![
            Part {
                shard: 1,
                request: cmd(&[b"MGET", b"a", b"c", b"a"]),
                keys: vec![0, 2, 3]
            },
            Part {
                shard: 0,
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
    let spec = lookup(b"mget").unwrap();
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
        String::from_utf8(out).unwrap(),
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
        String::from_utf8(out).unwrap(),
        format!("*3\r\n{pe}{pe}$1\r\nC\r\n")
    );
}

#[test]
fn mget_duplicates_single_shard() {
    let spec = lookup(b"mget").unwrap();
    let args: [&[u8]; 3] = [b"MGET", b"a", b"a"];
    let parts = split(spec, &args, &mut |_| 7);
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].shard, 7);
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
    let spec = lookup(b"mset").unwrap();
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
    let spec = lookup(b"del").unwrap();
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
    let one = split(spec, &[b"exists", b"k"], &mut |_| 0);
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
