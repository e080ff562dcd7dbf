//! The programs on this machine's kernel: load, attach, self-test, filter, kill switch. Needs
//! root (CAP_BPF + CAP_NET_ADMIN + CAP_SYS_ADMIN for the private bpffs mount) and cgroup v2;
//! without them it prints why and passes, unless RESPITE_REQUIRE_SOCKMAP=1 (CI on this machine).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;

use respite_ebpf::{Pinned, Settings, Sockmap};

struct Env {
    bpffs: PathBuf,
    cgroup: PathBuf,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = nix_umount(&self.bpffs);
        let _ = std::fs::remove_dir(&self.bpffs);
        // The test process stays in the cgroup, so it cannot be removed until the process exits;
        // move back to the root first.
        if let Some(root) = self.cgroup.parent() {
            let _ = respite_ebpf::join_cgroup(root, std::process::id());
        }
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

fn nix_umount(p: &std::path::Path) -> std::io::Result<()> {
    let st = std::process::Command::new("umount").arg(p).status()?;
    if st.success() {
        Ok(())
    } else {
        Err(std::io::Error::other("umount failed"))
    }
}

fn setup() -> Option<Env> {
    let skip = |why: String| {
        if std::env::var("RESPITE_REQUIRE_SOCKMAP").is_ok_and(|v| v == "1") {
            panic!("RESPITE_REQUIRE_SOCKMAP=1 but: {why}");
        }
        eprintln!("skipped: {why}");
        None
    };
    if let Err(why) = respite_ebpf::object() {
        return skip(why.to_string());
    }
    if !nix::unistd::geteuid().is_root() {
        return skip("not root".into());
    }
    let root = match respite_ebpf::cgroup2_root() {
        Ok(r) => r,
        Err(e) => return skip(e),
    };
    let cgroup = root.join(format!("respite-ebpf-test-{}", std::process::id()));
    respite_ebpf::ensure_cgroup(&cgroup).expect("cgroup");
    respite_ebpf::join_cgroup(&cgroup, std::process::id()).expect("join");
    let bpffs =
        std::env::temp_dir().join(format!("respite-ebpf-test-bpffs-{}", std::process::id()));
    assert!(
        respite_ebpf::ensure_bpffs(&bpffs).expect("bpffs"),
        "a fresh bpffs was mounted"
    );
    Some(Env { bpffs, cgroup })
}

fn round_trips(port_filter_hit: bool, sockmap: &mut Sockmap) -> (u64, u64) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    if port_filter_hit {
        sockmap.set_ports(&BTreeSet::from([port])).unwrap();
    } else {
        sockmap
            .set_ports(&BTreeSet::from([port.wrapping_add(1)]))
            .unwrap();
    }
    let before = sockmap.counters().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut b = [0u8; 5];
        for _ in 0..100 {
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
        }
    });
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut b = [0u8; 5];
    for i in 0..100u8 {
        c.write_all(&[i; 5]).unwrap();
        c.read_exact(&mut b).unwrap();
        assert_eq!(b, [i; 5]);
    }
    t.join().unwrap();
    let after = sockmap.counters().unwrap();
    (
        after.redirect_total - before.redirect_total,
        after.redirect_fail - before.redirect_fail,
    )
}

#[test]
fn load_selftest_filter_and_kill_switch() {
    let Some(env) = setup() else { return };
    let mut sockmap = Sockmap::load(&env.bpffs, &env.cgroup).expect("load");
    sockmap.attach().expect("attach");
    sockmap.set_enabled(true).unwrap();
    let second = Sockmap::load(&env.bpffs, &env.cgroup)
        .err()
        .expect("one loader per bpffs");
    assert!(
        second.contains("in use by another respite-control"),
        "{second}"
    );
    assert!(
        Pinned::open(&env.bpffs).unwrap().enabled().unwrap(),
        "the refused loader left the switch alone"
    );
    let report = respite_ebpf::selftest::run(&mut sockmap, &BTreeSet::new()).expect("self-test");
    eprintln!("self-test: {report:?}");
    assert!(report.redirects >= 2000);

    let (redirects, fails) = round_trips(true, &mut sockmap);
    assert_eq!(
        (redirects, fails),
        (200, 0),
        "listed port: every message redirected"
    );
    let (redirects, fails) = round_trips(false, &mut sockmap);
    assert_eq!(
        (redirects, fails),
        (0, 0),
        "unlisted port: nothing redirected"
    );

    let mut pinned = Pinned::open(&env.bpffs).expect("pins");
    assert!(pinned.enabled().unwrap());
    pinned.set_enabled(false).unwrap();
    let (redirects, fails) = round_trips(true, &mut sockmap);
    assert_eq!(
        (redirects, fails),
        (0, 0),
        "switched off: a new connection is not recorded"
    );
    pinned.set_enabled(true).unwrap();
    let (redirects, _) = round_trips(true, &mut sockmap);
    assert_eq!(redirects, 200, "switched on again");
    eprintln!("counters: {:?}", pinned.counters().unwrap());
    drop(sockmap);
    assert!(
        !pinned.enabled().unwrap(),
        "dropping the loader switches recording off"
    );
}
