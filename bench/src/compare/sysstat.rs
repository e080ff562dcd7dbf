//! Machine facts and process memory from /proc, and the run timestamp.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Resident set size of `pid` in KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: u32) -> Result<u64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    parse_vmrss_kib(&s).ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// The `VmRSS:  1234 kB` value of a /proc/PID/status text, in KiB.
pub fn parse_vmrss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What the numbers were measured on.
#[derive(Debug, Clone, Serialize)]
pub struct MachineInfo {
    /// Online CPUs.
    pub nproc: usize,
    /// `model name` of the first CPU in /proc/cpuinfo.
    pub cpu_model: Option<String>,
    /// `uname -r`.
    pub kernel: Option<String>,
    /// 1, 5 and 15 minute load averages when the comparison started.
    pub loadavg_at_start: Option<[f64; 3]>,
    pub redis_version: Option<String>,
    pub nutcracker_version: Option<String>,
    /// `git rev-parse --short HEAD` of the workspace, when available.
    pub respite_commit: Option<String>,
}

impl MachineInfo {
    /// Collects the facts (each one optional: missing files are not errors).
    pub fn collect(workspace: Option<&std::path::Path>) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let loadavg = std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| {
            let v: Vec<f64> = s
                .split_whitespace()
                .take(3)
                .filter_map(|f| f.parse().ok())
                .collect();
            (v.len() == 3).then(|| [v[0], v[1], v[2]])
        });
        let commit = workspace.and_then(|w| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(w)
                .args(["rev-parse", "--short", "HEAD"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        });
        MachineInfo {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpuinfo
                .lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string()),
            loadavg_at_start: loadavg,
            redis_version: super::procs::version_of("redis-server"),
            nutcracker_version: super::procs::version_of("nutcracker"),
            respite_commit: commit,
        }
    }
}

/// Current UTC time as `YYYYMMDDTHHMMSSZ`.
pub fn utc_timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Formats Unix seconds as `YYYYMMDDTHHMMSSZ` (proleptic Gregorian, UTC).
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmrss() {
        let s = "Name:\tredis\nVmPeak:\t  9000 kB\nVmRSS:\t    4321 kB\nThreads:\t4\n";
        assert_eq!(parse_vmrss_kib(s), Some(4321));
        assert_eq!(parse_vmrss_kib("Name: x\n"), None);
        assert!(rss_kib(std::process::id()).is_ok());
    }

    #[test]
    fn timestamps() {
        assert_eq!(format_utc(0), "19700101T000000Z");
        assert_eq!(format_utc(1_709_251_199), "20240229T235959Z");
        assert_eq!(format_utc(1_798_761_600), "20270101T000000Z");
    }
}
