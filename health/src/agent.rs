//! HAProxy's agent check, so a backend can say how it wants to be used: the prober connects
//! to the agent's port, sends `send` if set, and reads one line of words separated by spaces,
//! commas or tabs (HAProxy's `agent-check` protocol, section 5.2 of its configuration
//! manual):
//!
//! - `up` or `ready`: take traffic; `drain`: keep flows, take no new ones; `maint`: the same,
//!   shown as maintenance;
//! - `down`, `fail`, `failed` or `stopped` (with an optional `#description`): the backend is
//!   down, as if a check had failed;
//! - `75%`: take flows at this share of the weight the operator set (0 to 1000%);
//! - `maxconn:N` and words it does not know: ignored.
//!
//! Unlike HAProxy, each answer is whole: one without a percentage means 100%, one without
//! `drain` or `maint` means ready. An agent that cannot be reached, or answers nothing it
//! understands, gives no verdict ([`Failure::NoVerdict`]): reachability is the other checks'
//! business. What the agent asks for is the backend's, never the operator's: the appliance
//! applies it over the operator's settings and shows it apart from them.

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::outcome::{Failure, Outcome, Pass};

/// The longest answer read.
const MAX_ANSWER: usize = 1024;
/// The largest weight percentage accepted.
pub const MAX_PERCENT: u16 = 1000;

/// What the agent asks for while it is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AgentState {
    pub admin: AgentAdmin,
    /// The share of the operator's weight, in percent; `None` is 100%.
    pub weight_percent: Option<u16>,
}

impl AgentState {
    /// The answer `up` (or no agent at all): ready at the full weight.
    pub const READY: AgentState = AgentState {
        admin: AgentAdmin::Ready,
        weight_percent: None,
    };

    /// `weight` scaled by the percentage; never 0 for a non-zero share of a non-zero
    /// weight (a backend asked to take 1% still takes some), at most `max`.
    pub fn weight(&self, weight: u32, max: u32) -> u32 {
        match self.weight_percent {
            None => weight,
            Some(0) => 0,
            Some(p) => {
                let w = u64::from(weight) * u64::from(p) / 100;
                (w.max(u64::from(weight > 0)) as u32).min(max)
            }
        }
    }
}

impl std::fmt::Display for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.admin.name())?;
        match self.weight_percent {
            Some(p) => write!(f, " {p}%"),
            None => Ok(()),
        }
    }
}

/// The agent's administrative word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentAdmin {
    /// `up`, `ready` or no word: takes new flows.
    Ready,
    /// `drain`: keeps its flows, takes no new ones.
    Drain,
    /// `maint`: as drain, named maintenance.
    Maint,
}

impl AgentAdmin {
    pub fn name(self) -> &'static str {
        match self {
            AgentAdmin::Ready => "ready",
            AgentAdmin::Drain => "drain",
            AgentAdmin::Maint => "maint",
        }
    }
}

/// One answer as the probe's outcome.
pub fn parse(answer: &str) -> Outcome {
    let (words, description) = match answer.split_once('#') {
        Some((w, d)) => (w, d.trim()),
        None => (answer, ""),
    };
    let mut state = AgentState::READY;
    let mut down = false;
    let mut understood = false;
    for w in words
        .split([' ', '\t', ',', '\r', '\n'])
        .filter(|w| !w.is_empty())
    {
        let lower = w.to_ascii_lowercase();
        understood |= match lower.as_str() {
            "up" | "ready" => true,
            "drain" => {
                state.admin = AgentAdmin::Drain;
                true
            }
            "maint" => {
                state.admin = AgentAdmin::Maint;
                true
            }
            "down" | "fail" | "failed" | "stopped" => {
                down = true;
                true
            }
            p if p.ends_with('%') => match p.trim_end_matches('%').parse::<u16>() {
                Ok(n) if n <= MAX_PERCENT => {
                    state.weight_percent = Some(n);
                    true
                }
                _ => false,
            },
            _ => false,
        };
    }
    if down {
        return Err(Failure::AgentDown(printable(description)));
    }
    if !understood {
        return Err(Failure::NoVerdict(if words.trim().is_empty() {
            "empty answer".into()
        } else {
            format!(
                "answer {:?} has no word it understands",
                printable(words.trim())
            )
        }));
    }
    Ok(Pass::Agent(state))
}

/// At most 64 printable characters of what the agent said, for the log and the API.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// Asks the agent at `addr` once: connect, send `send`, read one line (or until it closes).
pub(crate) async fn probe(addr: SocketAddr, source: Option<IpAddr>, send: Option<&str>) -> Outcome {
    let silent = |f: Failure| Failure::NoVerdict(format!("agent at {addr}: {f}"));
    let mut stream = crate::probe::connect(addr, source, send.is_some())
        .await
        .map_err(|f| match f {
            Failure::Local(_) => f,
            other => silent(other),
        })?;
    if let Some(s) = send {
        stream
            .write_all(s.as_bytes())
            .await
            .map_err(|e| silent(crate::probe::io_failure(e)))?;
    }
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 256];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| silent(crate::probe::io_failure(e)))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.contains(&b'\n') || buf.len() >= MAX_ANSWER {
            break;
        }
    }
    let line = buf.split(|b| *b == b'\n').next().unwrap_or(&[]);
    parse(&String::from_utf8_lossy(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(admin: AgentAdmin, pct: Option<u16>) -> Outcome {
        Ok(Pass::Agent(AgentState {
            admin,
            weight_percent: pct,
        }))
    }

    #[test]
    fn answers_as_haproxy_agents_write_them() {
        use AgentAdmin::*;
        assert_eq!(parse("up\n"), state(Ready, None));
        assert_eq!(parse("50%"), state(Ready, Some(50)));
        assert_eq!(parse("ready,75%\r\n"), state(Ready, Some(75)));
        assert_eq!(parse("drain"), state(Drain, None));
        assert_eq!(parse("MAINT 10%"), state(Maint, Some(10)));
        assert_eq!(parse("up maxconn:30 80%"), state(Ready, Some(80)));
        assert_eq!(
            parse("down #disk full"),
            Err(Failure::AgentDown("disk full".into()))
        );
        assert_eq!(parse("stopped"), Err(Failure::AgentDown(String::new())));
        assert!(matches!(parse(""), Err(Failure::NoVerdict(_))));
        assert!(matches!(parse("hello there"), Err(Failure::NoVerdict(_))));
        assert!(matches!(parse("2000%"), Err(Failure::NoVerdict(_))));
        assert_eq!(
            Failure::AgentDown("disk full".into()).to_string(),
            "agent says down: disk full"
        );
    }

    #[test]
    fn weights_scale_and_never_vanish_by_rounding() {
        let at = |p| AgentState {
            admin: AgentAdmin::Ready,
            weight_percent: Some(p),
        };
        assert_eq!(at(50).weight(100, 65535), 50);
        assert_eq!(at(50).weight(1, 65535), 1, "a share of a weight of 1");
        assert_eq!(at(0).weight(100, 65535), 0);
        assert_eq!(at(1000).weight(100, 500), 500, "capped");
        assert_eq!(AgentState::READY.weight(7, 65535), 7);
        assert_eq!(at(50).to_string(), "ready 50%");
    }

    #[tokio::test]
    async fn an_agent_is_asked_and_its_line_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = [0u8; 5];
            s.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"ping\n");
            s.write_all(b"drain 40%\nignored\n").await.unwrap();
        });
        assert_eq!(
            probe(addr, None, Some("ping\n")).await,
            state(AgentAdmin::Drain, Some(40))
        );
        server.await.unwrap();
        // Nobody listening: no verdict, not a failure.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert!(matches!(
            probe(closed, None, None).await,
            Err(Failure::NoVerdict(_))
        ));
    }
}
