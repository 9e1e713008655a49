//! The collector thread as a background task of the machine it watches: it runs under
//! `SCHED_IDLE`, so the workload's threads (the fio, dd or database an engineer is looking
//! at) take the CPU first and preempt it the moment they wake, and it drains what the ring
//! buffer held meanwhile in CPU time nobody else wanted. On a load that is bound by
//! context switches and wake-up latency rather than by raw CPU, a reader at normal priority
//! delays the workload's wake-ups each time it runs; idle priority removes that.
//!
//! An idle-priority thread can starve on a machine with no spare CPU, and then the ring
//! fills and events are lost. So the policy watches how much each drain found: once one
//! drain finds more than a quarter of the ring, the thread returns to normal priority until
//! drains stay small for a while. Loss stays counted and shown either way.
//!
//! Owns: the calling thread's scheduling policy. Must not: drain or decode (the caller
//! reports what it drained).

use std::time::{Duration, Instant};

/// A drain finding more than this share of the ring means the thread is falling behind.
const BEHIND_SHARE: u64 = 4;
/// Drains must stay below this share of the ring for [`CALM_FOR`] before the thread goes
/// back to idle priority.
const CALM_SHARE: u64 = 16;
const CALM_FOR: Duration = Duration::from_secs(2);

/// The calling thread's policy, switched between idle and normal by how far behind it runs.
#[derive(Debug)]
pub struct BackgroundPolicy {
    ring_bytes: u64,
    idle: bool,
    /// While at normal priority: since when drains have been small.
    calm_since: Option<Instant>,
    /// Times the thread had to return to normal priority.
    pub escalations: u64,
}

impl BackgroundPolicy {
    /// Puts the calling thread at idle priority. `None` when the kernel refuses (then the
    /// thread simply stays at normal priority, as it would be without this).
    pub fn start(ring_bytes: u64) -> Option<BackgroundPolicy> {
        set_idle(true).ok()?;
        Some(BackgroundPolicy {
            ring_bytes: ring_bytes.max(1),
            idle: true,
            calm_since: None,
            escalations: 0,
        })
    }

    /// Whether the thread is at idle priority now.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// One drain found `bytes`: escalate or relax.
    pub fn drained(&mut self, bytes: u64, now: Instant) {
        match self.next(bytes, now) {
            Some(idle) if set_idle(idle).is_ok() => {
                self.idle = idle;
                if !idle {
                    self.escalations += 1;
                }
            }
            _ => {}
        }
    }

    /// The switch to make after a drain of `bytes` (`Some(true)`: to idle), updating the
    /// calm clock. Pure, for the tests.
    fn next(&mut self, bytes: u64, now: Instant) -> Option<bool> {
        if bytes > self.ring_bytes / BEHIND_SHARE {
            self.calm_since = None;
            return self.idle.then_some(false);
        }
        if self.idle {
            return None;
        }
        if bytes > self.ring_bytes / CALM_SHARE {
            self.calm_since = None;
            return None;
        }
        let since = *self.calm_since.get_or_insert(now);
        (now.duration_since(since) >= CALM_FOR).then(|| {
            self.calm_since = None;
            true
        })
    }
}

/// `SCHED_IDLE` (or back to `SCHED_OTHER`) for the calling thread.
fn set_idle(idle: bool) -> std::io::Result<()> {
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for either policy.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(idle: bool) -> BackgroundPolicy {
        BackgroundPolicy {
            ring_bytes: 64 << 20,
            idle,
            calm_since: None,
            escalations: 0,
        }
    }

    #[test]
    fn a_drain_of_a_quarter_of_the_ring_returns_to_normal_priority() {
        let t = Instant::now();
        let mut p = policy(true);
        assert_eq!(p.next(1 << 20, t), None);
        assert_eq!(p.next(16 << 20, t), None, "a quarter exactly is not behind");
        assert_eq!(p.next((16 << 20) + 1, t), Some(false));
    }

    #[test]
    fn back_to_idle_only_after_drains_stay_small_for_a_while() {
        let t = Instant::now();
        let mut p = policy(false);
        assert_eq!(p.next(1 << 20, t), None);
        assert_eq!(p.next(1 << 20, t + Duration::from_secs(1)), None);
        // A medium drain restarts the calm clock.
        assert_eq!(p.next(8 << 20, t + Duration::from_millis(1500)), None);
        assert_eq!(p.next(1 << 20, t + Duration::from_secs(2)), None);
        assert_eq!(p.next(1 << 20, t + Duration::from_millis(3900)), None);
        assert_eq!(p.next(1 << 20, t + Duration::from_secs(4)), Some(true));
    }

    #[test]
    fn behind_while_at_normal_priority_changes_nothing_but_the_clock() {
        let t = Instant::now();
        let mut p = policy(false);
        assert_eq!(p.next(1 << 20, t), None);
        assert_eq!(p.next(32 << 20, t + Duration::from_secs(1)), None);
        assert_eq!(p.next(1 << 20, t + Duration::from_secs(2)), None);
        assert_eq!(p.next(1 << 20, t + Duration::from_millis(3500)), None);
        assert_eq!(p.next(1 << 20, t + Duration::from_secs(4)), Some(true));
    }

    #[test]
    fn the_calling_thread_can_go_idle_and_back() {
        // A thread of its own: the policy is per thread and must not leak into the others.
        std::thread::spawn(|| {
            set_idle(true).unwrap();
            // SAFETY: reading the calling thread's policy.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                set_idle(false).unwrap();
                // SAFETY: as above.
                assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
            } else {
                // Unprivileged, RLIMIT_NICE decides the way back (`live` runs as root).
                let _ = set_idle(false);
            }
        })
        .join()
        .unwrap();
    }
}
