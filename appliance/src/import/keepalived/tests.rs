use proptest::prelude::*;

use super::parse::{Node, SyntaxError, parse};
use super::{ImportError, Imported, import};

/// Every placeholder replaced as the operator of a lab appliance would.
pub(crate) fn fill(toml: &str) -> String {
    toml.lines()
        .map(|l| {
            let Some((key, value)) = l.split_once(" = ") else {
                return l.to_string();
            };
            if !value.contains("<fill in: ") {
                return l.to_string();
            }
            let v = match key {
                "name" => "\"lb1\"",
                "interfaces" => "[\"eth0\"]",
                "asn" if value.contains("appliance") => "65010",
                "asn" => "65000",
                "router_id" => "\"10.0.0.10\"",
                "address" => "\"10.0.0.1\"",
                other => panic!("unexpected placeholder key {other}: {l}"),
            };
            format!("{key} = {v}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The import's output, filled in, passes `sluice check`'s validation.
#[track_caller]
pub(crate) fn assert_valid(out: &Imported) {
    if let Err(e) = crate::config::Config::from_toml_str(&fill(&out.toml)) {
        panic!(
            "the import wrote what sluice check refuses: {e}\n{}",
            out.toml
        );
    }
}

/// The refusal's notes, or a panic naming what happened instead.
#[track_caller]
pub(crate) fn refused(text: &str) -> Vec<super::Note> {
    match import(text.as_bytes(), "t.conf") {
        Err(ImportError::Refused(l)) => l.notes,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn words(n: &Node) -> Vec<&str> {
    n.words.iter().map(String::as_str).collect()
}

#[test]
fn grammar_comments_quotes_and_braces_anywhere() {
    let text = "! header\n\
                $PORT=8080\n\
                virtual_server 192.0.2.10 80 { # inline comment\n\
                  lb_algo rr ! another\n\
                  real_server 10.0.0.1 ${PORT}\n\
                  {\n\
                    HTTP_GET { url { path \"/a b\" } }\n\
                  }\n\
                  misc_path '/bin/x \"y\"' tail\n\
                }\n";
    let (tree, skipped) = parse(text.as_bytes()).expect("parses");
    assert!(skipped.is_empty());
    assert_eq!(tree.len(), 1);
    let vs = &tree[0];
    assert_eq!(words(vs), ["virtual_server", "192.0.2.10", "80"]);
    assert_eq!((vs.line, vs.end_line), (3, 10));
    let c = vs.children();
    assert_eq!(words(&c[0]), ["lb_algo", "rr"]);
    // `{` on the line after the keyword opens that keyword's block; $PORT expanded.
    assert_eq!(words(&c[1]), ["real_server", "10.0.0.1", "8080"]);
    let http = &c[1].children()[0];
    assert_eq!(http.keyword(), "HTTP_GET");
    assert_eq!(words(&http.children()[0].children()[0]), ["path", "/a b"]);
    assert_eq!(words(&c[2]), ["misc_path", "/bin/x \"y\"", "tail"]);
}

#[test]
fn syntax_errors_name_their_line() {
    let cases: [(&[u8], SyntaxError); 6] = [
        (
            b"virtual_server 1.2.3.4 80 {\n}\n}\n",
            SyntaxError::ExtraClose { line: 3 },
        ),
        (
            b"global_defs {\n}\nvirtual_server 1.2.3.4 80 {\n  real_server 10.0.0.1 80 {\n}\n",
            SyntaxError::Unclosed {
                line: 3,
                keyword: "virtual_server 1.2.3.4 80".into(),
            },
        ),
        (
            b"a\nb \"open\n",
            SyntaxError::UnterminatedQuote {
                line: 2,
                quote: '"',
            },
        ),
        (b"a\nb\nc\0d\n", SyntaxError::NotText { line: 3, byte: 0 }),
        (
            b"ok\n\xff\xfe binary\n",
            SyntaxError::NotText {
                line: 2,
                byte: 0xff,
            },
        ),
        (b"x {\n}\n{\n", SyntaxError::BareOpen { line: 3 }),
    ];
    for (input, want) in cases {
        assert_eq!(parse(input).map(|_| ()), Err(want.clone()), "{want}");
        assert!(want.to_string().starts_with("line "), "{want}");
    }
    let deep = "a {\n".repeat(100);
    assert!(matches!(
        parse(deep.as_bytes()),
        Err(SyntaxError::TooDeep { line: 17 })
    ));
}

#[test]
fn unknown_keywords_are_errors_with_their_lines() {
    let text = "virtual_server 192.0.2.10 80 {\n\
                  persistance_timeout 300\n\
                  real_server 10.0.0.1 80 {\n\
                    wieght 3\n\
                  }\n\
                }\n\
                vrrp_instanse X {\n}\n";
    let Err(e @ ImportError::Refused(_)) = import(text.as_bytes(), "t.conf") else {
        panic!("unknown keywords must be refused");
    };
    let ImportError::Refused(l) = &e else {
        unreachable!()
    };
    let lines: Vec<usize> = l.notes.iter().map(|n| n.line).collect();
    assert_eq!(lines, [2, 4, 7]);
    assert!(
        l.notes[0].text.contains("\"persistance_timeout\""),
        "{}",
        l.notes[0]
    );
    let msg = e.to_string();
    assert!(
        msg.contains("line 4: \"wieght\" is not a keepalived keyword inside real_server"),
        "{msg}"
    );
}

#[test]
fn nothing_to_import_says_why() {
    let text = "virtual_server fwmark 1 {\n  real_server 10.0.0.1 80 {\n  }\n}\n";
    let notes = refused(text);
    assert_eq!(notes[0].line, 1);
    assert!(notes[0].text.contains("firewall marks"), "{}", notes[0]);
    let Err(ImportError::Nothing(_)) = import(b"global_defs {\n}\n", "t.conf") else {
        panic!("a file without a virtual_server has no VIP");
    };
}

#[test]
fn thresholds_schedulers_and_groups_map_like_ipvs() {
    let text = "virtual_server_group G {\n\
                  192.0.2.1-3 80\n\
                }\n\
                virtual_server group G {\n\
                  protocol TCP\n\
                  lvs_sched mh\n\
                  mh-port\n\
                  real_server 10.0.0.1 8080 {\n\
                    uthreshold 100\n\
                  }\n\
                  real_server 10.0.0.2 8080 {\n\
                    uthreshold 100\n\
                    lthreshold 10\n\
                  }\n\
                }\n";
    let out = import(text.as_bytes(), "t.conf").expect("imports");
    assert_eq!(out.vips, 3, "the range .1-3 is three VIPs");
    for a in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        assert!(out.toml.contains(&format!("address = \"{a}\"")), "{a}");
    }
    // IPVS resumes at 3/4 of uthreshold when there is no lthreshold.
    assert!(out.toml.contains("max_connections = 100"));
    assert!(out.toml.contains("resume_connections = 75"));
    assert!(out.toml.contains("resume_connections = 10"));
    assert!(out.toml.contains("overflow = \"reset\""));
    assert!(out.toml.contains("scheduler = \"maglev\""));
    assert!(out.toml.contains("hash = \"5-tuple\""));
    assert_valid(&out);
    // The import is deterministic.
    assert_eq!(
        import(text.as_bytes(), "t.conf").expect("again").toml,
        out.toml
    );
}

fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/keepalived")
        .join(name)
}

/// The three examples against their golden outputs (`SLUICE_UPDATE_GOLDEN=1` rewrites them),
/// and the notes each must carry: (line, words the note must contain).
#[test]
fn examples_match_their_golden_outputs() {
    let expected: [(&str, &[(usize, &str)]); 3] = [
        (
            "nat-http",
            &[
                (4, "global_defs"),
                (14, "vrrp_instance VI_WEB"),
                (40, "delay_before_retry"),
                (93, "verify_tls = false"),
            ],
        ),
        (
            "dr-persistence",
            &[
                (15, "vrrp_instance VI_APP"),
                (37, "sh-fallback"),
                (73, "Maglev"),
            ],
        ),
        (
            "tun-checks",
            &[
                (9, "vrrp_script"),
                (14, "vrrp_instance VI_TUN"),
                (44, "carried over as the http check"),
                (54, "10.30.0.11:8081"),
                (56, "misc_dynamic"),
            ],
        ),
    ];
    for (name, notes) in expected {
        let conf = std::fs::read(example(&format!("{name}.conf"))).expect("example");
        let out = import(&conf, &format!("{name}.conf")).expect("imports");
        let golden = example(&format!("{name}.sluice.toml"));
        if std::env::var_os("SLUICE_UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, &out.toml).expect("write golden");
        }
        assert_valid(&out);
        for (line, words) in notes {
            assert!(
                out.notes
                    .notes
                    .iter()
                    .any(|n| n.line == *line && n.text.contains(words)),
                "{name}: no note at line {line} with {words:?}; notes:\n{}",
                out.notes
                    .notes
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            assert!(
                out.toml.contains(&format!("#   line {line}: ")),
                "{name}: line {line} not in the header"
            );
        }
        let want = std::fs::read_to_string(&golden).expect("golden file");
        assert_eq!(
            out.toml,
            want,
            "{name}: output differs from {}",
            golden.display()
        );
    }
}

/// Keywords, braces, quotes, comments and line ends in any order.
fn soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("\n".to_string()),
        Just(" ".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("#".to_string()),
        Just("!".to_string()),
        Just("$X=1\n".to_string()),
        Just("@host ".to_string()),
        prop::sample::select(vec![
            "virtual_server",
            "real_server",
            "192.0.2.1",
            "80",
            "TCP_CHECK",
            "HTTP_GET",
            "url",
            "path",
            "/",
            "weight",
            "lb_algo",
            "sh",
            "lb_kind",
            "DR",
            "TUN",
            "fwmark",
            "group",
            "virtual_server_group",
            "persistence_timeout",
            "persistence_granularity",
            "uthreshold",
            "status_code",
            "200-299",
            "delay_loop",
            "0",
            "-1",
            "1e9",
            "$X",
            "vrrp_instance",
            "include",
            "protocol",
            "UDP",
            "ops",
            "MISC_CHECK",
            "misc_path",
        ])
        .prop_map(str::to_string),
    ];
    prop::collection::vec(piece, 0..200).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random bytes: an error naming a line inside the input, or an import; never a panic.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let lines = 1 + bytes.iter().filter(|b| **b == b'\n').count();
        if let Err(ImportError::Syntax(e)) = import(&bytes, "fuzz.conf") {
            let line: usize = e.to_string()["line ".len()..]
                .split(':')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            prop_assert!((1..=lines).contains(&line), "{e}");
        }
    }

    /// Keepalived-shaped soup: same, and a successful import, filled in, passes `sluice
    /// check`.
    #[test]
    fn keyword_soup_never_panics(text in soup()) {
        if let Ok(out) = import(text.as_bytes(), "soup.conf") {
            prop_assert!(out.toml.parse::<toml::Table>().is_ok(), "{}", out.toml);
            let filled = fill(&out.toml);
            let valid = crate::config::Config::from_toml_str(&filled);
            prop_assert!(valid.is_ok(), "{:?}\n{}", valid.err(), out.toml);
        }
    }
}

#[test]
fn one_packet_services_keep_no_thresholds_and_udp_overflow_drops() {
    let ops = "virtual_server 192.0.2.53 53 {\n  protocol UDP\n  ops\n  real_server 10.0.0.1 53 {\n    uthreshold 10\n  }\n}\n";
    let out = import(ops.as_bytes(), "t.conf").expect("imports");
    assert!(out.toml.contains("udp_one_packet = true"));
    assert!(!out.toml.contains("max_connections"), "{}", out.toml);
    assert!(
        out.notes
            .notes
            .iter()
            .any(|n| n.line == 1 && n.text.contains("one-packet"))
    );
    let udp = ops.replace("  ops\n", "");
    let out = import(udp.as_bytes(), "t.conf").expect("imports");
    assert!(out.toml.contains("max_connections = 10"));
    assert!(
        out.toml.contains("overflow = \"drop\""),
        "a UDP VIP has nothing to reset"
    );
}

#[test]
fn definitions_expand_inside_each_other_as_keepalived_does() {
    let text = "$PORT=8080\n$RS=10.0.0.1 $PORT\n$NOTME=9\n\
                virtual_server 192.0.2.10 80 {\n  real_server ${RS} {\n  }\n  weight $NOTMEx\n}\n";
    let (tree, _) = parse(text.as_bytes()).expect("parses");
    let c = tree[0].children();
    assert_eq!(words(&c[0]), ["real_server", "10.0.0.1", "8080"]);
    // keepalived matches an unbraced name only before a space, tab, ',' or ')'.
    assert_eq!(words(&c[1]), ["weight", "$NOTMEx"]);
}

#[test]
fn expansion_is_bounded_by_keepalived_s_line_and_the_file() {
    let long = "a".repeat(1000);
    // One line asking for 2,000 copies of a 1,000-byte value: keepalived's 1,024-byte line.
    let bomb = format!("$X={long}\nvirtual_server {}\n", "$X ".repeat(2000));
    assert_eq!(
        parse(bomb.as_bytes()).map(|_| ()),
        Err(SyntaxError::LineTooLong { line: 2 })
    );
    // Every line within the limit, the whole far beyond what the file holds.
    let lines = format!("$X={long}\n{}", "$X\n".repeat(40_000));
    let e = parse(lines.as_bytes()).map(|_| ()).unwrap_err();
    assert!(
        matches!(e, SyntaxError::TooLarge { line } if line > 30_000),
        "{e}"
    );
    // Definitions that name each other never end.
    let looped = "$A=$B\n$B=$A\nvirtual_server $A\n";
    assert_eq!(
        parse(looped.as_bytes()).map(|_| ()),
        Err(SyntaxError::ExpansionLoop { line: 3 })
    );
}

#[test]
fn another_kind_of_file_is_refused_without_repeating_it() {
    let shadow = "root:$y$j9T$Qx1$abcdef:19000:0:99999:7:::\n\
                  daemon:*:19000:0:99999:7:::\n\
                  alice:$6$salt$hash:19001:0:99999:7:::\n";
    let e = import(shadow.as_bytes(), "shadow").unwrap_err();
    assert_eq!(e, ImportError::NotKeepalived { statements: 3 });
    let msg = e.to_string();
    for secret in ["root", "daemon", "alice", "$y$", "19000"] {
        assert!(!msg.contains(secret), "{secret:?} echoed: {msg}");
    }
    // In a keepalived.conf, a word that is not keyword-shaped is not repeated either.
    let mixed = "virtual_server 192.0.2.1 80 {\n  root:$y$j9T:19000 x\n}\n";
    let notes = refused(mixed);
    let odd = notes.iter().find(|n| n.line == 2).expect("line 2 refused");
    assert!(odd.text.contains("not shown"), "{odd}");
    assert!(notes.iter().all(|n| !n.text.contains("root")), "{notes:?}");
}
