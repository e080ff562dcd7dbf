//! Differential checks against a real `redis-server` (skipped when none is on the PATH): the
//! errors Respite answers locally (resolve, keys) must be the bytes one Redis answers, and
//! `COMMAND INFO` must agree with Redis on everything but key specs.

use super::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    conn: UnixStream,
    buf: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start() -> Option<Server> {
        let dir = tempfile::tempdir().ok()?;
        let sock = dir.path().join("redis.sock");
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--unixsocket",
            ])
            .arg(&sock)
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let conn = loop {
            if let Ok(c) = UnixStream::connect(&sock) {
                break c;
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        Some(Server {
            child,
            conn,
            buf: Vec::new(),
            _dir: dir,
        })
    }

    fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        let mut req = Vec::new();
        crate::resp::encode::command(&mut req, args.iter().copied());
        self.conn.write_all(&req).expect("test value");
        loop {
            if let Ok(Some(n)) = crate::resp::reply_len(&self.buf) {
                return self.buf.drain(..n).collect();
            }
            let mut chunk = [0u8; 65536];
            let n = self.conn.read(&mut chunk).expect("test value");
            assert!(n > 0, "redis-server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Respite's local answer to a request, if it answers locally with an error.
fn local_error(v: &[&[u8]]) -> Option<Vec<u8>> {
    let arg = |i: usize| v.get(i).copied().unwrap_or_default();
    let spec = match resolve(v.len(), arg) {
        Ok(s) => s,
        Err(ResolveError::Unknown(e)) | Err(ResolveError::Invalid(e)) => return Some(e),
    };
    let mut out = Vec::new();
    keys(spec, v.len(), arg, &mut out).err()
}

#[test]
fn local_errors_match_a_real_redis() {
    let Some(mut redis) = Server::start() else {
        eprintln!("redis-server not found: skipped");
        return;
    };
    let sha = [b'a'; 40];
    let requests: &[&[&[u8]]] = &[
        &[b"SCRIPT"],
        &[b"SCRIPT", b"FOO"],
        &[b"script", b"a\r\nb"],
        &[b"SCRIPT", b"LOAD"],
        &[b"object"],
        &[b"OBJECT", b"nosuch", b"k"],
        &[b"COMMAND", b"FOO"],
        &[b"COMMAND", b"COUNT", b"x"],
        &[b"CLIENT", b"SETNAME"],
        &[b"XINFO", b"stream"],
        &[b"XGROUP", b"CREATE", b"s"],
        &[b"MEMORY", b"usage"],
        &[b"CONFIG"],
        &[b"GET"],
        &[b"script|load", b"x"],
        &[b"nosuch", b"a", b"b"],
        &[b"MSET", b"a", b"1", b"b"],
        &[b"MSETNX", b"a", b"1", b"b"],
        &[b"EVAL", b"x", b"5", b"a"],
        &[b"EVAL", b"x", b"-1"],
        &[b"EVAL", b"x", b"abc"],
        &[b"EVAL", b"x", b"01"],
        &[b"EVAL_RO", b"x", b"3", b"a"],
        &[b"EVALSHA", &sha, b"5", b"a"],
        &[b"EVALSHA_RO", &sha, b"-2"],
        &[b"ZUNIONSTORE", b"d", b"0", b"a"],
        &[b"ZUNIONSTORE", b"d", b"3", b"a"],
        &[b"ZUNIONSTORE", b"d", b"-1", b"a"],
        &[b"ZUNIONSTORE", b"d", b"x", b"a"],
        &[b"ZINTERSTORE", b"d", b"0", b"a"],
        &[b"ZDIFFSTORE", b"d", b"0", b"a"],
        &[b"ZDIFFSTORE", b"d", b"3", b"a"],
        &[b"ZUNION", b"0", b"a"],
        &[b"ZUNION", b"3", b"a"],
        &[b"ZUNION", b"x", b"a"],
        &[b"ZUNION", b"2147483648", b"a"],
        &[b"ZUNION", b"99999999999999999999", b"a"],
        &[b"ZINTER", b"0", b"a"],
        &[b"ZDIFF", b"0", b"a"],
        &[b"ZINTERCARD", b"0", b"a"],
        &[b"ZINTERCARD", b"3", b"a"],
        &[b"SINTERCARD", b"0", b"a"],
        &[b"SINTERCARD", b"3", b"a"],
        &[b"SINTERCARD", b"x", b"a"],
        &[b"SINTERCARD", b"-1", b"a"],
        &[b"SINTERCARD", b"2147483648", b"a"],
        &[b"LMPOP", b"0", b"a", b"LEFT"],
        &[b"LMPOP", b"3", b"a", b"LEFT"],
        &[b"LMPOP", b"2", b"a", b"LEFT"],
        &[b"LMPOP", b"x", b"a", b"LEFT"],
        &[b"ZMPOP", b"0", b"a", b"MIN"],
        &[b"ZMPOP", b"2", b"a", b"MIN"],
        &[b"ZMPOP", b"-5", b"a", b"MIN"],
    ];
    for v in requests {
        let ours = local_error(v).unwrap_or_else(|| panic!("no local error for {v:?}"));
        let theirs = redis.call(v);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "{:?}",
            v.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
    // Requests Respite forwards (no local error) are ones Redis answers from more than the key
    // list; the shard gives the exact reply.
    for v in [
        &[&b"EVALSHA"[..], b"aaa", b"5", b"a"][..],
        &[b"FCALL", b"f", b"5", b"a"],
        &[b"XREAD", b"STREAMS", b"a", b"b", b"c"],
    ] {
        assert_eq!(local_error(v), None);
        assert!(crate::resp::is_error(&redis.call(v)));
    }
}

/// The first `n` elements of an array reply, as bytes.
fn head(reply: &[u8], n: usize) -> Vec<u8> {
    let elems = crate::resp::array_elements(reply).expect("test value");
    elems
        .iter()
        .take(n)
        .flat_map(|r| reply[r.clone()].to_vec())
        .collect()
}

#[test]
fn command_info_matches_a_real_redis() {
    let Some(mut redis) = Server::start() else {
        eprintln!("redis-server not found: skipped");
        return;
    };
    let count = redis.call(&[b"COMMAND", b"COUNT"]);
    let mut ours = Vec::new();
    command_reply(2, |i| [&b"COMMAND"[..], b"COUNT"][i], &mut ours);
    assert_eq!(ours, count);
    for c in COMMANDS {
        let theirs = redis.call(&[b"COMMAND", b"INFO", c.name.as_bytes()]);
        let mut ours = Vec::new();
        let args: [&[u8]; 3] = [b"COMMAND", b"INFO", c.name.as_bytes()];
        command_reply(3, |i| args[i], &mut ours);
        let (t, o) = (
            crate::resp::array_elements(&theirs).expect("test value"),
            crate::resp::array_elements(&ours).expect("test value"),
        );
        let (t, o) = (&theirs[t[0].clone()], &ours[o[0].clone()]);
        // name, arity, flags, first, last, step, ACL categories, tips, key specs.
        assert_eq!(
            String::from_utf8_lossy(&head(o, 9)),
            String::from_utf8_lossy(&head(t, 9)),
            "{}",
            c.name
        );
        // Subcommand count.
        let subs = |r: &[u8]| {
            let e = crate::resp::array_elements(r).expect("test value");
            crate::resp::array_len(&r[e[9].clone()])
        };
        assert_eq!(subs(o), subs(t), "{}", c.name);
        // Docs, byte for byte.
        let args: [&[u8]; 3] = [b"COMMAND", b"DOCS", c.name.as_bytes()];
        let mut ours = Vec::new();
        command_reply(3, |i| args[i], &mut ours);
        let theirs = redis.call(&args);
        let o = crate::resp::array_elements(&ours).expect("test value");
        let t = crate::resp::array_elements(&theirs).expect("test value");
        assert_eq!(ours[o[0].clone()], theirs[t[0].clone()], "{}", c.name);
        // Containers: Redis lists subcommands in (seeded) dict order; compare the rest.
        if !is_container(c) {
            assert!(ours == theirs, "{}", c.name);
        }
    }
}
