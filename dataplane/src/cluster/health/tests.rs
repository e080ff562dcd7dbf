//! Unit tests of the health rules (no sockets).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::check::{Outcome, Tally, judge};
use super::outlier::{Ejection, Ejector, Verdict};
use super::{ClusterVersion, HostHealth};
use crate::config::OutlierDetectionConfig;

#[test]
fn replies_judged_as_envoy_redis_checker() {
    assert_eq!(judge(b"+PONG\r\n", false), Outcome::Pass);
    assert_eq!(judge(b"-ERR loading\r\n", false), Outcome::Fail);
    assert_eq!(judge(b":0\r\n", true), Outcome::Pass);
    assert_eq!(judge(b":1\r\n", true), Outcome::Fail);
    assert_eq!(judge(b"+PONG\r\n", true), Outcome::Fail);
    let busy = b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
    assert_eq!(judge(busy, false), Outcome::Pass);
    assert_eq!(judge(busy, true), Outcome::Pass);
}

#[test]
fn thresholds_flip_only_after_consecutive_results() {
    let mut t = Tally::new(true);
    assert_eq!(t.record(Outcome::NetworkFail, 2, 3), None);
    assert_eq!(
        t.record(Outcome::Pass, 2, 3),
        None,
        "a pass resets the failure run"
    );
    assert_eq!(t.record(Outcome::Fail, 2, 3), None);
    assert_eq!(t.record(Outcome::NetworkFail, 2, 3), Some(false));
    assert_eq!(t.record(Outcome::Pass, 2, 3), None);
    assert_eq!(t.record(Outcome::Pass, 2, 3), None);
    assert_eq!(
        t.record(Outcome::Fail, 2, 3),
        None,
        "a failure resets the pass run"
    );
    for _ in 0..2 {
        assert_eq!(t.record(Outcome::Pass, 2, 3), None);
    }
    assert_eq!(t.record(Outcome::Pass, 2, 3), Some(true));
    assert!(t.healthy());
}

#[test]
fn health_bits_and_cluster_version() {
    let v = Arc::new(ClusterVersion::default());
    let a = HostHealth::new(v.clone());
    let b = HostHealth::new(v.clone());
    assert!(a.is_healthy() && b.is_healthy());
    assert_eq!(a.set_check_failing(0, true), (true, false));
    assert_eq!(v.get(), 1);
    assert_eq!(a.set_check_failing(0, true), (false, false));
    assert_eq!(v.get(), 1, "no change, no bump");
    assert_eq!(a.set_ejected(true), (false, false));
    assert!(!a.passes_checks() && a.is_ejected());
    a.clear_checks_from(0);
    assert!(a.passes_checks() && !a.is_healthy());
    assert_eq!(a.set_ejected(false), (false, true));
    assert_eq!(b.set_ejected(true), (true, false));
    assert_eq!(
        v.get(),
        5,
        "every change of any host of the cluster bumps it"
    );
}

fn od(pct: u32) -> OutlierDetectionConfig {
    OutlierDetectionConfig {
        consecutive_5xx: 3,
        base_ejection_time: Duration::from_secs(10),
        max_ejection_time: Duration::from_secs(25),
        max_ejection_percent: pct,
        interval: Duration::from_secs(1),
    }
}

#[test]
fn ejection_time_grows_and_is_capped() {
    let e = Ejector::new(od(100));
    assert_eq!(e.duration(1), Duration::from_secs(10));
    assert_eq!(e.duration(2), Duration::from_secs(20));
    assert_eq!(e.duration(3), Duration::from_secs(25));
    let t0 = Instant::now();
    let mut h = Ejection::default();
    assert_eq!(
        e.request(&mut h, 0, 3, t0),
        Verdict::Ejected(Duration::from_secs(10))
    );
    assert_eq!(e.request(&mut h, 1, 3, t0), Verdict::AlreadyEjected);
    assert!(!e.expire(&mut h, t0 + Duration::from_secs(9)));
    assert!(e.expire(&mut h, t0 + Duration::from_secs(10)));
    assert_eq!(
        e.request(&mut h, 0, 3, t0),
        Verdict::Ejected(Duration::from_secs(20))
    );
}

#[test]
fn max_ejection_percent_rounds_down_but_allows_one() {
    assert_eq!(Ejector::new(od(34)).max_ejected(3), 1);
    assert_eq!(Ejector::new(od(10)).max_ejected(2), 1);
    assert_eq!(Ejector::new(od(67)).max_ejected(3), 2);
    let e = Ejector::new(od(34));
    let mut h = Ejection::default();
    assert_eq!(e.request(&mut h, 1, 3, Instant::now()), Verdict::Overflow);
    assert_eq!(h, Ejection::default());
}

#[test]
fn review_lowers_count_of_hosts_not_ejected() {
    let mut e = Ejector::new(od(100));
    let t0 = Instant::now();
    assert!(!e.review_due(t0), "the first call arms the interval");
    assert!(!e.review_due(t0 + Duration::from_millis(500)));
    assert!(e.review_due(t0 + Duration::from_secs(1)));
    let mut ejected = Ejection {
        times: 2,
        until: Some(t0),
    };
    let mut back = Ejection {
        times: 2,
        until: None,
    };
    e.review(&mut ejected);
    e.review(&mut back);
    assert_eq!((ejected.times, back.times), (2, 1));
}
