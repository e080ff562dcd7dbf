//! Respite's ketama must place every key on the same server as twemproxy 0.5.0
//! (`hash: fnv1a_64`, `distribution: ketama`): keys are written through a real nutcracker and
//! then looked up on each redis-server directly.

use respite::cluster::LoadBalancer;
use respite::config::{HostConfig, LbPolicy};
use respite_tests::{Nutcracker, RawClient, RedisServer};

const KEYS: usize = 10_000;
const BATCH: usize = 500;

/// 10 000 distinct keys: mostly `key:{i}`, plus binary (bytes >= 0x80, which twemproxy's
/// signed-char FNV sign-extends), hash-tag-looking, long and odd ones.
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(KEYS);
    for i in 0..200u32 {
        keys.push(vec![0x80 | (i as u8 & 0x7f), 0xff, i as u8, b'k']);
        keys.push(format!("{{user{i}}}.following").into_bytes());
        keys.push(format!("foo{{}}{{bar{i}}}").into_bytes());
        keys.push(format!("ключ:{i}").into_bytes());
        let mut long = vec![b'L'; 200 + i as usize];
        long.extend_from_slice(i.to_string().as_bytes());
        keys.push(long);
        keys.push(format!("with space {i}").into_bytes());
    }
    for b in 1..=255u8 {
        keys.push(vec![b]);
    }
    let mut i = 0;
    while keys.len() < KEYS {
        keys.push(format!("key:{i}").into_bytes());
        i += 1;
    }
    keys
}

fn host(addr: &str, weight: u32, name: Option<&str>) -> HostConfig {
    HostConfig {
        address: addr.parse().unwrap(),
        address_text: addr.to_string(),
        weight,
        name: name.map(str::to_string),
    }
}

/// Sends `commands` in pipelined batches and returns every reply.
fn pipelined(client: &mut RawClient, commands: &[Vec<&[u8]>]) -> Vec<Vec<u8>> {
    let mut replies = Vec::with_capacity(commands.len());
    for chunk in commands.chunks(BATCH) {
        let mut buf = Vec::new();
        for c in chunk {
            RawClient::encode_into(&mut buf, c);
        }
        client.send_raw(&buf);
        for _ in chunk {
            replies.push(client.read_reply());
        }
    }
    replies
}

/// Writes all keys through nutcracker, finds each key's backend and compares with
/// `LoadBalancer::pick` over `hosts`.
fn check_placement(servers: &[RedisServer], nutcracker: &Nutcracker, hosts: &[HostConfig]) {
    let keys = keys();
    let mut proxy = nutcracker.raw();
    let sets: Vec<Vec<&[u8]>> = keys.iter().map(|k| vec![&b"SET"[..], k, b"v"]).collect();
    for (k, r) in keys.iter().zip(pipelined(&mut proxy, &sets)) {
        assert_eq!(
            r,
            b"+OK\r\n",
            "SET {:?} through nutcracker: {}\nnutcracker log:\n{}",
            String::from_utf8_lossy(k),
            String::from_utf8_lossy(&r),
            nutcracker.log()
        );
    }

    // owner[i] = index of the backend holding keys[i].
    let mut owner: Vec<Option<usize>> = vec![None; keys.len()];
    let exists: Vec<Vec<&[u8]>> = keys.iter().map(|k| vec![&b"EXISTS"[..], k]).collect();
    for (s_idx, server) in servers.iter().enumerate() {
        let mut c = server.raw();
        for (i, r) in pipelined(&mut c, &exists).into_iter().enumerate() {
            match r.as_slice() {
                b":0\r\n" => {}
                b":1\r\n" => {
                    assert!(
                        owner[i].is_none(),
                        "key {:?} on two backends",
                        String::from_utf8_lossy(&keys[i])
                    );
                    owner[i] = Some(s_idx);
                }
                other => panic!("EXISTS reply {:?}", String::from_utf8_lossy(other)),
            }
        }
    }

    let lb = LoadBalancer::new(LbPolicy::Ketama, hosts);
    let mut per_server = vec![0usize; servers.len()];
    let mut mismatches = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let actual = owner[i]
            .unwrap_or_else(|| panic!("key {:?} on no backend", String::from_utf8_lossy(&keys[i])));
        per_server[actual] += 1;
        let ours = lb.pick(key);
        if ours != actual {
            mismatches.push((String::from_utf8_lossy(key).into_owned(), actual, ours));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} keys placed differently from nutcracker (key, nutcracker, respite), first \
         ones: {:?}\nconfig:\n{}",
        mismatches.len(),
        keys.len(),
        &mismatches[..mismatches.len().min(10)],
        nutcracker.config()
    );
    // Every backend got a share (the test would be vacuous otherwise).
    assert!(per_server.iter().all(|&n| n > 500), "{per_server:?}");
}

fn run(weights: &[u32]) {
    let servers: Vec<RedisServer> = weights.iter().map(|_| RedisServer::start()).collect();
    let backends: Vec<(String, u32)> = servers
        .iter()
        .zip(weights)
        .map(|(s, &w)| (s.addr(), w))
        .collect();
    let nutcracker = Nutcracker::ketama(&backends);
    let hosts: Vec<HostConfig> = backends.iter().map(|(a, w)| host(a, *w, None)).collect();
    check_placement(&servers, &nutcracker, &hosts);
}

#[test]
fn ketama_matches_nutcracker_equal_weights() {
    run(&[1, 1, 1]);
}

#[test]
fn ketama_matches_nutcracker_weights_1_2_3() {
    run(&[1, 2, 3]);
}

#[test]
fn ketama_matches_nutcracker_named_servers() {
    // "host:port:weight name": the name, not the address, is hashed.
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let names = ["alpha", "beta", "gamma"];
    let lines: Vec<String> = servers
        .iter()
        .zip(names)
        .map(|(s, n)| format!("{}:1 {n}", s.addr()))
        .collect();
    let nutcracker = Nutcracker::start(&lines);
    let hosts: Vec<HostConfig> = servers
        .iter()
        .zip(names)
        .map(|(s, n)| host(&s.addr(), 1, Some(n)))
        .collect();
    check_placement(&servers, &nutcracker, &hosts);
}
