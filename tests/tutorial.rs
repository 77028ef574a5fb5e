//! The manual's tutorial (docs/manual/tutorial.md) as a reader follows it: this test builds
//! the chapter's network in namespaces (a client, a router running BIRD, the appliance and
//! three web servers running nginx on one LAN bridge), then runs every block of the chapter
//! on the host its first line names (`# on the appliance`, `# on each web server`...): the
//! shell commands line by line, the appliance's TOML as its configuration file, the BIRD
//! configuration as the router's. What the chapter promises is then checked: the route in
//! the router's kernel, the client answered by all three web servers, and after the drain
//! none of its new connections reaching web1. Needs root, nginx, bird2 and curl.
//!
//! The commands run as written except for three paths this machine must not share with
//! other tests: `/etc/sluice/sluice.toml` becomes a file of the test's, `sluice ctl` is given
//! the test's API socket (the file gets an `[api] socket`), and `birdc` the test's BIRD
//! control socket. `sluice run` is started in the background, as a service would be.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use lab::bird::Bird;
use lab::netns::{Netns, bridge, require_program, require_root, veth};
use lab::testing::{Daemon, Nginx, TempDir, poll, repo};

/// One fenced block of the chapter: where it runs, its language and its lines after the
/// first (which names the host, and for a file its path).
struct Block {
    host: String,
    lang: String,
    head: String,
    body: String,
}

/// The chapter's blocks that name a host (`# on HOST` or `# PATH on HOST` as first line).
fn blocks(chapter: &str) -> Vec<Block> {
    let mut out = Vec::new();
    for (i, part) in chapter.split("```").enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let (lang, rest) = part.split_once('\n').unwrap_or((part, ""));
        let (head, body) = rest.split_once('\n').unwrap_or((rest, ""));
        let Some((_, host)) = head.strip_prefix("# ").and_then(|h| h.split_once("on ")) else {
            continue;
        };
        out.push(Block {
            host: host.trim().to_string(),
            lang: lang.trim().to_string(),
            head: head.to_string(),
            body: body.to_string(),
        });
    }
    out
}

/// The chapter's network: namespaces, links and addresses, nginx on every web server
/// answering with its name.
struct Net {
    tmp: TempDir,
    router: Netns,
    client: Netns,
    lb: Netns,
    webs: Vec<Netns>,
    _nginx: Vec<Nginx>,
}

impl Net {
    fn build() -> Net {
        let tmp = TempDir::new("tut");
        let (router, client, lb) = (Netns::new("tutr"), Netns::new("tutc"), Netns::new("tutl"));
        let webs: Vec<Netns> = (1..=3).map(|k| Netns::new(&format!("tutw{k}"))).collect();
        bridge(&router, "lan");
        router.sh(
            "ip addr add 10.77.0.1/24 dev lan && sysctl -qw net.ipv4.ip_forward=1 && \
             ip link set lo up",
        );
        veth(&client, "eth0", &router, "cl");
        router.sh("ip addr add 10.77.9.1/24 dev cl");
        client.sh(
            "ip addr add 10.77.9.2/24 dev eth0 && ip route add default via 10.77.9.1 && \
             ip link set lo up",
        );
        let hosts = std::iter::once((&lb, "p-lb", "10.77.0.10".to_string())).chain(
            webs.iter().enumerate().map(|(k, w)| {
                (
                    w,
                    ["p-w1", "p-w2", "p-w3"][k],
                    format!("10.77.0.2{}", k + 1),
                )
            }),
        );
        for (ns, port, addr) in hosts {
            veth(ns, "eth0", &router, port);
            router.run(&["ip", "link", "set", port, "master", "lan"]);
            ns.sh(&format!(
                "ip addr add {addr}/24 dev eth0 && ip route add default via 10.77.0.1 && \
                 ip link set lo up"
            ));
        }
        // The appliance's XDP program sends DR frames back out of its veth: the bridge's end
        // must run NAPI (see xdp_tx_ready in lab/src/topology.rs).
        router.run(&["ethtool", "-K", "p-lb", "gro", "on"]);
        let nginx = webs
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let http = format!(
                    "server {{ listen 80; listen [::]:80; \
                     location / {{ return 200 \"web{}\\n\"; }} }}\n",
                    k + 1
                );
                Nginx::start(
                    w,
                    &tmp.dir().join(format!("nginx{}", k + 1)),
                    256,
                    &http,
                    80,
                )
            })
            .collect();
        Net {
            tmp,
            router,
            client,
            lb,
            webs,
            _nginx: nginx,
        }
    }

    /// The namespaces a block's host names.
    fn hosts(&self, host: &str) -> Vec<&Netns> {
        match host {
            "the appliance" => vec![&self.lb],
            "each web server" => self.webs.iter().collect(),
            "the router" => vec![&self.router],
            "the client" => vec![&self.client],
            other => panic!("the tutorial names a host this test does not build: {other:?}"),
        }
    }

    fn config(&self) -> PathBuf {
        self.tmp.dir().join("sluice.toml")
    }

    fn api_socket(&self) -> PathBuf {
        self.tmp.dir().join("api.sock")
    }

    fn bird_socket(&self) -> PathBuf {
        self.tmp.dir().join("bird").join("bird.ctl")
    }

    /// `line` with the test's paths in place of the machine's (see the module's comment).
    fn local(&self, line: &str) -> String {
        line.replace("/etc/sluice/sluice.toml", &self.config().to_string_lossy())
            .replace(
                "sluice ctl ",
                &format!("sluice ctl --socket {} ", self.api_socket().display()),
            )
            .replace(
                "birdc ",
                &format!("birdc -s {} ", self.bird_socket().display()),
            )
    }
}

/// Runs `line` in `ns` with this build's `sluice` first on the PATH.
fn shell(ns: &Netns, line: &str) -> Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_sluice"))
        .parent()
        .expect("the binary's directory")
        .to_string_lossy()
        .to_string();
    ns.output(&[
        "env",
        &format!("PATH={bin}:/usr/sbin:/usr/bin:/sbin:/bin"),
        "bash",
        "-c",
        line,
    ])
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What `line` must show before the chapter's next step makes sense, for the commands that
/// wait on the network (the route, the first answer); others must just succeed.
fn expected(line: &str) -> Option<&'static str> {
    if line.starts_with("birdc ") {
        Some("192.0.2.80/32")
    } else if line.starts_with("ip route show") {
        Some("via 10.77.0.10")
    } else if line.starts_with("curl ") {
        Some("web")
    } else {
        None
    }
}

/// The client's new connections to the VIP, `n` of them: answers by web server.
fn spread(net: &Net, n: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..n {
        let o = shell(&net.client, "curl -s --max-time 2 http://192.0.2.80/");
        let who = String::from_utf8_lossy(&o.stdout).trim().to_string();
        *seen.entry(who).or_insert(0) += 1;
    }
    seen
}

#[test]
fn the_tutorial_runs_as_written() {
    require_root();
    require_program("nginx", "nginx");
    require_program("bird", "bird2");
    require_program("curl", "curl");
    let chapter = std::fs::read_to_string(repo().join("docs/manual/tutorial.md")).expect("chapter");
    let steps = blocks(&chapter);
    assert!(steps.len() >= 7, "the chapter's blocks: {}", steps.len());
    let net = Net::build();
    let mut appliance: Option<Daemon> = None;
    let mut _bird: Option<Bird> = None;
    let mut ran = 0;
    for b in &steps {
        match (b.lang.as_str(), b.head.as_str()) {
            ("toml", h) if h.contains("/etc/sluice/sluice.toml") => {
                let file = format!(
                    "{}\n{}\n[api]\nsocket = \"{}\"\n",
                    b.head,
                    b.body,
                    net.api_socket().display()
                );
                std::fs::write(net.config(), file).expect("write the config");
            }
            ("text", h) if h.contains("bird.conf") => {
                let dir = net.tmp.dir().join("bird");
                std::fs::create_dir_all(&dir).expect("bird dir");
                let bird = Bird::start(&net.router, &dir, &b.body)
                    .unwrap_or_else(|e| panic!("BIRD with the chapter's configuration: {e}"));
                _bird = Some(bird);
            }
            ("sh", _) => {
                for line in b.body.lines().map(str::trim) {
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    let local = net.local(line);
                    for ns in net.hosts(&b.host) {
                        if line.starts_with("sluice run ") {
                            let log = std::fs::File::create(net.tmp.dir().join("sluice.log"))
                                .expect("log");
                            let args: Vec<&str> = local.split_whitespace().collect();
                            let mut full = vec![env!("CARGO_BIN_EXE_sluice")];
                            full.extend(&args[1..]);
                            let child = ns.try_spawn(&full, Some(log)).expect("sluice run");
                            appliance = Some(Daemon(child));
                            continue;
                        }
                        let want = expected(line);
                        let mut last = String::new();
                        let done =
                            poll(Duration::from_secs(60), Duration::from_millis(500), || {
                                let o = shell(ns, &local);
                                last = text(&o);
                                o.status.success() && want.is_none_or(|w| last.contains(w))
                            });
                        let log = std::fs::read_to_string(net.tmp.dir().join("sluice.log"))
                            .unwrap_or_default();
                        assert!(
                            done.is_some(),
                            "`{line}` on {} (as run: `{local}`) did not succeed{}:\n{last}\n\
                             ---- sluice run's log ----\n{log}",
                            b.host,
                            want.map(|w| format!(" showing {w:?}")).unwrap_or_default()
                        );
                        if line.starts_with("sluice check") {
                            assert!(
                                last.contains(
                                    "1 vip(s), 3 backend(s), 1 health check(s), 1 bgp peer(s)"
                                ),
                                "the summary the chapter quotes: {last}"
                            );
                        }
                        if line.starts_with("sluice ctl backends") {
                            for w in ["10.77.0.21:80", "10.77.0.22:80", "10.77.0.23:80"] {
                                assert!(last.contains(w), "{w} in: {last}");
                            }
                        }
                        ran += 1;
                    }
                    // After the first answer the chapter says new connections spread over
                    // the three web servers; after the drain, none reaches web1.
                    if line.starts_with("curl ") {
                        let seen = spread(&net, 30);
                        assert_eq!(seen.len(), 3, "all three web servers answer: {seen:?}");
                    }
                    if line.starts_with("sluice ctl drain web 10.77.0.21:80") {
                        let seen = spread(&net, 30);
                        assert!(
                            !seen.contains_key("web1") && !seen.contains_key(""),
                            "after the drain no new connection reaches web1, every one is \
                             answered: {seen:?}"
                        );
                    }
                }
            }
            (lang, head) => panic!("a block this test cannot run: {lang} {head}"),
        }
    }
    assert!(appliance.is_some(), "the chapter starts the appliance");
    assert!(ran >= 12, "commands run: {ran}");
}
