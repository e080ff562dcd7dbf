//! CPU time of processes from `/proc/PID/stat` (utime + stime, all threads).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// `--pid [LABEL=]PID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidSpec {
    pub label: String,
    pub pid: u32,
}

impl FromStr for PidSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (label, pid) = match s.split_once('=') {
            Some((l, p)) => (Some(l.trim().to_string()), p.trim()),
            None => (None, s.trim()),
        };
        let pid: u32 = pid
            .parse()
            .map_err(|_| format!("`{s}`: expected PID or LABEL=PID"))?;
        let label = match label {
            Some(l) if !l.is_empty() => l,
            _ => std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_else(|_| pid.to_string()),
        };
        Ok(PidSpec { label, pid })
    }
}

impl fmt::Display for PidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.label, self.pid)
    }
}

/// Clock ticks per second for `/proc/*/stat` times.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// utime + stime of a `/proc/PID/stat` line, in clock ticks.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    // comm (field 2) may contain spaces and ')': fields after the last ')' are reliable.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // rest starts at field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time consumed so far by `pid` ("self" for this process).
pub fn cpu_time(pid: &str) -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_stat_ticks(&stat).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("cannot parse /proc/{pid}/stat"),
        )
    })?;
    let hz = clock_ticks();
    Ok(Duration::from_micros(ticks * 1_000_000 / hz))
}

/// Busy (non-idle, non-iowait) time of the whole machine, summed over all CPUs, from the `cpu`
/// line of `/proc/stat`, in clock ticks.
pub fn parse_machine_busy_ticks(proc_stat: &str) -> Option<u64> {
    let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    if v.len() < 4 {
        return None;
    }
    let busy: u64 = v.iter().take(8).sum::<u64>() - v[3] - v.get(4).copied().unwrap_or(0);
    Some(busy)
}

/// Busy CPU time of the whole machine so far (all CPUs summed).
pub fn machine_busy() -> std::io::Result<Duration> {
    let s = std::fs::read_to_string("/proc/stat")?;
    let ticks = parse_machine_busy_ticks(&s).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "cannot parse /proc/stat")
    })?;
    Ok(Duration::from_micros(ticks * 1_000_000 / clock_ticks()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let line = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 4 0 \
                    100 1000 10 18446744073709551615";
        assert_eq!(parse_stat_ticks(line), Some(287));
    }

    #[test]
    fn parses_proc_stat_busy() {
        let s = "cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 50 2 25 500 10 1 1 0 0 0\nintr 1 2\n";
        // user+nice+system+irq+softirq+steal = 100+5+50+3+2+1; guest is inside user.
        assert_eq!(parse_machine_busy_ticks(s), Some(161));
        assert_eq!(parse_machine_busy_ticks("intr 1\n"), None);
        assert_eq!(parse_machine_busy_ticks("cpu  1 x 3 4\n"), None);
        assert!(machine_busy().is_ok());
    }

    #[test]
    fn self_cpu_time_readable() {
        assert!(cpu_time("self").is_ok());
    }

    #[test]
    fn pid_spec() {
        let p: PidSpec = "respite=42".parse().unwrap();
        assert_eq!(
            p,
            PidSpec {
                label: "respite".into(),
                pid: 42
            }
        );
        let p: PidSpec = std::process::id().to_string().parse().unwrap();
        assert!(!p.label.is_empty());
        assert!("x=y".parse::<PidSpec>().is_err());
    }
}
