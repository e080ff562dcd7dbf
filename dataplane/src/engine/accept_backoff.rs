//! The pause of an accept loop after a failed `accept`: at the fd limit (`EMFILE`, `ENFILE`) or
//! out of kernel memory (`ENOBUFS`, `ENOMEM`) the listener's queue stays full and every accept
//! fails again at once, so retrying without a pause spins a core and floods the log. The pause
//! starts at 10 ms and doubles up to 1 s while accepts keep failing that way; one accepted
//! connection starts it over. Other errors (a connection reset while queued, `ECONNABORTED`)
//! concern one connection, not the process: they pause 10 ms, without doubling (an error that
//! persisted anyway would still not spin).

use std::io;
use std::time::Duration;

/// The first pause after a resource error.
const FIRST: Duration = Duration::from_millis(10);
/// The longest pause.
const CAP: Duration = Duration::from_secs(1);

/// One accept loop's pause state.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    /// The next pause; zero until a resource error.
    next: Duration,
}

impl AcceptBackoff {
    /// An accept succeeded: the next resource error pauses [`FIRST`] again.
    #[inline]
    pub fn reset(&mut self) {
        self.next = Duration::ZERO;
    }

    /// An accept failed with `e`: how long to wait before the next one.
    pub fn on_error(&mut self, e: &io::Error) -> Duration {
        if !is_resource_error(e) {
            return FIRST;
        }
        let pause = self.next.max(FIRST);
        self.next = pause.saturating_mul(2).min(CAP);
        pause
    }
}

/// True for the errors that say the process or the system is out of a resource (file
/// descriptors, socket buffers, memory) rather than that one connection went wrong.
pub fn is_resource_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_a_second_and_resets_on_success() {
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let mut b = AcceptBackoff::default();
        let pauses: Vec<u64> = (0..10)
            .map(|_| b.on_error(&emfile).as_millis() as u64)
            .collect();
        assert_eq!(
            pauses,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000],
            "pauses"
        );
        b.reset();
        assert_eq!(b.on_error(&emfile), Duration::from_millis(10));
        for errno in [libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            let mut b = AcceptBackoff::default();
            assert_eq!(
                b.on_error(&io::Error::from_raw_os_error(errno)),
                Duration::from_millis(10),
                "errno {errno}"
            );
        }
    }

    #[test]
    fn per_connection_errors_pause_briefly_without_doubling() {
        let mut b = AcceptBackoff::default();
        for errno in [
            libc::ECONNABORTED,
            libc::EPROTO,
            libc::EPERM,
            libc::ECONNABORTED,
        ] {
            assert_eq!(
                b.on_error(&io::Error::from_raw_os_error(errno)),
                Duration::from_millis(10)
            );
        }
        // Nor do they move the resource pause.
        assert_eq!(
            b.on_error(&io::Error::from_raw_os_error(libc::EMFILE)),
            Duration::from_millis(10)
        );
    }
}
