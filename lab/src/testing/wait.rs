//! Bounded waits: poll a condition until it holds or a limit passes, and fail the test with
//! what was awaited (and what the world looked like) when it never does.

use std::time::{Duration, Instant};

/// How often [`wait_until`] looks.
const POLL: Duration = Duration::from_millis(100);

/// A poll interval fine enough to time a failover (a BFD detection of 300 ms).
pub const FAILOVER_POLL: Duration = Duration::from_millis(20);

/// Polls `cond` every `every` until it holds or `limit` passes (it is asked at least once,
/// and once more at the limit); how long it took to hold, or `None`.
pub fn poll(limit: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Polls `f` every `every` until it gives a value and returns it; fails the test after
/// `limit` ("timed out after LIMIT waiting for WHAT").
pub fn wait_for<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let mut got = None;
    poll(limit, every, || {
        got = f();
        got.is_some()
    });
    got.unwrap_or_else(|| panic!("timed out after {limit:?} waiting for {what}"))
}

/// Polls `cond` every 100 ms until it holds; how long that took. Fails the test after
/// `limit` with `what` and `context()` (what the test can show of the world: a router's
/// view, a log).
pub fn wait_until(
    what: &str,
    limit: Duration,
    cond: impl FnMut() -> bool,
    context: impl Fn() -> String,
) -> Duration {
    poll(limit, POLL, cond).unwrap_or_else(|| {
        panic!(
            "timed out after {limit:?} waiting for {what}\n--- what it looked like ---\n{}",
            context()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_until_the_condition_holds_or_the_limit_passes() {
        let mut n = 0;
        let took = poll(Duration::from_secs(5), Duration::from_millis(1), || {
            n += 1;
            n == 3
        });
        assert!(took.is_some() && n == 3);
        let mut asked = 0;
        assert_eq!(
            poll(Duration::from_millis(20), Duration::from_millis(5), || {
                asked += 1;
                false
            }),
            None
        );
        assert!(asked >= 2, "asked {asked} times");
        let v = wait_for("three", Duration::from_secs(5), Duration::ZERO, || {
            n += 1;
            (n > 5).then_some(n)
        });
        assert_eq!(v, 6);
    }

    #[test]
    #[should_panic(expected = "waiting for nothing")]
    fn wait_until_names_what_never_came() {
        wait_until("nothing", Duration::ZERO, || false, String::new);
    }
}
